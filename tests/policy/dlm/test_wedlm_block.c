/* wedlm mode=block (the paper's block-wise baseline) on the real model with the R-ISD stand-in
 * adapter (artifacts/adapters/smollm2-135m-risd2, shift=1):
 *  - driven through its ops with the target's real logits and a real KV cache: a step whose
 *    layout still has masks emits nothing, keeps no KV and fills at least one mask (the next
 *    layout of the same history has fewer); a step whose layout is the whole block emits exactly
 *    its W tokens in logical order and keeps the pending row and all but the last; the first
 *    block's first token is plain decoding's (slot 0 takes the pending row's token);
 *  - through the session (specd_spec_run): every emission is a whole block but the last one
 *    (cut by max_tokens), the sequence is flagged lossy, every forward counts as a step (the
 *    empty ones included, so TPF = tokens / forwards).
 * TPF and p_cache are printed, not asserted: they measure the stand-in adapter. */
#include "test_main.h"

#include "fixture_model.h"

#include "specd/policy.h"
#include "specd/spec_runtime.h"

#include <string.h>

enum { MAX_PROMPT = 256, N_GEN = 22, MAX_STEPS = 64 };

static int32_t prompt[MAX_PROMPT];
static int64_t n_prompt;
static specd_model *model;
static const specd_model_info *info;
static specd_context *ctx;
static char adapter[4096];

/* The first token plain decoding (greedy) emits after the prompt. */
static int32_t plain_first(void) {
    specd_error err;
    assert_int_equal(specd_context_kv_truncate(ctx, 0, 0, &err), SPECD_OK);
    float *lg = malloc(sizeof(float) * (size_t)info->n_vocab);
    specd_seq_batch b = {.seq = 0, .n_tokens = (int32_t)n_prompt, .tokens = prompt};
    int32_t last = (int32_t)n_prompt - 1;
    specd_extend_out out = {.n_rows = 1, .rows = &last, .logits = lg};
    assert_int_equal(specd_context_extend(ctx, &b, 1, &out, &err), SPECD_OK);
    int32_t best = 0;
    for (int32_t v = 1; v < info->n_vocab; v++)
        if (lg[v] > lg[best]) best = v;
    free(lg);
    return best;
}

static int32_t masks_in(const specd_step_layout *l) {
    int32_t m = 0;
    for (int32_t r = 0; r < l->n_tokens; r++)
        m += l->lora_gate[r] != 0.0f; /* the adapter runs on exactly the mask rows */
    return m;
}

/* The policy's steps by hand, as specd_spec_run would run them, checking each one. */
static void drive(const char *opts, int32_t w) {
    const specd_policy_ops *ops = specd_policy_find("wedlm");
    specd_policy_env env = {.n_vocab = info->n_vocab,
                            .max_draft = 8,
                            .rule = SPECD_ACCEPT_GREEDY,
                            .target = model,
                            .seed = 7};
    env.sampling = specd_sampling_default_params();
    env.sampling.temperature = 0.0f;
    char full[8192];
    snprintf(full, sizeof full, "adapter=%s,mode=block,%s", adapter, opts);
    void *st = NULL;
    specd_error err;
    if (ops->create(&env, full, &st, &err) != SPECD_OK) fail_msg("create %s: %s", full, err.message);
    const int32_t first = plain_first();
    /* the cache holds the prompt minus its last token, the pending one */
    assert_int_equal(specd_context_kv_truncate(ctx, 0, (int32_t)n_prompt - 1, &err), SPECD_OK);
    int32_t hist[MAX_PROMPT + 3 * 16];
    memcpy(hist, prompt, sizeof(int32_t) * (size_t)n_prompt);
    int64_t n = n_prompt;
    float *lg = malloc(sizeof(float) * (size_t)(w + 1) * (size_t)info->n_vocab);
    int32_t keep[17], blocks = 0, steps = 0, prev_masks = -1, block_steps = 0;
    while (blocks < 3) {
        if (++steps > MAX_STEPS) fail_msg("%s: no third block in %d steps", full, MAX_STEPS);
        specd_step_layout l;
        assert_int_equal(ops->layout(st, hist, n, &l, &err), SPECD_OK);
        assert_int_equal(l.n_tokens, w + 1);
        const int32_t masks = masks_in(&l);
        if (prev_masks >= 0 && masks >= prev_masks)
            fail_msg("%s: a step without a fill (%d masks, then %d)", full, prev_masks, masks);
        const int32_t kv_before = specd_context_kv_len(ctx, 0);
        fixture_run_layout(ctx, 0, &l, lg);
        int32_t laid[17];
        memcpy(laid, l.tokens, sizeof(int32_t) * (size_t)l.n_tokens);
        specd_step_outcome o;
        assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
        block_steps++;
        if (masks > 0) {
            assert_int_equal(o.n_emitted, 0);
            assert_int_equal(o.n_keep, 0);
            assert_false(o.lossy);
            prev_masks = masks;
        } else {
            /* whole: [pending | block in logical order], emitted as laid out */
            assert_int_equal(o.n_emitted, w);
            assert_memory_equal(o.emitted, laid + 1, sizeof(int32_t) * (size_t)w);
            assert_int_equal(o.n_keep, w);
            for (int32_t i = 0; i < w; i++)
                assert_int_equal(o.keep[i], i);
            assert_true(o.lossy);
            if (blocks == 0) assert_int_equal(o.emitted[0], first);
            /* W fills need at most W steps, then the whole block's step */
            assert_true(block_steps >= 2 && block_steps <= w + 1);
            memcpy(hist + n, o.emitted, sizeof(int32_t) * (size_t)w);
            n += w;
            blocks++;
            block_steps = 0;
            prev_masks = -1;
        }
        for (int32_t i = 0; i < o.n_keep; i++)
            keep[i] = kv_before + o.keep[i];
        assert_int_equal(specd_context_kv_keep(ctx, 0, kv_before, o.n_keep, keep, &err), SPECD_OK);
        assert_int_equal(specd_context_kv_len(ctx, 0), (int32_t)n - 1);
    }
    fprintf(stderr, "wedlm mode=block %-24s 3 blocks of %d in %d forwards (TPF %.2f)\n", opts, w,
            steps, 3.0 * w / steps);
    assert_int_equal(specd_context_set_lora(ctx, NULL, &err), SPECD_OK);
    free(lg);
    ops->destroy(st);
}

static void test_block_steps(void **s) {
    (void)s;
    drive("w=4", 4);
    drive("w=6,select=threshold,tau=0.5", 6);
    drive("w=3,select=credit", 3);
}

typedef struct {
    specd_spec *spec;
    int32_t sizes[MAX_STEPS];
    int64_t steps_at[MAX_STEPS];
    int n;
} emissions;

static void on_tokens(const int32_t *tokens, int32_t n, void *user) {
    (void)tokens;
    emissions *e = user;
    specd_seq_stats st;
    specd_error err;
    if (e->n < MAX_STEPS && specd_spec_seq_stats(e->spec, 0, &st, &err) == SPECD_OK) {
        e->sizes[e->n] = n;
        e->steps_at[e->n++] = st.n_steps;
    }
}

static void test_session_whole_blocks(void **s) {
    (void)s;
    const int32_t w = 5; /* N_GEN = 22 = 4 blocks of 5 and 2 tokens of a fifth */
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = info->n_vocab;
    sp.max_draft = 8;
    sp.target = model;
    emissions e = {0};
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &e.spec, &err), SPECD_OK);
    char opts[8192];
    snprintf(opts, sizeof opts, "adapter=%s,mode=block,w=%d", adapter, w);
    specd_seq_params params = specd_seq_default_params();
    params.policy = "wedlm";
    params.policy_options = opts;
    params.sampling.temperature = 0.0f;
    params.max_tokens = N_GEN;
    params.adaptive = 0; /* the guard's plain steps would cut blocks short */
    assert_int_equal(specd_spec_seq_open(e.spec, 0, prompt, n_prompt, &params, &err), SPECD_OK);
    specd_run_stats rs;
    if (specd_spec_run(e.spec, 0, ctx, 0, on_tokens, &e, &rs, &err) != SPECD_OK)
        fail_msg("run: %s", err.message);
    int64_t n_out;
    specd_spec_seq_output(e.spec, 0, &n_out);
    specd_seq_stats st;
    assert_int_equal(specd_spec_seq_stats(e.spec, 0, &st, &err), SPECD_OK);
    assert_int_equal(n_out, N_GEN);
    int32_t total = 0;
    for (int i = 0; i < e.n; i++) {
        total += e.sizes[i];
        if (i + 1 < e.n) assert_int_equal(e.sizes[i], w);
        /* between two blocks: at least one fill step and the whole block's step */
        assert_true(e.steps_at[i] - (i ? e.steps_at[i - 1] : 0) >= 2);
    }
    assert_int_equal(total, N_GEN);
    assert_true(e.sizes[e.n - 1] >= 1 && e.sizes[e.n - 1] <= w);
    assert_true(st.lossy);
    /* every forward is a step; the ones before a block is whole emit nothing */
    assert_int_equal(rs.n_steps, st.n_steps);
    assert_int_equal(st.n_empty_steps, st.n_steps - e.n);
    assert_true(rs.n_steps > e.n);
    fprintf(stderr, "wedlm mode=block w=%d session: %lld tokens in %lld forwards, TPF %.2f, "
                    "p_cache (eq. 4) %.3f\n",
            w, (long long)rs.n_emitted, (long long)rs.n_steps,
            (double)rs.n_emitted / (double)rs.n_steps,
            (double)st.n_emitted / (double)st.n_tokens_run);
    specd_spec_seq_close(e.spec, 0);
    specd_spec_destroy(e.spec);
}

int main(void) {
    fixture_golden_prompts(1, MAX_PROMPT, prompt, &n_prompt);
    fixture_source_path("artifacts/adapters/smollm2-135m-risd2", adapter, sizeof adapter);
    model = fixture_model_open();
    info = specd_model_get_info(model);
    /* n_batch: plain_first runs the whole prompt in one batch */
    ctx = fixture_context(model, 1, 512, MAX_PROMPT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_steps),
        cmocka_unit_test(test_session_whole_blocks),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fixture_close(model, ctx);
    return rc;
}
