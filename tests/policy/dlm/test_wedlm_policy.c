/* The wedlm policy's step loop (policy/dlm/wedlm.c) driven through its ops with constructed logits:
 * no model is needed to check what rows it lays out and what it emits and keeps, since both are
 * functions of the logits it is handed. Vocabulary 16, W = 4, greedy, no adapter (the stand-in's
 * shift: slot q is predicted by the row at logical position q - 1). Each expected layout below is
 * traced by hand from Alg. 1 and eq. 11 (tau 0.3, lambda 0.1). The real-model identity with plain
 * decoding is test_wedlm_identity. */
#include "test_main.h"

#include "specd/policy.h"
#include "specd/runtime.h"
#include "specd/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { V = 16, W = 4, ROWS = W + 1, MASK = 0 };

static const specd_policy_ops *ops;

static void *make(const char *opts) {
    specd_policy_env env = {.n_vocab = V, .max_draft = 8, .rule = SPECD_ACCEPT_GREEDY};
    env.sampling = specd_sampling_default_params();
    env.sampling.temperature = 0.0f;
    void *st = NULL;
    specd_error err;
    if (ops->create(&env, opts, &st, &err) != SPECD_OK)
        fail_msg("create %s: %s", opts, err.message);
    return st;
}

/* a row whose argmax is tok with all the mass (entropy ~ 0), or a flat row (entropy ln V) */
static void peaked(float *row, int tok) {
    for (int v = 0; v < V; v++)
        row[v] = v == tok ? 30.0f : 0.0f;
}
static void flat(float *row) {
    for (int v = 0; v < V; v++)
        row[v] = 0.0f;
}

static void expect_layout(const specd_step_layout *l, const int32_t *tok, const int32_t *pos) {
    assert_int_equal(l->n_tokens, ROWS);
    assert_int_equal(l->n_rows, ROWS);
    assert_null(l->visible); /* strict causal in physical order */
    assert_memory_equal(l->tokens, tok, ROWS * sizeof(int32_t));
    assert_memory_equal(l->pos, pos, ROWS * sizeof(int32_t));
    for (int r = 0; r < ROWS; r++)
        assert_int_equal(l->rows[r], r);
}

static void test_lossless_loop(void **s) {
    (void)s;
    specd_error err;
    void *st = make("w=4,mask=0");
    int32_t hist[32] = {0};
    for (int i = 0; i < 10; i++)
        hist[i] = 1 + i; /* history length 10: pending 10 at pos 9 */
    specd_step_layout l;
    specd_step_outcome o;
    float lg[ROWS * V];

    /* step 1: all masks. rows [10@9 | M@10 M@11 M@12 M@13] */
    assert_int_equal(ops->layout(st, hist, 10, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){10, MASK, MASK, MASK, MASK},
                  (const int32_t[]){9, 10, 11, 12, 13});
    /* row 0 (pending) -> 3 is emitted (no run). New window 11..14: slot 11 <- row@10 (peaked 5,
     * H~ = 0), 12 <- row@11 (flat), 13 <- row@12 (peaked 7, H~ = 0 + 0.1*2 = 0.2 < 0.3),
     * 14 <- row@13 (flat): fills 11 = 5, 13 = 7 */
    peaked(lg, 3), peaked(lg + V, 5), flat(lg + 2 * V), peaked(lg + 3 * V, 7), flat(lg + 4 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 1);
    assert_int_equal(o.emitted[0], 3);
    assert_int_equal(o.n_keep, 1);
    assert_int_equal(o.keep[0], 0);
    assert_int_equal(o.n_drafted, 0);
    assert_false(o.lossy);
    hist[10] = 3;

    /* step 2: reordered, filled first, logical positions kept: [3@10 | 5@11 7@13 | M@12 M@14] */
    assert_int_equal(ops->layout(st, hist, 11, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){3, 5, 7, MASK, MASK},
                  (const int32_t[]){10, 11, 13, 12, 14});
    /* run = slot 11 only (12 is a mask). Row 0 says 5: accepted; the bonus from row 1 (5's row):
     * 9. Emitted 5 9, KV kept for rows 0 and 1. New window 13..16: 13 keeps its fill 7; 14 <-
     * row@13 = physical row 2 (flat), 15 <- row@14 = physical row 4 (flat), 16 has no row.
     * Nothing passes tau, and no fill is forced (the pending row's token moves every step on):
     * 14 and 15 stay masks */
    peaked(lg, 5), peaked(lg + V, 9), flat(lg + 2 * V), flat(lg + 3 * V), flat(lg + 4 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 2);
    assert_true(o.emitted[0] == 5 && o.emitted[1] == 9);
    assert_int_equal(o.n_keep, 2);
    assert_true(o.keep[0] == 0 && o.keep[1] == 1);
    assert_true(o.n_drafted == 1 && o.n_accepted == 1);
    hist[11] = 5, hist[12] = 9;

    /* step 3: [9@12 | 7@13 | M@14 M@15 M@16] */
    assert_int_equal(ops->layout(st, hist, 13, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){9, 7, MASK, MASK, MASK},
                  (const int32_t[]){12, 13, 14, 15, 16});
    /* run 7; row 0 says 2: the draft is rejected, the correction 2 is emitted, only the pending
     * row's KV is kept, and every fill is dropped (later rows saw the rejected 7), also the
     * confident ones the mask rows make now */
    peaked(lg, 2), peaked(lg + V, 0), peaked(lg + 2 * V, 1), peaked(lg + 3 * V, 1),
        peaked(lg + 4 * V, 1);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 1);
    assert_int_equal(o.emitted[0], 2);
    assert_true(o.n_keep == 1 && o.n_drafted == 1 && o.n_accepted == 0);
    hist[13] = 2;

    /* step 4: all masks again: [2@13 | M@14 M@15 M@16 M@17] */
    assert_int_equal(ops->layout(st, hist, 14, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){2, MASK, MASK, MASK, MASK},
                  (const int32_t[]){13, 14, 15, 16, 17});
    /* a history the fills were not made for (a rollback) starts over with masks */
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(ops->layout(st, hist, 12, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){hist[11], MASK, MASK, MASK, MASK},
                  (const int32_t[]){11, 12, 13, 14, 15});
    ops->destroy(st);
}

/* mode=stream: the run is committed as filled, without the clean row's check (lossy) */
static void test_stream_commits_unverified(void **s) {
    (void)s;
    specd_error err;
    void *st = make("w=4,mask=0,mode=stream");
    int32_t hist[32] = {0};
    for (int i = 0; i < 10; i++)
        hist[i] = 1 + i;
    specd_step_layout l;
    specd_step_outcome o;
    float lg[ROWS * V];
    assert_int_equal(ops->layout(st, hist, 10, &l, &err), SPECD_OK);
    peaked(lg, 3), peaked(lg + V, 5), flat(lg + 2 * V), peaked(lg + 3 * V, 7), flat(lg + 4 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_true(o.n_emitted == 1 && o.emitted[0] == 3 && !o.lossy); /* a mask at n: exact token */
    hist[10] = 3;
    assert_int_equal(ops->layout(st, hist, 11, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){3, 5, 7, MASK, MASK},
                  (const int32_t[]){10, 11, 13, 12, 14});
    /* the pending row says 6, the fill says 5: stream emits 5 anyway and keeps only row 0 (5
     * becomes the next pending token) */
    peaked(lg, 6), peaked(lg + V, 9), flat(lg + 2 * V), flat(lg + 3 * V), flat(lg + 4 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 1);
    assert_int_equal(o.emitted[0], 5);
    assert_true(o.lossy);
    assert_true(o.n_keep == 1 && o.keep[0] == 0);
    hist[11] = 5;
    /* next window 12..15: 12 <- row@11 (5's row, peaked 9: filled, H~ 0), 13 keeps 7, 14 <- row@13
     * (flat), 15 <- row@14 (flat): [5@11 | 9@12 7@13 | M@14 M@15] */
    assert_int_equal(ops->layout(st, hist, 12, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){5, 9, 7, MASK, MASK},
                  (const int32_t[]){11, 12, 13, 14, 15});
    ops->destroy(st);
}

/* shift=0 (a WeDLM adapter: a mask row predicts its own position). The same logits as step 1 of
 * test_lossless_loop but one row later: row 1 (M@10, peaked 6) is not read (slot 10 is emitted
 * from the pending row), slot 11 <- its own row 2 (peaked 5), 12 <- row 3 (flat), 13 <- row 4
 * (peaked 7, H~ = 0.2), 14 has no row: the same window f5 M f7 M as the shifted trace */
static void test_unshifted_reads_own_row(void **s) {
    (void)s;
    specd_error err;
    void *st = make("w=4,mask=0,shift=0");
    int32_t hist[32] = {0};
    for (int i = 0; i < 10; i++)
        hist[i] = 1 + i;
    specd_step_layout l;
    specd_step_outcome o;
    float lg[ROWS * V];
    assert_int_equal(ops->layout(st, hist, 10, &l, &err), SPECD_OK);
    peaked(lg, 3), peaked(lg + V, 6), peaked(lg + 2 * V, 5), flat(lg + 3 * V),
        peaked(lg + 4 * V, 7);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_true(o.n_emitted == 1 && o.emitted[0] == 3);
    hist[10] = 3;
    assert_int_equal(ops->layout(st, hist, 11, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){3, 5, 7, MASK, MASK},
                  (const int32_t[]){10, 11, 13, 12, 14});
    /* rows: 0 pending@10, 1 f5@11, 2 f7@13, 3 M@12, 4 M@14. Row 0 says 5 (accepted), row 1 gives
     * the bonus 9: emitted 5 9, window 13..16: 13 keeps 7, 14 <- its own row 4 (peaked 8), 15 and
     * 16 had no row (M@12's row 3 is for 12, now emitted) */
    peaked(lg, 5), peaked(lg + V, 9), peaked(lg + 2 * V, 1), peaked(lg + 3 * V, 2),
        peaked(lg + 4 * V, 8);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_true(o.n_emitted == 2 && o.emitted[0] == 5 && o.emitted[1] == 9);
    hist[11] = 5, hist[12] = 9;
    assert_int_equal(ops->layout(st, hist, 13, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){9, 7, 8, MASK, MASK},
                  (const int32_t[]){12, 13, 14, 15, 16});
    ops->destroy(st);
}

/* NaN logits on a mask row cost only that window's fills: the clean row's token stands and the
 * next window starts from masks; a finite row fills it (the control) */
static void test_nan_mask_row(void **s) {
    (void)s;
    specd_error err;
    int32_t hist[5] = {1, 2, 3, 4, 0};
    specd_step_layout l;
    specd_step_outcome o;
    float lg[ROWS * V];
    for (int poison = 0; poison < 2; poison++) {
        void *st = make("w=4,mask=0");
        assert_int_equal(ops->layout(st, hist, 4, &l, &err), SPECD_OK);
        for (int r = 0; r < ROWS; r++)
            peaked(lg + r * V, 1 + r);
        if (poison) lg[V + 4] = NAN;
        assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
        assert_true(o.n_emitted == 1 && o.emitted[0] == 1);
        hist[4] = 1;
        assert_int_equal(ops->layout(st, hist, 5, &l, &err), SPECD_OK);
        if (poison)
            expect_layout(&l, (const int32_t[]){1, MASK, MASK, MASK, MASK},
                          (const int32_t[]){4, 5, 6, 7, 8});
        else
            assert_int_not_equal(l.tokens[1], MASK); /* the peaked rows filled a slot */
        ops->destroy(st);
    }
}

/* mode=block: nothing is emitted or kept until the block's layout is all filled; slot 0 takes the
 * pending row's token; the full block is emitted whole with its KV, and a fresh block starts */
static void test_block_waits_for_whole_block(void **s) {
    (void)s;
    specd_error err;
    void *st = make("w=4,mask=0,mode=block");
    assert_true(ops->flags & SPECD_POLICY_MAY_EMIT_NONE);
    int32_t hist[32] = {0};
    for (int i = 0; i < 10; i++)
        hist[i] = 1 + i;
    specd_step_layout l;
    specd_step_outcome o;
    float lg[ROWS * V];

    /* step 1: [10@9 | M@10 M@11 M@12 M@13]. Slot 10 <- the pending row's 3 (exact), then eq. 11
     * over slots 11..13: 11 <- row@10 (peaked 5, d 0), 12 <- row@11 (flat), 13 <- row@12 (peaked
     * 7, H~ = 0 + 0.1 * 2 = 0.2 < 0.3; d counts from slot 11, the leftmost mask left): fills
     * 3 5 M 7, nothing emitted or kept */
    assert_int_equal(ops->layout(st, hist, 10, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){10, MASK, MASK, MASK, MASK},
                  (const int32_t[]){9, 10, 11, 12, 13});
    peaked(lg, 3), peaked(lg + V, 5), flat(lg + 2 * V), peaked(lg + 3 * V, 7), flat(lg + 4 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_true(o.n_emitted == 0 && o.n_keep == 0 && !o.lossy);

    /* step 2, same history: [10@9 | 3@10 5@11 7@13 | M@12]. Slot 12 <- row@11 = physical row 2
     * (flat): the only mask, filled anyway (at least one fill per step) with the flat argmax 0 */
    assert_int_equal(ops->layout(st, hist, 10, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){10, 3, 5, 7, MASK}, (const int32_t[]){9, 10, 11, 13, 12});
    flat(lg), flat(lg + V), flat(lg + 2 * V), flat(lg + 3 * V), flat(lg + 4 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_true(o.n_emitted == 0 && o.n_keep == 0);

    /* step 3: the block is whole, in logical order [10@9 | 3@10 5@11 0@12 7@13]: emitted as
     * filled (the rows' own predictions are not read), rows 0..3 keep their KV (7 is pending) */
    assert_int_equal(ops->layout(st, hist, 10, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){10, 3, 5, 0, 7}, (const int32_t[]){9, 10, 11, 12, 13});
    for (int r = 0; r < ROWS; r++)
        peaked(lg + r * V, r == ROWS - 1 ? 11 : 9);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 4);
    assert_memory_equal(o.emitted, ((const int32_t[]){3, 5, 0, 7}), 4 * sizeof(int32_t));
    assert_int_equal(o.n_keep, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(o.keep[i], i);
    assert_true(o.lossy && o.n_drafted == 4 && o.n_accepted == 4);
    hist[10] = 3, hist[11] = 5, hist[12] = 0, hist[13] = 7;

    /* a fresh block after it, its slot 0 already filled from the last row (7@13, base weights
     * over the whole block: plain decoding's row for position 14), the rest masks */
    assert_int_equal(ops->layout(st, hist, 14, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){7, 11, MASK, MASK, MASK},
                  (const int32_t[]){13, 14, 15, 16, 17});
    ops->destroy(st);
}

/* mode=block with early_eos: once an EOS and every slot before it are decided, the slots after it
 * are not denoised (they are never emitted: the host stops at EOS) and the block commits next step.
 * EOS here is id 15; no adapter, so shifted reads: slot q from the row at q - 1. */
static void test_block_early_eos(void **s) {
    (void)s;
    specd_error err;
    void *st = make("w=4,mask=0,mode=block,early_eos=1,eos=15");
    int32_t hist[32] = {0};
    for (int i = 0; i < 10; i++)
        hist[i] = 1 + i;
    specd_step_layout l;
    specd_step_outcome o;
    float lg[ROWS * V];
    assert_int_equal(ops->layout(st, hist, 10, &l, &err), SPECD_OK);
    /* slot 10 <- pending row (3), slot 11 <- row@10 (EOS, H 0), slots 12, 13 flat: undecided */
    peaked(lg, 3), peaked(lg + V, 15), flat(lg + 2 * V), flat(lg + 3 * V), flat(lg + 4 * V);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_true(o.n_emitted == 0 && o.n_keep == 0);
    /* the block is whole now: 3, EOS, then EOS in the slots nobody denoised */
    assert_int_equal(ops->layout(st, hist, 10, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){10, 3, 15, 15, 15}, (const int32_t[]){9, 10, 11, 12, 13});
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(o.n_emitted, 4);
    assert_true(o.emitted[0] == 3 && o.emitted[1] == 15 && o.lossy);
    ops->destroy(st);
    /* without early_eos the same step leaves slots 12 and 13 masked */
    st = make("w=4,mask=0,mode=block");
    assert_int_equal(ops->layout(st, hist, 10, &l, &err), SPECD_OK);
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_int_equal(ops->layout(st, hist, 10, &l, &err), SPECD_OK);
    expect_layout(&l, (const int32_t[]){10, 3, 15, MASK, MASK},
                  (const int32_t[]){9, 10, 11, 12, 13});
    ops->destroy(st);
}

static void test_options(void **s) {
    (void)s;
    specd_policy_env env = {.n_vocab = V, .max_draft = 8, .rule = SPECD_ACCEPT_GREEDY};
    env.sampling = specd_sampling_default_params();
    const char *bad[] = {"w=0",
                         "w=65",
                         "mode=fast",
                         "select=random",
                         "tau=abc",
                         "select=threshold,tau=2",
                         "lambda=-1",
                         "mask=16",
                         "shift=2",
                         "w=17" /* 18 rows > 2 * 8 + 1 */,
                         "mode=blocks",
                         "mode=block,w=0",
                         "mode=block,tau=-1",
                         "mode=block,w=17",
                         "early_eos=1,eos=3" /* stream: the pending row moves it on */,
                         "mode=block,early_eos=1" /* no model here, so no EOS to stop at */,
                         "early_eos=2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *st = NULL;
        specd_error err;
        if (ops->create(&env, bad[i], &st, &err) != SPECD_E_INVALID_ARG)
            fail_msg("option %s was accepted", bad[i]);
        assert_null(st);
    }
    const char *good[] = {"",
                          "select=threshold,tau=0.9",
                          "select=hierarchical",
                          "select=credit",
                          "w=1,lambda=0",
                          "mode=stream,select=entropy,tau=0.5",
                          "mode=block,select=credit,w=8"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ops->destroy(make(good[i]));
    /* the stand-in warning belongs to shift=1 only, and shift=0 names the WeDLM adapter */
    assert_non_null(strstr(ops->options_help, "STAND-IN"));
    assert_non_null(strstr(ops->options_help, "0: a mask's own row, for a WeDLM adapter"));
    assert_non_null(strstr(ops->options_help, "mode=lossless|stream|block"));
}

static void write_config(const char *dir, const char *json) {
    char path[256];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
}

/* What export_adapter.py records decides how wedlm runs an adapter when the options do not say:
 * read back from adapter_config.json, and an adapter trained for sdar is refused by name. */
static void test_adapter_config(void **s) {
    (void)s;
    char dir[] = "/tmp/specd-wedlm-cfg.XXXXXX";
    assert_non_null(mkdtemp(dir));
    specd_lora_info info;
    specd_error err;
    write_config(dir, "{\"r\": 16, \"lora_alpha\": 32, \"target_modules\": [\"q_proj\"]}");
    assert_int_equal(specd_lora_read_info(dir, &info, &err), SPECD_OK);
    assert_string_equal(info.objective, "");
    assert_int_equal(info.shift, -1); /* R-ISD adapters: shifted, wedlm's fallback */
    assert_int_equal(info.block, 0);
    write_config(dir, "{\"r\": 16, \"specd_objective\": \"wedlm\", \"specd_shift\": 0, "
                      "\"specd_block\": 8}");
    assert_int_equal(specd_lora_read_info(dir, &info, &err), SPECD_OK);
    assert_string_equal(info.objective, "wedlm");
    assert_int_equal(info.shift, 0);
    assert_int_equal(info.block, 8);
    const char *bad[] = {"{\"specd_shift\": 2}",
                         "{\"specd_shift\": \"0\"}",
                         "{\"specd_block\": 0}",
                         "{\"specd_objective\": 7}",
                         "{\"specd_objective\": \"a-very-long-objective\"}",
                         "{\"specd_shift\": 0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_config(dir, bad[i]);
        if (specd_lora_read_info(dir, &info, &err) == SPECD_OK) fail_msg("accepted %s", bad[i]);
    }
    write_config(dir, "{\"r\": 16, \"specd_objective\": \"sdar\", \"specd_block\": 4}");
    char opts[128];
    snprintf(opts, sizeof opts, "adapter=%s", dir);
    specd_policy_env env = {.n_vocab = V, .max_draft = 8, .rule = SPECD_ACCEPT_GREEDY};
    env.sampling = specd_sampling_default_params();
    void *st = NULL;
    assert_int_equal(ops->create(&env, opts, &st, &err), SPECD_E_INVALID_ARG);
    assert_null(st);
    assert_non_null(strstr(err.message, "--policy sdar"));
    char path[256];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    remove(path);
    rmdir(dir);
}

int main(void) {
    ops = specd_policy_find("wedlm");
    if (!ops) {
        fprintf(stderr, "wedlm is not registered\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lossless_loop),
        cmocka_unit_test(test_stream_commits_unverified),
        cmocka_unit_test(test_unshifted_reads_own_row),
        cmocka_unit_test(test_nan_mask_row),
        cmocka_unit_test(test_block_waits_for_whole_block),
        cmocka_unit_test(test_block_early_eos),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_adapter_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
