/* dInfer commit rules (paper 001 App. A.1, B, eqs. 1-2) on hand-worked windows. Each expected
 * value is computed here from the paper's formula on the case's numbers, not taken from a run. */
#include "test_main.h"

#include "policy/dlm/dlm_commit.h"
#include "policy/dlm/dlm_credit.h"
#include "policy/dlm/dlm_smooth.h"

#include <math.h>
#include <string.h>

#define NEAR(a, b) assert_true(fabs((double)(a) - (double)(b)) < 1e-5)

static specd_dlm_pos P(float p) {
    return (specd_dlm_pos){.token = 1, .p = p, .entropy = 0.5f};
}

static void test_summary_from_logits(void **s) {
    (void)s;
    specd_error err;
    specd_dlm_pos o;
    /* logits (0, ln 3): p = (1/4, 3/4); H = 1/4 ln 4 + 3/4 ln(4/3) */
    const float l2[2] = {0.0f, (float)log(3.0)};
    assert_int_equal(specd_dlm_pos_from_logits(l2, 2, &o, &err), SPECD_OK);
    assert_int_equal(o.token, 1);
    NEAR(o.p, 0.75);
    NEAR(o.entropy, 0.25 * log(4.0) + 0.75 * log(4.0 / 3.0));
    /* four equal logits: uniform, p = 1/4, H = ln 4, ties go to the lowest id */
    const float l4[4] = {2.0f, 2.0f, 2.0f, 2.0f};
    assert_int_equal(specd_dlm_pos_from_logits(l4, 4, &o, &err), SPECD_OK);
    assert_int_equal(o.token, 0);
    NEAR(o.p, 0.25);
    NEAR(o.entropy, log(4.0));
    /* a NaN logit is an error and leaves the output alone */
    const float bad[3] = {0.0f, NAN, 1.0f};
    specd_dlm_pos keep = {.token = 42, .p = 0.5f, .entropy = 1.0f};
    o = keep;
    assert_int_equal(specd_dlm_pos_from_logits(bad, 3, &o, &err), SPECD_E_NUMERIC);
    assert_int_equal(o.token, 42);
    const float inf[2] = {INFINITY, 0.0f};
    assert_int_equal(specd_dlm_pos_from_logits(inf, 2, &o, &err), SPECD_E_NUMERIC);
    /* -inf rules a token out: (0, -inf, ln 3) is the two-token case above */
    const float ruled[3] = {0.0f, -INFINITY, (float)log(3.0)};
    assert_int_equal(specd_dlm_pos_from_logits(ruled, 3, &o, &err), SPECD_OK);
    assert_int_equal(o.token, 2);
    NEAR(o.p, 0.75);
    NEAR(o.entropy, 0.25 * log(4.0) + 0.75 * log(4.0 / 3.0));
    const float none[2] = {-INFINITY, -INFINITY};
    assert_int_equal(specd_dlm_pos_from_logits(none, 2, &o, &err), SPECD_E_NUMERIC);
    assert_int_equal(specd_dlm_pos_from_logits(l2, 0, &o, &err), SPECD_E_INVALID_ARG);
}

static void test_summary_from_probs(void **s) {
    (void)s;
    specd_error err;
    specd_dlm_pos o;
    const float q[3] = {0.1f, 0.2f, 0.7f};
    assert_int_equal(specd_dlm_pos_from_probs(q, 3, &o, &err), SPECD_OK);
    assert_int_equal(o.token, 2);
    NEAR(o.p, 0.7);
    NEAR(o.entropy, -(0.1 * log(0.1) + 0.2 * log(0.2) + 0.7 * log(0.7)));
    const float short_sum[3] = {0.1f, 0.1f, 0.7f}; /* sums to 0.9 */
    assert_int_equal(specd_dlm_pos_from_probs(short_sum, 3, &o, &err), SPECD_E_NUMERIC);
    const float neg[2] = {1.5f, -0.5f};
    assert_int_equal(specd_dlm_pos_from_probs(neg, 2, &o, &err), SPECD_E_NUMERIC);
}

static void test_threshold(void **s) {
    (void)s;
    specd_error err;
    uint8_t c[8];
    int32_t k = -1;
    /* p >= 0.9 among masked: slot 0 (0.95) and slot 3 (0.9, equal counts); slot 2 is not masked */
    specd_dlm_pos w[4] = {P(0.95f), P(0.5f), P(0.99f), P(0.9f)};
    const uint8_t m[4] = {1, 1, 0, 1};
    assert_int_equal(specd_dlm_commit_threshold(w, m, 4, 0.9f, c, &k, &err), SPECD_OK);
    assert_int_equal(k, 2);
    assert_true(c[0] == 1 && c[1] == 0 && c[2] == 0 && c[3] == 1);
    /* all below tau: only the most confident masked slot, slot 1 (0.3) */
    specd_dlm_pos lo[3] = {P(0.1f), P(0.3f), P(0.2f)};
    const uint8_t all[3] = {1, 1, 1};
    assert_int_equal(specd_dlm_commit_threshold(lo, all, 3, 0.9f, c, &k, &err), SPECD_OK);
    assert_int_equal(k, 1);
    assert_true(c[0] == 0 && c[1] == 1 && c[2] == 0);
    /* W = 1 with zero confidence still commits */
    specd_dlm_pos z[1] = {P(0.0f)};
    assert_int_equal(specd_dlm_commit_threshold(z, all, 1, 0.9f, c, &k, &err), SPECD_OK);
    assert_int_equal(k, 1);
    assert_int_equal(c[0], 1);
    /* equal confidences below tau: the leftmost */
    specd_dlm_pos eq[3] = {P(0.2f), P(0.2f), P(0.2f)};
    const uint8_t tail[3] = {0, 1, 1};
    assert_int_equal(specd_dlm_commit_threshold(eq, tail, 3, 0.9f, c, &k, &err), SPECD_OK);
    assert_true(k == 1 && c[1] == 1 && c[2] == 0);
    /* NaN confidence: an error, commit untouched */
    specd_dlm_pos nan_w[2] = {P(0.5f), P(NAN)};
    memset(c, 7, sizeof c);
    assert_int_equal(specd_dlm_commit_threshold(nan_w, all, 2, 0.9f, c, &k, &err), SPECD_E_NUMERIC);
    assert_int_equal(c[0], 7);
    /* no masked slot: nothing to commit is a state error, not a silent zero */
    const uint8_t none[3] = {0, 0, 0};
    assert_int_equal(specd_dlm_commit_threshold(lo, none, 3, 0.9f, c, &k, &err), SPECD_E_STATE);
}

static void test_hierarchical(void **s) {
    (void)s;
    specd_error err;
    uint8_t c[8];
    int32_t k = -1;
    /* regions {0,1,2}, {4,5}, {7}; tau_high 0.92, tau_low 0.62.
     * region 1: top slot 1 (0.7 > 0.62) commits; region 2: top slot 4 (0.65 > 0.62) commits;
     * region 3: slot 7 (0.4) does not; nothing above 0.92; the window top (slot 1) is in. */
    specd_dlm_pos w[8] = {P(0.5f), P(0.7f), P(0.3f), P(1.0f), P(0.65f), P(0.6f), P(1.0f), P(0.4f)};
    const uint8_t m[8] = {1, 1, 1, 0, 1, 1, 0, 1};
    assert_int_equal(specd_dlm_commit_hierarchical(w, m, 8, 0.92f, 0.62f, c, &k, &err), SPECD_OK);
    const uint8_t want[8] = {0, 1, 0, 0, 1, 0, 0, 0};
    assert_memory_equal(c, want, 8);
    assert_int_equal(k, 2);
    /* a region with two slots above tau_high commits both (0.95, 0.93), not only its top */
    specd_dlm_pos h[3] = {P(0.95f), P(0.93f), P(0.1f)};
    const uint8_t all[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    assert_int_equal(specd_dlm_commit_hierarchical(h, all, 3, 0.92f, 0.62f, c, &k, &err), SPECD_OK);
    assert_true(k == 2 && c[0] && c[1] && !c[2]);
    /* every region below tau_low: only the window's top, slot 3 (0.5) */
    specd_dlm_pos lo[4] = {P(0.3f), P(0.2f), P(1.0f), P(0.5f)};
    const uint8_t m2[4] = {1, 1, 0, 1};
    assert_int_equal(specd_dlm_commit_hierarchical(lo, m2, 4, 0.92f, 0.62f, c, &k, &err), SPECD_OK);
    assert_true(k == 1 && c[3] && !c[0] && !c[1]);
    /* W = 1 */
    specd_dlm_pos one[1] = {P(0.01f)};
    assert_int_equal(specd_dlm_commit_hierarchical(one, all, 1, 0.92f, 0.62f, c, &k, &err),
                     SPECD_OK);
    assert_true(k == 1 && c[0]);
    specd_dlm_pos nan_w[2] = {P(NAN), P(0.5f)};
    assert_int_equal(specd_dlm_commit_hierarchical(nan_w, all, 2, 0.92f, 0.62f, c, &k, &err),
                     SPECD_E_NUMERIC);
}

static void test_eos_stop(void **s) {
    (void)s;
    const int32_t eos[2] = {2, 0};
    const int32_t t[4] = {5, 7, 2, 9};
    const uint8_t all[4] = {1, 1, 1, 1};
    assert_int_equal(specd_dlm_eos_stop(t, all, 4, eos, 2), 2);
    const uint8_t gap[4] = {1, 0, 1, 1}; /* undecided slot 1 before the EOS */
    assert_int_equal(specd_dlm_eos_stop(t, gap, 4, eos, 2), -1);
    const int32_t t0[3] = {0, 5, 5};
    assert_int_equal(specd_dlm_eos_stop(t0, all, 3, eos, 2), 0);
    const int32_t no[3] = {4, 5, 6};
    assert_int_equal(specd_dlm_eos_stop(no, all, 3, eos, 2), -1);
}

/* Credit: vocab 3, alpha 1, beta 0.5, gamma 0.5, three iterations at one position. With alpha = 1,
 * eq. 2 gives e^{f~_v} = e^{f_v} (1 + C_v), so p~ is e^{f} (1 + C) renormalised. */
static void test_credit_equations(void **s) {
    (void)s;
    specd_error err;
    specd_dlm_credit c;
    specd_dlm_credit_params pr = {.alpha = 1.0f, .beta = 0.5f, .gamma = 0.5f};
    assert_int_equal(specd_dlm_credit_init(&c, pr, &err), SPECD_OK);
    specd_dlm_pos f;

    /* t = 1: e^f = (1, 2, 1), p = (1/4, 1/2, 1/4), v* = 1: C_1 = 0.5 * 0 + (1/2)^0.5 */
    const float l1[3] = {0.0f, (float)log(2.0), 0.0f};
    assert_int_equal(specd_dlm_credit_update(&c, 10, l1, 3, &f, &err), SPECD_OK);
    const double c1 = sqrt(0.5);
    NEAR(specd_dlm_credit_get(&c, 10, 1), c1);
    assert_true(specd_dlm_credit_get(&c, 10, 0) == 0.0);
    double e[3] = {1.0, 2.0 * (1.0 + c1), 1.0}, z = e[0] + e[1] + e[2];
    assert_int_equal(f.token, 1);
    NEAR(f.p, e[1] / z);
    NEAR(f.entropy,
         -(e[0] / z * log(e[0] / z) + e[1] / z * log(e[1] / z) + e[2] / z * log(e[2] / z)));

    /* t = 2: e^f = (3, 1, 1), p = (0.6, 0.2, 0.2), v* = 0: C_0 = 0 + 0.6^0.5, C_1 = 0.5 c1 */
    const float l2[3] = {(float)log(3.0), 0.0f, 0.0f};
    assert_int_equal(specd_dlm_credit_update(&c, 10, l2, 3, &f, &err), SPECD_OK);
    const double c0 = sqrt(0.6), c1b = 0.5 * c1;
    NEAR(specd_dlm_credit_get(&c, 10, 0), c0);
    NEAR(specd_dlm_credit_get(&c, 10, 1), c1b);
    e[0] = 3.0 * (1.0 + c0), e[1] = 1.0 * (1.0 + c1b), e[2] = 1.0;
    z = e[0] + e[1] + e[2];
    assert_int_equal(f.token, 0);
    NEAR(f.p, e[0] / z);

    /* t = 3: e^f = (1, 4, 1), p(1) = 4/6, v* = 1: C_1 = 0.5 C_1 + (2/3)^0.5, C_0 = 0.5 C_0 */
    const float l3[3] = {0.0f, (float)log(4.0), 0.0f};
    assert_int_equal(specd_dlm_credit_update(&c, 10, l3, 3, &f, &err), SPECD_OK);
    const double c1c = 0.5 * c1b + sqrt(4.0 / 6.0), c0c = 0.5 * c0;
    NEAR(specd_dlm_credit_get(&c, 10, 1), c1c);
    NEAR(specd_dlm_credit_get(&c, 10, 0), c0c);
    e[0] = 1.0 * (1.0 + c0c), e[1] = 4.0 * (1.0 + c1c), e[2] = 1.0;
    z = e[0] + e[1] + e[2];
    assert_int_equal(f.token, 1);
    NEAR(f.p, e[1] / z);

    /* positions are independent: lpos 11 starts at zero credit */
    assert_true(specd_dlm_credit_get(&c, 11, 1) == 0.0);
    /* forget resets: the next update at lpos 10 starts again from C = 0 (like t = 1) */
    specd_dlm_credit_forget(&c, 10);
    assert_true(specd_dlm_credit_get(&c, 10, 1) == 0.0 && specd_dlm_credit_get(&c, 10, 0) == 0.0);
    assert_int_equal(specd_dlm_credit_update(&c, 10, l1, 3, &f, &err), SPECD_OK);
    NEAR(specd_dlm_credit_get(&c, 10, 1), c1);
    assert_true(specd_dlm_credit_get(&c, 10, 0) == 0.0);

    /* a held token whose logit is now -inf keeps probability 0: t = 4 at lpos 10 with e^f =
     * (1, 0, 1): v* = 0 (p 1/2), C_0 = sqrt(1/2), C_1 = 0.5 c1; p~ = (1 + C_0, 0, 1) normalised */
    const float l4[3] = {0.0f, -INFINITY, 0.0f};
    assert_int_equal(specd_dlm_credit_update(&c, 10, l4, 3, &f, &err), SPECD_OK);
    assert_int_equal(f.token, 0);
    NEAR(f.p, (1.0 + sqrt(0.5)) / (2.0 + sqrt(0.5)));
    NEAR(specd_dlm_credit_get(&c, 10, 1), 0.5 * c1);
    specd_dlm_credit_forget(&c, 10);
    assert_int_equal(specd_dlm_credit_update(&c, 10, l1, 3, &f, &err), SPECD_OK);

    /* NaN logits: error, credit unchanged */
    const float bad[3] = {0.0f, NAN, 0.0f};
    assert_int_equal(specd_dlm_credit_update(&c, 10, bad, 3, &f, &err), SPECD_E_NUMERIC);
    NEAR(specd_dlm_credit_get(&c, 10, 1), c1);
}

/* alpha != 1: e^{f~} = e^f (1 + C)^alpha; the credit boost can overturn the raw argmax. */
static void test_credit_alpha_overturns(void **s) {
    (void)s;
    specd_error err;
    specd_dlm_credit c;
    specd_dlm_credit_params pr = {.alpha = 2.0f, .beta = 0.9f, .gamma = 0.5f};
    assert_int_equal(specd_dlm_credit_init(&c, pr, &err), SPECD_OK);
    specd_dlm_pos f;
    /* t = 1: e^f = (1, 9): p(1) = 0.9, C_1 = 0.9^0.5 */
    const float a[2] = {0.0f, (float)log(9.0)};
    assert_int_equal(specd_dlm_credit_update(&c, 0, a, 2, &f, &err), SPECD_OK);
    const double k1 = sqrt(0.9);
    /* t = 2: the same: C_1 = 0.9 k1 + sqrt(0.9) */
    assert_int_equal(specd_dlm_credit_update(&c, 0, a, 2, &f, &err), SPECD_OK);
    const double k1b = 0.9 * k1 + sqrt(0.9);
    NEAR(specd_dlm_credit_get(&c, 0, 1), k1b);
    assert_int_equal(f.token, 1);
    NEAR(f.p, 9.0 * (1.0 + k1b) * (1.0 + k1b) / (1.0 + 9.0 * (1.0 + k1b) * (1.0 + k1b)));
    /* t = 3: e^f = (1.05, 1): the raw argmax is 0 (p = 1.05/2.05), C_0 = sqrt(1.05/2.05) = 0.716,
     * C_1 = 0.9 k1b = 1.622; e^{f~} = (1.05 * 1.716^2, 2.622^2) = (3.09, 6.88): token 1's older
     * credit overturns the raw argmax */
    const float d[2] = {(float)log(1.05), 0.0f};
    assert_int_equal(specd_dlm_credit_update(&c, 0, d, 2, &f, &err), SPECD_OK);
    const double k0c = sqrt(1.05 / 2.05), k1c = 0.9 * k1b;
    const double g0 = 1.05 * (1.0 + k0c) * (1.0 + k0c), g1 = (1.0 + k1c) * (1.0 + k1c);
    NEAR(specd_dlm_credit_get(&c, 0, 0), k0c);
    NEAR(specd_dlm_credit_get(&c, 0, 1), k1c);
    assert_true(g1 > g0);
    assert_int_equal(f.token, 1);
    NEAR(f.p, g1 / (g0 + g1));
}

static void test_credit_limits(void **s) {
    (void)s;
    specd_error err;
    specd_dlm_credit c;
    specd_dlm_credit_params bad = {.alpha = 1.0f, .beta = 1.0f, .gamma = 0.5f};
    assert_int_equal(specd_dlm_credit_init(&c, bad, &err), SPECD_E_INVALID_ARG);
    bad.beta = 0.5f, bad.gamma = 0.0f;
    assert_int_equal(specd_dlm_credit_init(&c, bad, &err), SPECD_E_INVALID_ARG);
    bad.gamma = 0.5f, bad.alpha = 0.0f;
    assert_int_equal(specd_dlm_credit_init(&c, bad, &err), SPECD_E_INVALID_ARG);
    specd_dlm_credit_params pr = {.alpha = 1.0f, .beta = 0.5f, .gamma = 0.5f};
    assert_int_equal(specd_dlm_credit_init(&c, pr, &err), SPECD_OK);
    /* SPECD_DLM_CREDIT_TOKENS + 1 distinct argmaxes at one position: token 0's credit, the
     * oldest and so (beta < 1, equal p) the smallest, is the one dropped */
    enum { V = SPECD_DLM_CREDIT_TOKENS + 1 };
    float l[V];
    specd_dlm_pos f;
    for (int t = 0; t < V; t++) {
        for (int v = 0; v < V; v++)
            l[v] = v == t ? 5.0f : 0.0f;
        assert_int_equal(specd_dlm_credit_update(&c, 3, l, V, &f, &err), SPECD_OK);
    }
    assert_true(specd_dlm_credit_get(&c, 3, 0) == 0.0);
    assert_true(specd_dlm_credit_get(&c, 3, 1) > 0.0 && specd_dlm_credit_get(&c, 3, V - 1) > 0.0);
    /* the position table is bounded: one more position than it holds is a state error */
    assert_int_equal(specd_dlm_credit_init(&c, pr, &err), SPECD_OK);
    for (int p = 0; p < SPECD_DLM_CREDIT_SLOTS; p++)
        assert_int_equal(specd_dlm_credit_update(&c, p, l, V, &f, &err), SPECD_OK);
    assert_int_equal(specd_dlm_credit_update(&c, SPECD_DLM_CREDIT_SLOTS, l, V, &f, &err),
                     SPECD_E_STATE);
    specd_dlm_credit_forget(&c, 0);
    assert_int_equal(specd_dlm_credit_update(&c, SPECD_DLM_CREDIT_SLOTS, l, V, &f, &err), SPECD_OK);
}

/* Credit then threshold: the fused summaries still obey at-least-one. */
static void test_credit_threshold_progress(void **s) {
    (void)s;
    specd_error err;
    specd_dlm_credit c;
    assert_int_equal(specd_dlm_credit_init(&c, specd_dlm_credit_default_params(), &err), SPECD_OK);
    specd_dlm_pos f[3];
    const float flat[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < 3; i++)
        assert_int_equal(specd_dlm_credit_update(&c, 100 + i, flat, 4, &f[i], &err), SPECD_OK);
    const uint8_t m[3] = {1, 1, 1};
    uint8_t commit[3];
    int32_t k = 0;
    assert_int_equal(specd_dlm_commit_threshold(f, m, 3, 0.99f, commit, &k, &err), SPECD_OK);
    assert_int_equal(k, 1);
}

static const float EMB[3][2] = {{1.0f, 0.0f}, {0.0f, 1.0f}, {1.0f, 1.0f}};
static int emb_row(void *ctx, int32_t t, float *out) {
    (void)ctx;
    if (t < 0 || t > 2) return -1;
    memcpy(out, EMB[t], sizeof EMB[t]);
    return 0;
}
static int emb_fail(void *ctx, int32_t t, float *out) {
    (void)ctx, (void)t, (void)out;
    return -1;
}

static void test_iter_smooth(void **s) {
    (void)s;
    specd_error err;
    /* p = (1/4, 1/2, 1/4): p W_emb = 1/4 (1,0) + 1/2 (0,1) + 1/4 (1,1) = (0.5, 0.75);
     * e_mask (0.5, -0.5), alpha 0.2: (0.5 + 0.1, -0.5 + 0.15) = (0.6, -0.35) */
    const float l[3] = {0.0f, (float)log(2.0), 0.0f};
    const float em[2] = {0.5f, -0.5f};
    float scratch[4], out[2];
    int32_t used = 0;
    assert_int_equal(
        specd_dlm_smooth_row(l, 3, emb_row, NULL, em, 2, 0.2f, scratch, out, &used, &err),
        SPECD_OK);
    NEAR(out[0], 0.6);
    NEAR(out[1], -0.35);
    assert_int_equal(used, 3);
    /* alpha 0 gives the plain mask embedding */
    assert_int_equal(
        specd_dlm_smooth_row(l, 3, emb_row, NULL, em, 2, 0.0f, scratch, out, NULL, &err), SPECD_OK);
    NEAR(out[0], 0.5);
    NEAR(out[1], -0.5);
    /* a -inf logit: p = (1/3, 2/3, 0), p W_emb = (1/3, 2/3); alpha 0.3: (0.5 + 0.1, -0.5 + 0.2),
     * and the ruled-out token's row is never read */
    const float lm[3] = {0.0f, (float)log(2.0), -INFINITY};
    assert_int_equal(
        specd_dlm_smooth_row(lm, 3, emb_row, NULL, em, 2, 0.3f, scratch, out, &used, &err),
        SPECD_OK);
    NEAR(out[0], 0.6);
    NEAR(out[1], -0.3);
    assert_int_equal(used, 2);
    /* NaN logits and a failing row: errors, out untouched */
    const float bad[3] = {NAN, 0.0f, 0.0f};
    out[0] = 9.0f;
    assert_int_equal(
        specd_dlm_smooth_row(bad, 3, emb_row, NULL, em, 2, 0.2f, scratch, out, NULL, &err),
        SPECD_E_NUMERIC);
    assert_int_equal(
        specd_dlm_smooth_row(l, 3, emb_fail, NULL, em, 2, 0.2f, scratch, out, NULL, &err),
        SPECD_E_IO);
    assert_true(out[0] == 9.0f);
    /* a flat tail of 999 tokens at 1/e^5 of the top (all above 1e-9 of it) would read 1000
     * rows: the bound rises by decades to 1e-2, only the top's row (token 1 here, the others have
     * no row: emb_row fails on them) is read, with its full-softmax weight p1 = e^5 / (e^5 + 999) */
    static float flat[1000];
    for (int v = 0; v < 1000; v++)
        flat[v] = v == 1 ? 5.0f : 0.0f;
    assert_int_equal(
        specd_dlm_smooth_row(flat, 1000, emb_row, NULL, em, 2, 0.5f, scratch, out, &used, &err),
        SPECD_OK);
    assert_int_equal(used, 1);
    const double p1 = exp(5.0) / (exp(5.0) + 999.0);
    NEAR(out[0], 0.5);
    NEAR(out[1], -0.5 + 0.5 * p1);
    /* schedule: init 0.1, growth 0.05, max 0.3: t = 0 -> 0.1, t = 2 -> 0.2, t = 10 -> capped */
    NEAR(specd_dlm_smooth_alpha(0.1f, 0.05f, 0.3f, 0), 0.1);
    NEAR(specd_dlm_smooth_alpha(0.1f, 0.05f, 0.3f, 2), 0.2);
    NEAR(specd_dlm_smooth_alpha(0.1f, 0.05f, 0.3f, 10), 0.3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_summary_from_logits),
        cmocka_unit_test(test_summary_from_probs),
        cmocka_unit_test(test_threshold),
        cmocka_unit_test(test_hierarchical),
        cmocka_unit_test(test_eos_stop),
        cmocka_unit_test(test_credit_equations),
        cmocka_unit_test(test_credit_alpha_overturns),
        cmocka_unit_test(test_credit_limits),
        cmocka_unit_test(test_credit_threshold_progress),
        cmocka_unit_test(test_iter_smooth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
