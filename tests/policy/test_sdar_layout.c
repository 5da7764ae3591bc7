/* The sdar policy's step loop (policy/sdar.c) driven through its ops with constructed logits, no
 * model: the attention shape of denoise and refresh steps (specd_sdar_visible), the gate on every
 * block row, at least one fill per denoise step, the refresh that commits the block through base
 * causal rows (lossless: chain-verified, a rejection restarts the next block from masks; block:
 * unverified and flagged lossy), and bad options refused with a message naming them. Vocabulary
 * 16, B = 3, greedy, mask id 0; each expected layout is traced by hand from the design comment at
 * the top of policy/sdar.c. The real-model checks are test_sdar_model. */
#include "test_main.h"

#include "policy/sdar_layout.h"
#include "specd/policy.h"
#include "specd/spec.h"

#include <math.h>
#include <string.h>

enum { V = 16, B = 3, MASK = 0, N = 10 };

static const specd_policy_ops *ops;

static void *make(const char *opts, int32_t max_step_rows) {
    specd_policy_env env = {
        .n_vocab = V, .max_draft = 8, .rule = SPECD_ACCEPT_GREEDY, .max_step_rows = max_step_rows};
    env.sampling = specd_sampling_default_params();
    env.sampling.temperature = 0.0f;
    void *st = NULL;
    specd_error err;
    if (ops->create(&env, opts, &st, &err) != SPECD_OK)
        fail_msg("create %s: %s", opts, err.message);
    return st;
}

static void peaked(float *row, int tok) {
    for (int v = 0; v < V; v++)
        row[v] = v == tok ? 30.0f : 0.0f;
}
static void flat(float *row) {
    memset(row, 0, V * sizeof(float));
}

/* Row r of a step with n_cached cached rows, `head` causal rows and a block of `blk`: which
 * entries it sees, spelled out independently of specd_sdar_visible's loop. */
static void expect_visible(const uint8_t *vis, int n_cached, int head, int blk) {
    const int n_tok = head + blk, width = n_cached + n_tok;
    for (int r = 0; r < n_tok; r++)
        for (int j = 0; j < width; j++) {
            int want;
            if (j < n_cached)
                want = 1; /* the committed prefix: everyone */
            else if (r < head)
                want = j - n_cached <= r; /* head: causal over the head only */
            else
                want = 1; /* block rows: the head and every block row, before or after */
            if (vis[r * width + j] != want)
                fail_msg("row %d (of %d head, %d block) entry %d: %d, want %d", r, head, blk, j,
                         vis[r * width + j], want);
        }
}

static void test_visible_shape(void **s) {
    (void)s;
    uint8_t vis[7 * (4 + 7)];
    memset(vis, 7, sizeof vis);
    specd_sdar_visible(vis, 4, 4, 3); /* a refresh step: pending + 3 block tokens, 3 masks */
    expect_visible(vis, 4, 4, 3);
    /* row 1 (a head row) must not see row 2 or any block row; row 5 (a block row) sees row 6 */
    assert_int_equal(vis[1 * 11 + 4 + 2], 0);
    assert_int_equal(vis[1 * 11 + 4 + 4], 0);
    assert_int_equal(vis[5 * 11 + 4 + 6], 1);
    specd_sdar_visible(vis, 0, 1, 2);
    expect_visible(vis, 0, 1, 2);
}

static void expect_step(const specd_step_layout *l, int head, const int32_t *tok,
                        const int32_t *pos) {
    const int n_tok = head + B;
    assert_int_equal(l->n_tokens, n_tok);
    assert_int_equal(l->n_rows, n_tok);
    assert_memory_equal(l->tokens, tok, (size_t)n_tok * sizeof(int32_t));
    assert_memory_equal(l->pos, pos, (size_t)n_tok * sizeof(int32_t));
    assert_non_null(l->visible);
    expect_visible(l->visible, pos[0], head, B); /* the pending row sits at n_cached */
    for (int r = 0; r < n_tok; r++)
        assert_int_equal(l->rows[r], r);
}

static void test_lossless_loop(void **s) {
    (void)s;
    specd_error err;
    void *st = make("block=3,mask=0", 0);
    int32_t hist[32];
    for (int i = 0; i < N; i++)
        hist[i] = 1 + i; /* pending 10 at pos 9 */
    specd_step_layout l;
    specd_step_outcome o;
    float lg[(2 * B + 1) * V];

    /* denoise 1: [10@9 | M@10 M@11 M@12]; every block row flat: only slot 0 is filled, from the
     * pending row (4), plus the rule's own at-least-one (most confident mask: all tie, leftmost
     * eligible is slot 1, argmax of a flat row is token 0) */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    expect_step(&l, 1, (const int32_t[]){10, MASK, MASK, MASK}, (const int32_t[]){9, 10, 11, 12});
    assert_null(l.lora_gate); /* no adapter: no gate */
    peaked(lg, 4), flat(lg + V), flat(lg + 2 * V), flat(lg + 3 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 0);
    assert_int_equal(o.n_keep, 0);

    /* denoise 2: [10@9 | 4@10 0@11 M@12]: the last mask is filled (at least one per step) */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    expect_step(&l, 1, (const int32_t[]){10, 4, 0, MASK}, (const int32_t[]){9, 10, 11, 12});
    peaked(lg, 4), flat(lg + V), flat(lg + 2 * V), peaked(lg + 3 * V, 6);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 0);

    /* refresh: [10@9 4@10 0@11 6@12 | M@13 M@14 M@15]: head causal, next block bidirectional.
     * Rows 0..2 verify drafts 4, 0, 6 (greedy): all accepted, no bonus; keep rows 0..2 */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    expect_step(&l, 1 + B, (const int32_t[]){10, 4, 0, 6, MASK, MASK, MASK},
                (const int32_t[]){9, 10, 11, 12, 13, 14, 15});
    /* row 3 (token 6 @12, base) predicts slot 13 exactly: 9; mask rows: 14 peaked on 11 (> tau),
     * 15 flat */
    peaked(lg, 4), peaked(lg + V, 0), peaked(lg + 2 * V, 6), peaked(lg + 3 * V, 9);
    flat(lg + 4 * V), peaked(lg + 5 * V, 11), flat(lg + 6 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 3);
    assert_memory_equal(o.emitted, ((const int32_t[]){4, 0, 6}), 3 * sizeof(int32_t));
    assert_int_equal(o.n_keep, 3);
    assert_memory_equal(o.keep, ((const int32_t[]){0, 1, 2}), 3 * sizeof(int32_t));
    assert_int_equal(o.n_drafted, 3);
    assert_int_equal(o.n_accepted, 3);
    assert_false(o.lossy);
    hist[10] = 4, hist[11] = 0, hist[12] = 6;

    /* the next block starts with 9 (exact) and 11 (threshold): [6@12 | 9@13 11@14 M@15] */
    assert_int_equal(ops->layout(st, hist, 13, &l, &err), SPECD_OK);
    expect_step(&l, 1, (const int32_t[]){6, 9, 11, MASK}, (const int32_t[]){12, 13, 14, 15});
    peaked(lg, 9), flat(lg + V), flat(lg + 2 * V), peaked(lg + 3 * V, 2);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 0);

    /* refresh with a rejection: the target says 12 where the block has 11. Emits 9, 12; keeps
     * rows 0..1; the next block's masks saw 11 and are dropped */
    assert_int_equal(ops->layout(st, hist, 13, &l, &err), SPECD_OK);
    expect_step(&l, 1 + B, (const int32_t[]){6, 9, 11, 2, MASK, MASK, MASK},
                (const int32_t[]){12, 13, 14, 15, 16, 17, 18});
    peaked(lg, 9), peaked(lg + V, 12), peaked(lg + 2 * V, 2), peaked(lg + 3 * V, 3);
    for (int r = 4; r < 7; r++)
        peaked(lg + r * V, 5);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 2);
    assert_memory_equal(o.emitted, ((const int32_t[]){9, 12}), 2 * sizeof(int32_t));
    assert_int_equal(o.n_keep, 2);
    assert_int_equal(o.n_accepted, 1);
    hist[13] = 9, hist[14] = 12;
    assert_int_equal(ops->layout(st, hist, 15, &l, &err), SPECD_OK);
    expect_step(&l, 1, (const int32_t[]){12, MASK, MASK, MASK}, (const int32_t[]){14, 15, 16, 17});
    ops->destroy(st);
}

/* mode=block: the refresh commits the block unverified, lossy; with an adapter every block row is
 * gated (fills too) and the head rows are not. */
static void test_block_mode_lossy(void **s) {
    (void)s;
    specd_error err;
    char opts[4200];
    snprintf(opts, sizeof opts,
             "block=3,mask=0,mode=block,adapter=%s/models/adapters/"
             "smollm2-135m-risd2",
             getenv("SPECD_SOURCE_DIR"));
    void *st = make(opts, 0);
    int32_t hist[32];
    for (int i = 0; i < N; i++)
        hist[i] = 1 + i;
    specd_step_layout l;
    specd_step_outcome o;
    float lg[(2 * B + 1) * V];
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    assert_non_null(l.lora_gate);
    assert_non_null(l.lora_path);
    for (int r = 0; r <= B; r++)
        assert_true(l.lora_gate[r] == (r == 0 ? 0.0f : 1.0f));
    /* all masks confident: one step fills the block */
    peaked(lg, 4), peaked(lg + V, 5), peaked(lg + 2 * V, 6), peaked(lg + 3 * V, 7);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 0);
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    assert_int_equal(l.n_tokens, 2 * B + 1);
    /* slot 0 took the pending row's token (4), not its own block row's (5) */
    assert_memory_equal(l.tokens, ((const int32_t[]){10, 4, 6, 7}), 4 * sizeof(int32_t));
    for (int r = 0; r < 2 * B + 1; r++)
        assert_true(l.lora_gate[r] == (r <= B ? 0.0f : 1.0f));
    for (int r = 0; r < 2 * B + 1; r++)
        flat(lg + r * V); /* the target disagrees everywhere: block mode does not ask */
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 3);
    assert_memory_equal(o.emitted, ((const int32_t[]){4, 6, 7}), 3 * sizeof(int32_t));
    assert_int_equal(o.n_keep, 3);
    assert_true(o.lossy);
    ops->destroy(st);
}

/* A denoise step whose mask rows are all non-finite fills nothing: the next step refreshes the
 * filled run (here slots 0..1) instead of stalling, with the next block's masks after it. */
static void test_stall_refreshes_run(void **s) {
    (void)s;
    specd_error err;
    void *st = make("block=3,mask=0", 0);
    int32_t hist[32];
    for (int i = 0; i < N; i++)
        hist[i] = 1 + i;
    specd_step_layout l;
    specd_step_outcome o;
    float lg[(2 * B + 1) * V];
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    peaked(lg, 4), flat(lg + V), flat(lg + 2 * V), flat(lg + 3 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK); /* slots 0, 1 = 4, 0 */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    expect_step(&l, 1, (const int32_t[]){10, 4, 0, MASK}, (const int32_t[]){9, 10, 11, 12});
    peaked(lg, 4), flat(lg + V), flat(lg + 2 * V);
    for (int v = 0; v < V; v++)
        lg[3 * V + v] = v == 2 ? INFINITY : 0.0f; /* slot 2's row: +inf */
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 0);
    /* refresh of the run [4 0]: [10@9 4@10 0@11 | M@12 M@13 M@14] */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    assert_int_equal(l.n_tokens, 3 + B);
    assert_memory_equal(l.tokens, ((const int32_t[]){10, 4, 0, MASK, MASK, MASK}),
                        6 * sizeof(int32_t));
    assert_memory_equal(l.pos, ((const int32_t[]){9, 10, 11, 12, 13, 14}), 6 * sizeof(int32_t));
    expect_visible(l.visible, 9, 3, B);
    peaked(lg, 4), peaked(lg + V, 0), peaked(lg + 2 * V, 7);
    flat(lg + 3 * V), flat(lg + 4 * V), flat(lg + 5 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 2);
    assert_memory_equal(o.emitted, ((const int32_t[]){4, 0}), 2 * sizeof(int32_t));
    assert_int_equal(o.n_keep, 2);
    hist[10] = 4, hist[11] = 0;
    /* the next block at 12: slot 0 from row 2 (7, exact), slot 1 the rule's at-least-one */
    assert_int_equal(ops->layout(st, hist, 12, &l, &err), SPECD_OK);
    expect_step(&l, 1, (const int32_t[]){0, 7, 0, MASK}, (const int32_t[]){11, 12, 13, 14});
    ops->destroy(st);
}

static void refused(const char *opts, int32_t max_step_rows, const char *needle) {
    specd_policy_env env = {
        .n_vocab = V, .max_draft = 8, .rule = SPECD_ACCEPT_GREEDY, .max_step_rows = max_step_rows};
    env.sampling = specd_sampling_default_params();
    void *st = NULL;
    specd_error err = {0};
    assert_int_equal(ops->create(&env, opts, &st, &err), SPECD_E_INVALID_ARG);
    assert_null(st);
    if (!strstr(err.message, needle))
        fail_msg("%s: message '%s' does not name '%s'", opts, err.message, needle);
}

static void test_bad_options(void **s) {
    (void)s;
    refused("block=0", 0, "block");
    refused("block=17", 0, "block");
    refused("mode=stream", 0, "mode=stream");
    refused("select=greedy", 0, "select=greedy");
    refused("tau=1.5", 0, "tau=1.5");
    refused("lambda=-1", 0, "lambda");
    refused("colour=blue", 0, "colour");
    refused("block=5", 9, "block=5 needs 11 rows");
    refused("mask=16", 0, "mask=16");
}

int main(void) {
    ops = specd_policy_find("sdar");
    if (!ops || !getenv("SPECD_SOURCE_DIR")) {
        fprintf(stderr, "policy sdar not registered or SPECD_SOURCE_DIR unset\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_visible_shape),    cmocka_unit_test(test_lossless_loop),
        cmocka_unit_test(test_block_mode_lossy), cmocka_unit_test(test_stall_refreshes_run),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
