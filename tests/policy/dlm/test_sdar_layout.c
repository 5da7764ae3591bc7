/* The sdar policy's step loop (policy/dlm/sdar.c) driven through its ops with constructed logits, no
 * model: the attention shape of denoise and refresh steps (specd_sdar_visible), the gate on every
 * block row, at least one fill per denoise step, the refresh that commits the block through base
 * causal rows (lossless: chain-verified, a rejection restarts the next block from masks; block:
 * unverified and flagged lossy), and bad options refused with a message naming them. Vocabulary
 * 16, B = 3, greedy, mask id 0; each expected layout is traced by hand from the design comment at
 * the top of policy/sdar.c. The real-model checks are test_sdar_model. */
#include "test_main.h"

#include "policy/dlm/sdar_layout.h"
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

/* The same for a step whose block comes as n_copies packed copies (MRP spec step), copy c at
 * head + lead + c * stride: a copy row sees the cache, the head and its own copy only; a filler
 * (the lead, the gaps) itself only. */
static void expect_visible_copies(const uint8_t *vis, int n_cached, int head, int lead, int blk,
                                  int n_copies, int stride) {
    const int n_tok = head + lead + (n_copies - 1) * stride + blk, width = n_cached + n_tok;
    for (int r = 0; r < n_tok; r++) {
        const int off = r - head - lead;
        const int filler = r >= head && (off < 0 || off % stride >= blk);
        for (int j = 0; j < width; j++) {
            const int col = j - n_cached;
            int want;
            if (filler)
                want = col == r;
            else if (j < n_cached)
                want = 1;
            else if (r < head)
                want = col <= r;
            else if (col < head)
                want = 1;
            else /* same copy */
                want = col - head - lead >= 0 && (col - head - lead) % stride < blk &&
                       (col - head - lead) / stride == off / stride;
            if (vis[r * width + j] != want)
                fail_msg("row %d (%d head, %d lead, %d copies of %d, stride %d) entry %d: %d, "
                         "want %d",
                         r, head, lead, n_copies, blk, stride, j, vis[r * width + j], want);
        }
    }
}

static void test_visible_copies(void **s) {
    (void)s;
    enum { C = 5, H = 1, BB = 4, NC = 3, W = C + H + NC * BB };
    uint8_t vis[(H + NC * BB) * W], one[(H + BB) * (C + H + BB)];
    memset(vis, 7, sizeof vis);
    specd_sdar_visible_copies(vis, C, H, 0, BB, NC, BB);
    expect_visible_copies(vis, C, H, 0, BB, NC, BB);
    /* by hand: row 6 (copy 1, slot 1) sees the pending row (entry 5), copy 1's slots 0 and 3
     * (entries 10, 13), not copy 0's slot 3 (entry 9) nor copy 2's slot 0 (entry 14) */
    assert_int_equal(vis[6 * W + 5], 1);
    assert_int_equal(vis[6 * W + 10], 1);
    assert_int_equal(vis[6 * W + 13], 1);
    assert_int_equal(vis[6 * W + 9], 0);
    assert_int_equal(vis[6 * W + 14], 0);
    /* the pending row sees no copy */
    assert_int_equal(vis[0 * W + 6], 0);
    /* one copy is the plain sdar step */
    specd_sdar_visible_copies(one, C, H, 0, BB, 1, BB);
    expect_visible(one, C, H, BB);
    /* a refresh-shaped head (4 causal rows) with two copies */
    uint8_t two[(4 + 2 * 3) * (2 + 4 + 2 * 3)];
    specd_sdar_visible_copies(two, 2, 4, 0, 3, 2, 3);
    expect_visible_copies(two, 2, 4, 0, 3, 2, 3);
    /* aligned: 3 cached + pending end at column 4: a lead of 4 puts copy 0 at column 8, copy 1
     * 32 rows later; 1 + 4 + 32 + 4 = 41 rows */
    assert_int_equal(specd_sdar_lead(4), 4);
    assert_int_equal(specd_sdar_lead(8), 0);
    assert_int_equal(specd_sdar_lead(15), 1);
    assert_int_equal(specd_sdar_copies_rows(4, 4, 2, 32), 40);
    enum { AC = 3, AN = 41, AW = AC + AN };
    static uint8_t al[AN * AW];
    specd_sdar_visible_copies(al, AC, 1, 4, 4, 2, 32);
    expect_visible_copies(al, AC, 1, 4, 4, 2, 32);
    /* by hand: copy 1's slot 0 is row 37 (column 40 = 8 + 32); it sees row 38 and the pending
     * row, not copy 0's row 5 nor a filler (row 2, row 20) */
    assert_int_equal(al[37 * AW + AC + 38], 1);
    assert_int_equal(al[37 * AW + AC + 0], 1);
    assert_int_equal(al[37 * AW + AC + 5], 0);
    assert_int_equal(al[37 * AW + AC + 2], 0);
    assert_int_equal(al[37 * AW + AC + 20], 0);
    /* a filler sees itself only, not even the cache */
    assert_int_equal(al[20 * AW + AC + 20], 1);
    assert_int_equal(al[20 * AW + 0], 0);
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
             "block=3,mask=0,mode=block,adapter=%s/artifacts/adapters/"
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

/* A step of any block size and copy count: tokens, positions, every row scored, the copies'
 * visibility. */
static void expect_copies(const specd_step_layout *l, int head, int blk, int n_copies,
                          const int32_t *tok, const int32_t *pos) {
    const int n_tok = head + n_copies * blk;
    assert_int_equal(l->n_tokens, n_tok);
    assert_int_equal(l->n_rows, n_tok);
    assert_memory_equal(l->tokens, tok, (size_t)n_tok * sizeof(int32_t));
    assert_memory_equal(l->pos, pos, (size_t)n_tok * sizeof(int32_t));
    assert_non_null(l->visible);
    expect_visible_copies(l->visible, pos[0], head, 0, blk, n_copies, blk);
    for (int r = 0; r < n_tok; r++)
        assert_int_equal(l->rows[r], r);
}

/* a row whose top-1 is tok with logit x over zeros: p = e^x / (e^x + V - 1) */
static void leaning(float *row, int tok, float x) {
    flat(row);
    row[tok] = x;
}

/* select=static, mode=block, B = 3: slot 0 is the only reveal of the forward that predicts it
 * (the pending row, row B of a refresh), then exactly one reveal per step, the most confident
 * mask, not the leftmost; block rows' confident picks are not taken early. */
static void test_static_loop(void **s) {
    (void)s;
    specd_error err;
    void *st = make("block=3,mask=0,mode=block,select=static,pack=dense", 0);
    int32_t hist[32];
    for (int i = 0; i < N; i++)
        hist[i] = 1 + i;
    specd_step_layout l;
    specd_step_outcome o;
    float lg[(2 * B + 1) * V];
    /* [10@9 | M M M]: every block row confident, yet only slot 0 (4, the pending row) */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    expect_step(&l, 1, (const int32_t[]){10, MASK, MASK, MASK}, (const int32_t[]){9, 10, 11, 12});
    peaked(lg, 4), peaked(lg + V, 5), peaked(lg + 2 * V, 6), peaked(lg + 3 * V, 7);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 0);
    assert_int_equal(o.n_drafted, 0);
    /* [10@9 | 4 M M]: slot 2 (p ~ 1) beats slot 1 (p ~ 0.57): 8 at slot 2 */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    expect_step(&l, 1, (const int32_t[]){10, 4, MASK, MASK}, (const int32_t[]){9, 10, 11, 12});
    peaked(lg, 4), flat(lg + V), leaning(lg + 2 * V, 5, 3.0f), peaked(lg + 3 * V, 8);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 0);
    /* [10@9 | 4 M 8]: the last mask */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    expect_step(&l, 1, (const int32_t[]){10, 4, MASK, 8}, (const int32_t[]){9, 10, 11, 12});
    peaked(lg, 4), flat(lg + V), leaning(lg + 2 * V, 6, 2.0f), flat(lg + 3 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    /* refresh [10@9 4 6 8 | M M M]: commits 4 6 8 (block mode: unverified, lossy); the next
     * block's slot 0 from row 3 (9) and nothing else, though its mask rows are confident */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    expect_step(&l, 1 + B, (const int32_t[]){10, 4, 6, 8, MASK, MASK, MASK},
                (const int32_t[]){9, 10, 11, 12, 13, 14, 15});
    for (int r = 0; r < 3; r++)
        flat(lg + r * V);
    peaked(lg + 3 * V, 9), peaked(lg + 4 * V, 1), peaked(lg + 5 * V, 2), peaked(lg + 6 * V, 3);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 3);
    assert_memory_equal(o.emitted, ((const int32_t[]){4, 6, 8}), 3 * sizeof(int32_t));
    assert_true(o.lossy);
    hist[10] = 4, hist[11] = 6, hist[12] = 8;
    assert_int_equal(ops->layout(st, hist, 13, &l, &err), SPECD_OK);
    expect_step(&l, 1, (const int32_t[]){8, 9, MASK, MASK}, (const int32_t[]){12, 13, 14, 15});
    ops->destroy(st);
}

/* spec=2, B = 4 (K' = min(2, masks - 1)): the packed copies, the walk (accept while the target's
 * static pick on copy c is draft c + 1; the first other pick is the bonus), the seed (the rows of
 * the copy the walk stopped at), the refresh, and the step statistics. Traced by hand from the
 * design comment's MRP SPEC MODE. */
static void test_spec_walk(void **s) {
    (void)s;
    enum { BB = 4, M = MASK };
    specd_error err;
    void *st = make("block=4,mask=0,mode=block,select=static,spec=2,pack=dense", 0);
    int32_t hist[32];
    for (int i = 0; i < N; i++)
        hist[i] = 1 + i;
    specd_step_layout l;
    specd_step_outcome o;
    float lg[(1 + 3 * BB) * V];
    /* no seed yet: a plain static step [10@9 | M M M M]; slot 0 = 4. Its block rows are the
     * seed: slot 1 -> 5 (p ~ 1), slot 2 -> 6 (p ~ 0.91), slot 3 -> 7 (p ~ 0.57) */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    expect_copies(&l, 1, BB, 1, (const int32_t[]){10, M, M, M, M},
                  (const int32_t[]){9, 10, 11, 12, 13});
    peaked(lg, 4), flat(lg + V), peaked(lg + 2 * V, 5), leaning(lg + 3 * V, 6, 5.0f),
        leaning(lg + 4 * V, 7, 3.0f);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 0);
    assert_int_equal(o.n_drafted, 0);

    /* spec step, drafts (1, 5) and (2, 6): [10@9 | 4 M M M | 4 5 M M | 4 5 6 M], every copy at
     * positions 10..13 */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    expect_copies(&l, 1, BB, 3, (const int32_t[]){10, 4, M, M, M, 4, 5, M, M, 4, 5, 6, M},
                  (const int32_t[]){9, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13});
    /* the target on copy 0 picks slot 3 (13, p ~ 1) over slot 1 (5, p ~ 0.91): draft 1
     * rejected, the bonus is (3, 13); copies 1, 2 are not read */
    for (int r = 0; r < 1 + 3 * BB; r++)
        peaked(lg + r * V, 15);
    peaked(lg, 4), flat(lg + V), leaning(lg + 2 * V, 5, 5.0f), flat(lg + 3 * V),
        peaked(lg + 4 * V, 13);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 0);
    assert_int_equal(o.n_keep, 0);
    assert_int_equal(o.n_drafted, 2);
    assert_int_equal(o.n_accepted, 0);

    /* two masks left: K' = 1, drafted from copy 0's rows (slot 1 -> 5 over a flat slot 2):
     * [10@9 | 4 M M 13 | 4 5 M 13] */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    expect_copies(&l, 1, BB, 2, (const int32_t[]){10, 4, M, M, 13, 4, 5, M, 13},
                  (const int32_t[]){9, 10, 11, 12, 13, 10, 11, 12, 13});
    /* copy 0: the pick is (1, 5), draft 1: accepted; copy 1: the pick (2, 14) is the bonus */
    peaked(lg, 4), flat(lg + V), peaked(lg + 2 * V, 5), leaning(lg + 3 * V, 2, 1.0f),
        flat(lg + 4 * V);
    flat(lg + 5 * V), flat(lg + 6 * V), peaked(lg + 7 * V, 14), flat(lg + 8 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 0);
    assert_int_equal(o.n_drafted, 1);
    assert_int_equal(o.n_accepted, 1);

    /* the block is full: refresh [10@9 4 5 14 13 | M M M M]; it reports no drafts (spec: the
     * walks are the verifies); the next block's slot 0 from row 4 (2), its mask rows the seed:
     * slot 1 -> 3 (p ~ 1), slot 2 -> 1 (p ~ 0.91), slot 3 flat */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    expect_copies(&l, 1 + BB, BB, 1, (const int32_t[]){10, 4, 5, 14, 13, M, M, M, M},
                  (const int32_t[]){9, 10, 11, 12, 13, 14, 15, 16, 17});
    for (int r = 0; r < 4; r++)
        flat(lg + r * V);
    peaked(lg + 4 * V, 2), flat(lg + 5 * V), peaked(lg + 6 * V, 3), leaning(lg + 7 * V, 1, 5.0f),
        flat(lg + 8 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 4);
    assert_memory_equal(o.emitted, ((const int32_t[]){4, 5, 14, 13}), 4 * sizeof(int32_t));
    assert_int_equal(o.n_keep, 4);
    assert_int_equal(o.n_drafted, 0);
    assert_int_equal(o.n_accepted, 0);
    assert_true(o.lossy);
    hist[10] = 4, hist[11] = 5, hist[12] = 14, hist[13] = 13;

    /* the next block drafts from the refresh's mask rows at once: (1, 3), (2, 1):
     * [13@13 | 2 M M M | 2 3 M M | 2 3 1 M]; the target agrees twice, then 15 at slot 3: three
     * reveals in one forward and the block is full */
    assert_int_equal(ops->layout(st, hist, 14, &l, &err), SPECD_OK);
    expect_copies(&l, 1, BB, 3, (const int32_t[]){13, 2, M, M, M, 2, 3, M, M, 2, 3, 1, M},
                  (const int32_t[]){13, 14, 15, 16, 17, 14, 15, 16, 17, 14, 15, 16, 17});
    for (int r = 0; r < 1 + 3 * BB; r++)
        flat(lg + r * V);
    peaked(lg + 2 * V, 3);   /* copy 0, slot 1 */
    peaked(lg + 7 * V, 1);   /* copy 1, slot 2 */
    peaked(lg + 12 * V, 15); /* copy 2, slot 3 */
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_drafted, 2);
    assert_int_equal(o.n_accepted, 2);
    assert_int_equal(ops->layout(st, hist, 14, &l, &err), SPECD_OK);
    expect_copies(&l, 1 + BB, BB, 1, (const int32_t[]){13, 2, 3, 1, 15, M, M, M, M},
                  (const int32_t[]){13, 14, 15, 16, 17, 18, 19, 20, 21});
    ops->destroy(st);
}

/* pack=aligned (the default) with an adapter: static decoding's block starts at an 8-aligned
 * cache column (history 10: pending at column 9, a lead of 6 fillers, the block at 16), copies
 * 32 rows apart; only the pending row and the copies are scored, copy after copy; every copy row
 * is gated (drafts and masks alike), the head and the fillers are not; mask rows take the
 * adapter's mask vector when it has one, fillers never. */
static void test_spec_aligned(void **s) {
    (void)s;
    enum { BB = 4, M = MASK, LEAD = 6, S = 32 };
    specd_error err;
    char opts[4200];
    snprintf(opts, sizeof opts,
             "block=4,mask=0,mode=block,select=static,spec=2,adapter=%s/artifacts/adapters/"
             "smollm2-135m-risd2",
             getenv("SPECD_SOURCE_DIR"));
    void *st = make(opts, 80);
    int32_t hist[32];
    for (int i = 0; i < N; i++)
        hist[i] = 1 + i;
    specd_step_layout l;
    specd_step_outcome o;
    float lg[(1 + 3 * BB) * V];
    /* the first step: [10@9 | 6 fillers | M M M M], 5 rows scored */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    assert_int_equal(l.n_tokens, 1 + LEAD + BB);
    assert_int_equal(l.n_rows, 1 + BB);
    assert_memory_equal(l.rows, ((const int32_t[]){0, 7, 8, 9, 10}), 5 * sizeof(int32_t));
    expect_visible_copies(l.visible, 9, 1, LEAD, BB, 1, S);
    peaked(lg, 4), flat(lg + V), peaked(lg + 2 * V, 5), leaning(lg + 3 * V, 6, 5.0f),
        flat(lg + 4 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    /* the spec step: copies at rows 7, 39, 71 */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    const int n_tok = 1 + LEAD + 2 * S + BB;
    assert_int_equal(l.n_tokens, n_tok);
    assert_int_equal(l.n_rows, 1 + 3 * BB);
    expect_visible_copies(l.visible, 9, 1, LEAD, BB, 3, S);
    const int32_t want_tok[] = {10, 4, M, M, M, 4, 5, M, M, 4, 5, 6, M};
    for (int r = 0; r < l.n_rows; r++) {
        const int32_t row = r == 0 ? 0 : 1 + LEAD + (r - 1) / BB * S + (r - 1) % BB;
        assert_int_equal(l.rows[r], row);
        assert_int_equal(l.tokens[row], want_tok[r]);
        assert_int_equal(l.pos[row], r == 0 ? 9 : 10 + (r - 1) % BB);
    }
    assert_non_null(l.lora_gate);
    for (int t = 0; t < n_tok; t++) {
        int scored = 0, mask_row = 0;
        for (int r = 1; r < l.n_rows; r++)
            if (l.rows[r] == t) scored = 1, mask_row = want_tok[r] == M;
        assert_true(l.lora_gate[t] == (scored ? 1.0f : 0.0f));
        if (l.input_embd_rows) assert_int_equal(l.input_embd_rows[t], mask_row);
    }
    /* the target agrees with both drafts, then 7 at slot 3: three reveals */
    for (int r = 0; r < l.n_rows; r++)
        flat(lg + r * V);
    peaked(lg + 2 * V, 5), peaked(lg + 7 * V, 6), peaked(lg + 12 * V, 7);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_drafted, 2);
    assert_int_equal(o.n_accepted, 2);
    /* refresh: no fillers, 2B + 1 rows */
    assert_int_equal(ops->layout(st, hist, N, &l, &err), SPECD_OK);
    assert_int_equal(l.n_tokens, 2 * BB + 1);
    assert_memory_equal(l.tokens, ((const int32_t[]){10, 4, 5, 6, 7}), 5 * sizeof(int32_t));
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
    refused("select=static,spec=1", 0, "mode=block");
    refused("mode=block,spec=1", 0, "select=static");
    refused("mode=block,select=static,block=2,spec=1", 0, "block >= 3");
    refused("mode=block,select=static,block=4,spec=3,pack=dense", 12,
            "spec=3 with block=4 needs up to 13 rows");
    refused("mode=block,select=static,block=4,spec=3", 0, "needs up to 76 rows");
    refused("mode=block,select=static,pack=tight", 0, "pack=tight");
    refused("mode=block,select=static,spec=16", 0, "spec");
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
        cmocka_unit_test(test_bad_options),      cmocka_unit_test(test_visible_copies),
        cmocka_unit_test(test_static_loop),      cmocka_unit_test(test_spec_walk),
        cmocka_unit_test(test_spec_aligned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
