/* Paper 000 Appendix B eq. (5) and its per-position form (specd/isd.h). */
#include "test_main.h"

#include "specd/isd.h"

#include <math.h>
#include <string.h>

static void test_uniform_matches_eq5(void **s) {
    (void)s;
    /* the limits the paper states: p = 1 gives N, p = 0 gives 1 (AR) */
    for (int32_t n = 2; n <= 8; n++) {
        assert_true(fabs(specd_isd_tpf_uniform(1.0, n) - n) < 1e-12);
        assert_true(fabs(specd_isd_tpf_uniform(0.0, n) - 1.0) < 1e-12);
    }
    /* N = 3, p = 0.5: (2 + 0.5) / (2 - 0.25) */
    assert_true(fabs(specd_isd_tpf_uniform(0.5, 3) - 2.5 / 1.75) < 1e-12);
    /* N = 4, p = 0.8: (2 + 0.8 + 0.64) / (2 - 0.512) */
    assert_true(fabs(specd_isd_tpf_uniform(0.8, 4) - 3.44 / 1.488) < 1e-12);
    assert_true(specd_isd_tpf_uniform(-0.1, 3) == 0.0);
    assert_true(specd_isd_tpf_uniform(NAN, 3) == 0.0);
    assert_true(specd_isd_tpf_uniform(0.5, 1) == 0.0);
}

static void test_per_position_form(void **s) {
    (void)s;
    /* equal rates reduce to eq. (5) */
    for (int32_t n = 2; n <= 6; n++)
        for (double p = 0.0; p <= 1.0; p += 0.125) {
            double a[8];
            for (int i = 0; i < n - 1; i++) a[i] = p;
            assert_true(fabs(specd_isd_tpf_formula(a, n - 1) - specd_isd_tpf_uniform(p, n)) <
                        1e-12);
        }
    /* unequal rates, N = 3: s = 1, 0.5, 0.1; S = 0.1; (1 - 0.1 + 1.6) / 1.9 */
    const double a[2] = {0.5, 0.2};
    assert_true(fabs(specd_isd_tpf_formula(a, 2) - 2.5 / 1.9) < 1e-12);
    const double bad[2] = {0.5, 1.5};
    assert_true(specd_isd_tpf_formula(bad, 2) == 0.0);
    assert_true(specd_isd_tpf_formula(a, 0) == 0.0);
    assert_true(specd_isd_tpf_formula(NULL, 2) == 0.0);
}

static void test_rates_from_stats(void **s) {
    (void)s;
    specd_seq_stats st;
    memset(&st, 0, sizeof st);
    /* 10 stride steps of 3 proposals: 6 accepted the first, 3 of those the second, 3 the third */
    st.drafted_at[0] = st.drafted_at[1] = st.drafted_at[2] = 10;
    st.accepted_at[0] = 6;
    st.accepted_at[1] = 3;
    st.accepted_at[2] = 3;
    double a[8];
    assert_int_equal(specd_isd_accept_rates(&st, a, 8), 3);
    assert_true(fabs(a[0] - 0.6) < 1e-12 && fabs(a[1] - 0.5) < 1e-12 && fabs(a[2] - 1.0) < 1e-12);
    assert_int_equal(specd_isd_accept_rates(&st, a, 2), 2);
    memset(&st, 0, sizeof st);
    assert_int_equal(specd_isd_accept_rates(&st, a, 8), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform_matches_eq5),
        cmocka_unit_test(test_per_position_form),
        cmocka_unit_test(test_rates_from_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
