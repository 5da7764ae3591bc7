/* Philox4x32-10 known answers, the exact uniform/Gumbel conversions and the error bounds the
 * fixed-operation exp/log document. */
#include "test_main.h"

#include <math.h>
#include <string.h>

#include "common/fastmath.h"
#include "common/philox.h"
#include "specd/sampling.h"

/* Random123 tests/kat_vectors, "philox4x32 10" lines: counter[4] key[2] -> output[4]. */
static void test_philox_known_answers(void **state) {
    (void)state;
    static const uint32_t kat[3][10] = {
        {0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x6627e8d5,
         0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int v = 0; v < 3; v++) {
        uint32_t out[4];
        specd_philox4x32_10_block(&kat[v][0], &kat[v][4], out);
        for (int j = 0; j < 4; j++) assert_int_equal(out[j], kat[v][6 + j]);
    }
}

static void test_uniform_is_exact_and_open(void **state) {
    (void)state;
    assert_true(specd_u32_to_uniform(0) == 0x1p-24f);
    assert_true(specd_u32_to_uniform(0xffffffffu) == 1.0f - 0x1p-24f);
    assert_true(specd_u32_to_uniform(0x80000000u) == 0.5f + 0x1p-24f);
    for (uint32_t w = 0; w < (1u << 23); w += 4099) {
        float u = specd_u32_to_uniform(w << 9);
        assert_true(u > 0.0f && u < 1.0f);
        assert_true((double)u == ((double)w + 0.5) / 8388608.0);
    }
}

/* The key layout of sampling.h: counter {token >> 2, position, sequence, purpose}, word token & 3. */
static void test_key_layout(void **state) {
    (void)state;
    specd_sample_key key = {.seed = 0x0123456789abcdefull, .sequence = 77, .position = 1234};
    uint32_t ctr[4] = {1000 >> 2, 1234, 77, SPECD_RNG_SAMPLE};
    uint32_t k[2] = {0x89abcdefu, 0x01234567u};
    uint32_t w[4];
    specd_philox4x32_10_block(ctr, k, w);
    float g = specd_sampling_gumbel(key, SPECD_RNG_SAMPLE, 1000 + 2);
    assert_true(g == specd_gumbel(specd_u32_to_uniform(w[2])));
    ctr[0] = 5;
    ctr[3] = SPECD_RNG_ACCEPT;
    specd_philox4x32_10_block(ctr, k, w);
    assert_true(specd_sampling_uniform(key, SPECD_RNG_ACCEPT, 5) == specd_u32_to_uniform(w[0]));
    /* purposes and sequences are separate streams */
    assert_true(specd_sampling_gumbel(key, SPECD_RNG_DRAFT, 1002) != g);
    key.sequence = 78;
    assert_true(specd_sampling_gumbel(key, SPECD_RNG_SAMPLE, 1002) != g);
}

/* |fast_log(x) - ln x| <= 2^-21 max(1, |ln x|) on a sweep of every 61st positive normal float. */
static void test_fast_log_error_bound(void **state) {
    (void)state;
    double worst = 0.0;
    for (uint32_t b = 0x00800000u; b < 0x7f800000u; b += 61) {
        float x = specd_f32_from_bits(b);
        double ref = log((double)x);
        double e = fabs((double)specd_fast_log(x) - ref) / fmax(1.0, fabs(ref));
        if (e > worst) worst = e;
    }
    print_message("fast_log worst scaled error %.3g (bound %.3g)\n", worst, 0x1p-21);
    assert_true(worst <= 0x1p-21);
}

static void test_fast_exp_error_bound(void **state) {
    (void)state;
    double worst = 0.0;
    for (uint32_t b = 0x80000000u; b <= 0xc2ac0000u; b += 17) { /* -0 .. -86 */
        float x = specd_f32_from_bits(b);
        double ref = exp((double)x);
        double e = fabs((double)specd_fast_exp_neg(x) - ref) / ref;
        if (e > worst) worst = e;
    }
    print_message("fast_exp worst relative error %.3g (bound %.3g)\n", worst, 0x1p-21);
    assert_true(worst <= 0x1p-21);
    assert_true(specd_fast_exp_neg(0.0f) == 1.0f);
    assert_true(specd_fast_exp_neg(-INFINITY) == 0.0f);
    assert_true(specd_fast_exp_neg(-90.0f) == 0.0f);
}

/* Keyed sampling skips tokens using SPECD_GUMBEL_MAX: it must bound every reachable value. */
static void test_gumbel_bound_is_exhaustive(void **state) {
    (void)state;
    float hi = -INFINITY, lo = INFINITY;
    for (uint32_t w = 0; w < (1u << 23); w++) {
        float g = specd_gumbel(specd_u32_to_uniform(w << 9));
        hi = g > hi ? g : hi;
        lo = g < lo ? g : lo;
    }
    print_message("gumbel range [%g, %g], bound %g\n", (double)lo, (double)hi,
                  (double)SPECD_GUMBEL_MAX);
    assert_true(hi <= SPECD_GUMBEL_MAX);
    assert_true(hi > 16.0f && lo < -2.5f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_uniform_is_exact_and_open),
        cmocka_unit_test(test_key_layout),
        cmocka_unit_test(test_fast_log_error_bound),
        cmocka_unit_test(test_fast_exp_error_bound),
        cmocka_unit_test(test_gumbel_bound_is_exhaustive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
