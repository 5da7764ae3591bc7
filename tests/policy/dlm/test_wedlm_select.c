/* WeDLM streaming decoding rules (paper 003, §5.2, eq. 11, eq. 4, Alg. 1) on hand-worked windows:
 * every expected value is computed here from the paper's definitions on the case's numbers. */
#include "test_main.h"

#include "policy/dlm/wedlm_select.h"

#include <math.h>
#include <string.h>

static specd_dlm_pos H(float h) {
    return (specd_dlm_pos){.token = 0, .p = 0.5f, .entropy = h};
}

static void test_select_eq11(void **s) {
    (void)s;
    specd_error err;
    uint8_t f[8];
    int32_t k = -1;
    const uint8_t all[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    /* H = (0.1, 0.5, 0.05, 0.3), all masks, leftmost mask = slot 0, d = (0, 1, 2, 3);
     * lambda 0.1: H~ = (0.1, 0.6, 0.25, 0.6); tau 0.3 fills slots 0 and 2 */
    specd_dlm_pos w[4] = {H(0.1f), H(0.5f), H(0.05f), H(0.3f)};
    assert_int_equal(specd_wedlm_select(w, all, 4, 0.3f, 0.1f, f, &k, &err), SPECD_OK);
    assert_int_equal(k, 2);
    assert_true(f[0] && !f[1] && f[2] && !f[3]);
    /* lambda 0.2: H~ = (0.1, 0.7, 0.45, 0.9): only slot 0; the penalty is what keeps slot 2 out */
    assert_int_equal(specd_wedlm_select(w, all, 4, 0.3f, 0.2f, f, &k, &err), SPECD_OK);
    assert_true(k == 1 && f[0] && !f[2]);
    /* lambda 0: plain entropy selection, slots 0 and 2 (0.3 is not < 0.3) */
    assert_int_equal(specd_wedlm_select(w, all, 4, 0.3f, 0.0f, f, &k, &err), SPECD_OK);
    assert_true(k == 2 && f[0] && f[2] && !f[3]);
}

static void test_select_distance_from_leftmost_mask(void **s) {
    (void)s;
    specd_error err;
    uint8_t f[5];
    int32_t k = -1;
    /* slots 0 and 3 filled; masks 1, 2, 4; leftmost mask slot 1, so d = (-, 0, 1, -, 3);
     * H = (-, 1.0, 0.2, -, 0.1), lambda 0.1: H~ = (-, 1.0, 0.3, -, 0.4); tau 0.35 fills slot 2 */
    specd_dlm_pos w[5] = {H(0.0f), H(1.0f), H(0.2f), H(0.0f), H(0.1f)};
    const uint8_t m[5] = {0, 1, 1, 0, 1};
    assert_int_equal(specd_wedlm_select(w, m, 5, 0.35f, 0.1f, f, &k, &err), SPECD_OK);
    assert_int_equal(k, 1);
    assert_true(!f[0] && !f[1] && f[2] && !f[3] && !f[4]);
}

static void test_select_progress(void **s) {
    (void)s;
    specd_error err;
    uint8_t f[4];
    int32_t k = -1;
    const uint8_t all[4] = {1, 1, 1, 1};
    /* nothing below tau: the smallest H~ is filled. H = (2, 1, 3), lambda 0.5:
     * H~ = (2, 1.5, 4) -> slot 1, not the leftmost */
    specd_dlm_pos a[3] = {H(2.0f), H(1.0f), H(3.0f)};
    assert_int_equal(specd_wedlm_select(a, all, 3, 0.3f, 0.5f, f, &k, &err), SPECD_OK);
    assert_true(k == 1 && !f[0] && f[1] && !f[2]);
    /* tie: H = (2, 1.5, 3): H~ = (2, 2, 4) -> the leftmost of the tie, slot 0 */
    specd_dlm_pos b[3] = {H(2.0f), H(1.5f), H(3.0f)};
    assert_int_equal(specd_wedlm_select(b, all, 3, 0.3f, 0.5f, f, &k, &err), SPECD_OK);
    assert_true(k == 1 && f[0] && !f[1]);
    /* W = 1, huge entropy */
    specd_dlm_pos c[1] = {H(10.0f)};
    assert_int_equal(specd_wedlm_select(c, all, 1, 0.3f, 0.1f, f, &k, &err), SPECD_OK);
    assert_true(k == 1 && f[0]);
    /* NaN entropy: an error, fill untouched */
    specd_dlm_pos d[2] = {H(0.1f), H(NAN)};
    memset(f, 7, sizeof f);
    assert_int_equal(specd_wedlm_select(d, all, 2, 0.3f, 0.1f, f, &k, &err), SPECD_E_NUMERIC);
    assert_int_equal(f[0], 7);
    /* no mask left, and a negative lambda, are refused */
    const uint8_t none[2] = {0, 0};
    assert_int_equal(specd_wedlm_select(a, none, 2, 0.3f, 0.1f, f, &k, &err), SPECD_E_STATE);
    assert_int_equal(specd_wedlm_select(a, all, 2, 0.3f, -0.1f, f, &k, &err), SPECD_E_INVALID_ARG);
}

static void test_window_order_commit_advance(void **s) {
    (void)s;
    specd_error err;
    specd_wedlm_window w;
    assert_int_equal(specd_wedlm_window_init(&w, 6, 100, &err), SPECD_OK);
    assert_int_equal(specd_wedlm_commit_run(&w), 0);
    /* a window of filled (f) and masked (M) slots: f_n f_n+1 M f_n+3 M M at n = 100 */
    w.token[0] = 5, w.token[1] = 6, w.token[3] = 8;
    int32_t slot[6];
    int64_t pos[6];
    assert_int_equal(specd_wedlm_order(&w, slot, pos), 3);
    const int32_t want_slot[6] = {0, 1, 3, 2, 4, 5};
    const int64_t want_pos[6] = {100, 101, 103, 102, 104, 105};
    assert_memory_equal(slot, want_slot, sizeof want_slot);
    assert_memory_equal(pos, want_pos, sizeof want_pos);
    /* leftmost contiguous filled run in logical order: slots 0, 1 (slot 3 follows a mask) */
    assert_int_equal(specd_wedlm_commit_run(&w), 2);
    /* advance by the run: f_n+3 stays filled, two masks join at 106, 107 */
    assert_int_equal(specd_wedlm_advance(&w, 2, &err), SPECD_OK);
    assert_int_equal(w.w, 6);
    assert_true(w.first == 102);
    const int32_t want_tok[6] = {-1, 8, -1, -1, -1, -1};
    assert_memory_equal(w.token, want_tok, sizeof want_tok);
    assert_int_equal(specd_wedlm_order(&w, slot, pos), 1);
    const int64_t want_pos2[6] = {103, 102, 104, 105, 106, 107};
    assert_memory_equal(pos, want_pos2, sizeof want_pos2);
    assert_int_equal(specd_wedlm_commit_run(&w), 0);
    /* fully filled window commits all of it */
    for (int i = 0; i < 6; i++)
        w.token[i] = 1;
    assert_int_equal(specd_wedlm_commit_run(&w), 6);
    assert_int_equal(specd_wedlm_advance(&w, 7, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_wedlm_window_init(&w, 0, 0, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_wedlm_window_init(&w, SPECD_WEDLM_MAX_W + 1, 0, &err),
                     SPECD_E_INVALID_ARG);
}

/* Alg. 1 driven by scripted predictions: W = 3, tau 0.3, lambda 0.1, the "model" predicts token
 * 10 + lpos everywhere with the entropies below (by step and logical position).
 *   step 1: window M0 M1 M2, 3 rows, run 0. H = (0.1, 0.9, 0.05): H~ = (0.1, 1.0, 0.25)
 *           fills 0 and 2 (out of order).                         window f0 M1 f2
 *   step 2: rows f0 f2 M1 (pos 0 2 1), run 1 (f0). Mask 1: H 0.2, H~ 0.2 fills it.
 *           advance 1:                                            window f1 f2 M3
 *   step 3: rows f1 f2 M3 (pos 1 2 3), run 2. Mask 3: H 1.5, nothing below tau, so the
 *           smallest H~ (slot 2) is filled anyway.  advance 2:    window f3 M4 M5
 *   step 4: rows f3 M4 M5, run 1 (f3).
 * Committed 0 + 1 + 2 + 1 = 4 tokens in 4 forwards of 3 rows: p_cache (eq. 4) = 4 / 12,
 * TPF = 4 / 4. */
static float script_h(int step, int64_t lpos) {
    static const float h[5][6] = {
        {0.1f, 0.9f, 0.05f, 9, 9, 9}, /* step 1 */
        {9, 0.2f, 9, 9, 9, 9},        /* step 2 */
        {9, 9, 9, 1.5f, 9, 9},        /* step 3 */
        {9, 9, 9, 9, 0.1f, 0.1f},     /* step 4 */
        {9, 9, 9, 9, 9, 9},
    };
    return h[step - 1][lpos];
}

static void test_algorithm1_trace(void **s) {
    (void)s;
    specd_error err;
    specd_wedlm_window w;
    specd_wedlm_stats st = {0};
    assert_int_equal(specd_wedlm_window_init(&w, 3, 0, &err), SPECD_OK);
    const int32_t want_run[4] = {0, 1, 2, 1};
    const int64_t want_pos[4][3] = {{0, 1, 2}, {0, 2, 1}, {1, 2, 3}, {3, 4, 5}};
    int32_t out[8], n_out = 0;
    for (int step = 1; step <= 4; step++) {
        int32_t slot[3];
        int64_t pos[3];
        specd_wedlm_order(&w, slot, pos);
        assert_memory_equal(pos, want_pos[step - 1], sizeof pos);
        const int32_t run = specd_wedlm_commit_run(&w);
        assert_int_equal(run, want_run[step - 1]);
        for (int32_t i = 0; i < run; i++)
            out[n_out++] = w.token[i];
        specd_dlm_pos pr[3];
        uint8_t m[3], f[3];
        for (int32_t i = 0; i < 3; i++) {
            m[i] = w.token[i] < 0;
            pr[i] = (specd_dlm_pos){.token = (int32_t)(10 + w.first + i),
                                    .p = 0.5f,
                                    .entropy = script_h(step, w.first + i)};
        }
        int32_t k = 0;
        assert_int_equal(specd_wedlm_select(pr, m, 3, 0.3f, 0.1f, f, &k, &err), SPECD_OK);
        assert_true(k >= 1);
        for (int32_t i = 0; i < 3; i++)
            if (f[i]) w.token[i] = pr[i].token;
        assert_int_equal(specd_wedlm_advance(&w, run, &err), SPECD_OK);
        specd_wedlm_stats_step(&st, 3, run);
    }
    assert_int_equal(n_out, 4);
    for (int32_t i = 0; i < 4; i++)
        assert_int_equal(out[i], 10 + i);
    assert_true(st.n_gen == 4 && st.n_fwd == 12 && st.n_steps == 4);
    assert_true(fabs(specd_wedlm_p_cache(&st) - 4.0 / 12.0) < 1e-12);
    assert_true(fabs(specd_wedlm_tpf(&st) - 1.0) < 1e-12);
    specd_wedlm_stats zero = {0};
    assert_true(specd_wedlm_p_cache(&zero) == 0.0 && specd_wedlm_tpf(&zero) == 0.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select_eq11),
        cmocka_unit_test(test_select_distance_from_leftmost_mask),
        cmocka_unit_test(test_select_progress),
        cmocka_unit_test(test_window_order_commit_advance),
        cmocka_unit_test(test_algorithm1_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
