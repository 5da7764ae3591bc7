/* The batched-step cost model (session/batch_cost.h) and the adaptive guard fed by it: the fit
 * recovers a forward's fixed and per-row costs, shares add up to the batch's time, and a guard
 * judges drafting by what its rows add to the batch, not by the batch's wall clock: on a
 * compute-bound machine (every row costs the same) weak drafts stay off although each sequence's
 * wall clock grows little when it drafts; on a memory-bound one (a forward's fixed cost
 * dominates) they pay and are used. Synthetic timings; no clock is read. */
#include "test_main.h"

#include "session/adaptive.h"
#include "session/batch_cost.h"

#include <math.h>

static void test_fit_and_shares(void **s) {
    (void)s;
    specd_batch_cost c;
    specd_batch_cost_init(&c);
    static const int32_t rows[] = {16, 24, 19, 40, 16, 31, 22, 17, 28, 35};
    for (int i = 0; i < 10; i++) specd_batch_cost_observe(&c, rows[i], 2e6 + 5e4 * rows[i]);
    assert_true(c.fitted);
    assert_true(fabs(c.a - 2e6) < 1.0 && fabs(c.b - 5e4) < 1e-3);
    /* shares of a batch of 4 (rows 1, 5, 3, 7) add up to its time */
    const int32_t r[4] = {1, 5, 3, 7};
    double t = 2e6 + 5e4 * 16, sum = 0.0;
    for (int i = 0; i < 4; i++) sum += specd_batch_cost_share(&c, 4, r[i], 16, t);
    assert_true(fabs(sum - t) < 1e-6 * t);
    assert_true(fabs(specd_batch_cost_share(&c, 4, 1, 16, t) - (5e5 + 5e4)) < 1e-6);
    /* without spread in the rows a and b cannot be told apart: shares follow the rows */
    specd_batch_cost_init(&c);
    for (int i = 0; i < 5; i++) specd_batch_cost_observe(&c, 12, 1e6);
    assert_false(c.fitted);
    assert_true(fabs(specd_batch_cost_share(&c, 3, 3, 12, 1e6) - 2.5e5) < 1e-6);
}

/* One sequence of an n-sequence batch (the others step plainly) under a guard. Its drafts
 * accept one proposal in three. A forward over R rows costs a + b R. Returns the share of the
 * last 200 steps that drafted. by_share: the guard is fed the sequence's share of the batch;
 * else the batch's wall clock (the single-sequence reading). */
static double drafting_share(double a, double b, int32_t n, int by_share) {
    specd_adaptive g;
    specd_adaptive_init(&g, 1, 0, 4, NULL);
    specd_batch_cost c;
    specd_batch_cost_init(&c);
    int drafted = 0;
    uint32_t h = 12345;
    for (int step = 0; step < 600; step++) {
        int32_t k = specd_adaptive_budget(&g);
        int32_t acc = 0;
        while (acc < k) {
            h = h * 1664525u + 1013904223u;
            if ((h >> 8) % 3 != 0) break;
            acc++;
        }
        int32_t rows = 1 + k, total = (n - 1) + rows;
        double t = a + b * total;
        specd_batch_cost_observe(&c, total, t);
        double cost = by_share ? specd_batch_cost_share(&c, n, rows, total, t) : t;
        specd_adaptive_observe(&g, k, acc, acc + 1, (uint64_t)cost);
        if (step >= 400) drafted += k > 0;
    }
    return drafted / 200.0;
}

static void test_guard_judges_the_batch(void **s) {
    (void)s;
    /* compute-bound: 3 ms a row, nothing fixed. Drafting one proposal costs this sequence as
     * much as its plain step and yields 1/3 token: off. Read as wall clock (24 ms a batch, +3 ms
     * a proposal) the same drafts look cheap. */
    double cpu_share = drafting_share(0.0, 3e6, 8, 1);
    double cpu_wall = drafting_share(0.0, 3e6, 8, 0);
    assert_true(cpu_share < 0.1);
    assert_true(cpu_wall > 0.5); /* the reading this model replaces gets it wrong */
    /* memory-bound: 20 ms a forward, 0.05 ms a row: proposals are nearly free, drafting pays */
    assert_true(drafting_share(20e6, 5e4, 16, 1) > 0.8);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_and_shares),
        cmocka_unit_test(test_guard_judges_the_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
