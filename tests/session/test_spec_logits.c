/* The logits a host hands to specd (specd/spec_batch.h), with a synthetic target over V = 64:
 *  - a token masked with -inf, or with -FLT_MAX at a temperature below 1, behaves exactly as one
 *    banned by a -inf logit bias: same tokens, under greedy, coupled and rejection rules, for
 *    plain and speculative steps; masked tokens are never emitted;
 *  - NaN and +inf are errors naming the sequence and row and change nothing; a row with every
 *    token masked is an error;
 *  - f16 rows with a padded stride give the tokens of the same values in dense f32;
 *  - CUDA logits without a device (or without CUDA) are a clear SPECD_E_UNSUPPORTED. */
#include "test_main.h"

#include "kernels/cpu/fp16.h"
#include "specd/spec_batch.h"

#include <float.h>
#include <math.h>
#include <string.h>

enum { V = 64, MAXK = 6, N_OUT = 120, STRIDE = 80 };

/* Prefers a short cycle (n-gram drafts hit) with spread enough that sampling varies. */
static void target_logits(int32_t a, int32_t b, float *row) {
    uint32_t h = (uint32_t)a * 2654435761u ^ (uint32_t)b * 40503u;
    for (int x = 0; x < V; x++) {
        h = h * 1664525u + 1013904223u;
        row[x] = (float)(h >> 8) / (float)(1u << 24) * 2.0f;
    }
    row[(b + 1) % 8] += 3.0f;
    row[(a + 3) % 8] += 2.5f;
}

/* Tokens 1, 4 and 6 (on the cycle, so they matter) are masked. */
static int masked(int32_t x) { return x == 1 || x == 4 || x == 6; }

typedef enum { MASK_NONE, MASK_NEG_INF, MASK_FLT_MAX, MASK_F16_PADDED, MASK_F16_AS_F32 } mask_mode;

typedef struct run_cfg {
    const char *policy;
    specd_accept_rule rule;
    float temperature;
    mask_mode mode;
    int bias_ban; /* ban the masked tokens by logit bias instead */
} run_cfg;

static void run(const run_cfg *c, int32_t *out) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    sp.max_draft = MAXK;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_seq_params p = specd_seq_default_params();
    p.policy = c->policy;
    p.rule = c->rule;
    p.sampling.temperature = c->temperature;
    p.seed = 5;
    p.stream_key = 42;
    p.max_tokens = N_OUT;
    p.adaptive = 0;
    const specd_logit_bias ban[3] = {{.token = 1, .bias = -INFINITY},
                                     {.token = 4, .bias = -INFINITY},
                                     {.token = 6, .bias = -INFINITY}};
    if (c->bias_ban) {
        p.sampling.bias = ban;
        p.sampling.n_bias = 3;
    }
    const int32_t prompt[] = {5, 7, 0, 2, 3};
    assert_int_equal(specd_spec_seq_open(spec, 2, prompt, 5, &p, &err), SPECD_OK);
    int32_t ctx[5 + N_OUT + MAXK + 1];
    memcpy(ctx, prompt, sizeof prompt);
    int64_t n_ctx = 5;
    static float rows[(2 * MAXK + 1) * V];
    static uint16_t half[(2 * MAXK + 1) * STRIDE];
    while (!specd_spec_seq_done(spec, 2)) {
        specd_batch batch;
        const int32_t seq = 2;
        assert_int_equal(specd_spec_batch_layout(spec, &seq, 1, &batch, &err), SPECD_OK);
        const specd_step_layout *lay = &batch.seqs[0].layout;
        for (int32_t i = 0; i < lay->n_rows; i++) {
            int32_t row = lay->rows[i];
            int32_t b = lay->tokens[row];
            int32_t a = row > 0 ? lay->tokens[row - 1] : ctx[n_ctx - 2];
            float *r = rows + (size_t)i * V;
            target_logits(a, b, r);
            for (int32_t x = 0; x < V && c->mode == MASK_F16_AS_F32; x++)
                r[x] = specd_fp16_to_fp32(specd_fp32_to_fp16(r[x]));
            for (int32_t x = 0; x < V && c->mode != MASK_NONE && c->mode != MASK_F16_AS_F32; x++)
                if (masked(x)) r[x] = c->mode == MASK_FLT_MAX ? -FLT_MAX : -INFINITY;
        }
        specd_logits lg = {.data = rows, .row_stride = V, .n_rows = lay->n_rows,
                           .dtype = SPECD_DTYPE_F32, .device = SPECD_DEVICE_HOST};
        if (c->mode == MASK_F16_PADDED) {
            for (int32_t i = 0; i < lay->n_rows; i++)
                for (int32_t x = 0; x < STRIDE; x++)
                    half[i * STRIDE + x] =
                        x < V ? specd_fp32_to_fp16(rows[i * V + x]) : 0x7e00u; /* NaN padding */
            lg = (specd_logits){.data = half, .row_stride = STRIDE, .n_rows = lay->n_rows,
                                .dtype = SPECD_DTYPE_F16, .device = SPECD_DEVICE_HOST};
        }
        specd_batch_result res;
        if (specd_spec_batch_verify(spec, &lg, &res, &err) != SPECD_OK)
            fail_msg("verify: %s", err.message);
        const specd_step_outcome *o = &res.outcome[0];
        memcpy(ctx + n_ctx, o->emitted, (size_t)o->n_emitted * sizeof(int32_t));
        n_ctx += o->n_emitted;
    }
    int64_t n;
    const int32_t *toks = specd_spec_seq_output(spec, 2, &n);
    assert_int_equal(n, N_OUT);
    memcpy(out, toks, N_OUT * sizeof(int32_t));
    specd_spec_destroy(spec);
}

static void assert_same(const int32_t *a, const int32_t *b, const char *what) {
    for (int i = 0; i < N_OUT; i++)
        if (a[i] != b[i]) fail_msg("%s: differs at token %d (%d vs %d)", what, i, a[i], b[i]);
}

static void test_masks_are_bans(void **s) {
    (void)s;
    static const struct { specd_accept_rule rule; float t; } cases[] = {
        {SPECD_ACCEPT_COUPLED, 0.3f}, {SPECD_ACCEPT_COUPLED, 1.7f},
        {SPECD_ACCEPT_GREEDY, 0.0f},  {SPECD_ACCEPT_REJECTION, 0.5f}};
    static const char *const pols[] = {"none", "ngram"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int k = 0; k < 2; k++) {
            int32_t banned[N_OUT], inf[N_OUT], fmax[N_OUT], plain[N_OUT];
            run_cfg cfg = {pols[k], cases[c].rule, cases[c].t, MASK_NONE, 1};
            run(&cfg, banned);
            cfg.bias_ban = 0;
            run(&cfg, plain);
            cfg.mode = MASK_NEG_INF;
            run(&cfg, inf);
            cfg.mode = MASK_FLT_MAX;
            run(&cfg, fmax);
            assert_same(banned, inf, "-inf mask vs bias ban");
            assert_same(banned, fmax, "-FLT_MAX mask vs bias ban");
            int saw_masked = 0;
            for (int i = 0; i < N_OUT; i++) {
                assert_false(masked(inf[i]));
                saw_masked |= masked(plain[i]);
            }
            assert_true(saw_masked); /* the mask removed tokens that would have come */
        }
}

static void test_f16_padded_rows(void **s) {
    (void)s;
    int32_t a[N_OUT], b[N_OUT];
    run_cfg cfg = {"ngram", SPECD_ACCEPT_COUPLED, 0.8f, MASK_F16_PADDED, 0};
    run(&cfg, a); /* f16, -inf masks, NaN in the padding (never read) */
    cfg.mode = MASK_F16_AS_F32; /* the same f16-rounded values, dense f32, no masks */
    cfg.bias_ban = 1;
    run(&cfg, b);
    assert_same(a, b, "f16 padded with masks vs f16-rounded f32 with bans");
}

static void test_bad_values(void **s) {
    (void)s;
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_seq_params p = specd_seq_default_params();
    p.policy = "ngram";
    p.adaptive = 0;
    const int32_t prompt[] = {1, 2, 3, 1, 2};
    assert_int_equal(specd_spec_seq_open(spec, 4, prompt, 5, &p, &err), SPECD_OK);
    specd_step_layout lay;
    assert_int_equal(specd_spec_seq_layout(spec, 4, &lay, &err), SPECD_OK);
    assert_true(lay.n_rows >= 2); /* the n-gram proposes "3" */
    static float rows[(2 * 8 + 1) * V];
    for (int i = 0; i < lay.n_rows * V; i++) rows[i] = (float)(i % 5);
    specd_step_outcome o;
    const float bad[] = {NAN, INFINITY};
    for (int b = 0; b < 2; b++) {
        rows[V + 7] = bad[b];
        assert_int_equal(specd_spec_seq_verify(spec, 4, rows, &o, &err), SPECD_E_NUMERIC);
        assert_non_null(strstr(err.message, "sequence 4, logits row 1 token 7"));
    }
    for (int x = 0; x < V; x++) rows[V + x] = -INFINITY;
    assert_int_equal(specd_spec_seq_verify(spec, 4, rows, &o, &err), SPECD_E_NUMERIC);
    assert_non_null(strstr(err.message, "every token is masked"));
    int64_t n_out;
    specd_spec_seq_output(spec, 4, &n_out);
    assert_int_equal(n_out, 0); /* nothing changed: the step can be verified again */
    specd_logits lg = {.data = rows, .row_stride = V - 1, .n_rows = lay.n_rows,
                       .dtype = SPECD_DTYPE_F32, .device = SPECD_DEVICE_HOST};
    assert_int_equal(specd_spec_seq_verify_logits(spec, 4, &lg, &o, &err), SPECD_E_INVALID_ARG);
    lg.row_stride = V;
    lg.n_rows = lay.n_rows - 1;
    assert_int_equal(specd_spec_seq_verify_logits(spec, 4, &lg, &o, &err), SPECD_E_INVALID_ARG);
    lg.n_rows = lay.n_rows;
    lg.device = SPECD_DEVICE_CUDA; /* a host pointer, and no device on CI machines */
    specd_status st = specd_spec_seq_verify_logits(spec, 4, &lg, &o, &err);
    assert_true(st == SPECD_E_UNSUPPORTED || st == SPECD_E_INVALID_ARG);
    lg.device = SPECD_DEVICE_HOST;
    for (int i = 0; i < lay.n_rows * V; i++) rows[i] = (float)(i % 5);
    assert_int_equal(specd_spec_seq_verify_logits(spec, 4, &lg, &o, &err), SPECD_OK);
    specd_spec_seq_output(spec, 4, &n_out);
    assert_int_equal(n_out, o.n_emitted);
    specd_spec_destroy(spec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masks_are_bans),
        cmocka_unit_test(test_f16_padded_rows),
        cmocka_unit_test(test_bad_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
