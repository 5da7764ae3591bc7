/* SimSD's verification layout as pure functions (policy/simsd_layout.h): the temporal attention
 * mask against eq. (1) of paper 004 written out case by case for every pair of rows, for several
 * draft orders; the RoPE copy and its ablation; and the policy's refusals (bad options, a step too
 * small for its rows), each with a message naming the cause. The real-model checks are
 * test_simsd_model. */
#include "test_main.h"

#include "policy/simsd_layout.h"
#include "specd/policy.h"
#include "specd/spec.h"

#include <string.h>

enum { MAXB = 6, CACHED = 3 };

/* eq. (1) for block rows i, j of kinds ki, kj (0 = data D, 1 = mask D~) */
static int eq1(int ki, int kj, int ti, int tj) {
    if (!ki && !kj) return tj <= ti;
    if (!ki && kj) return tj > ti;
    if (ki && !kj) return tj < ti;
    return tj >= ti;
}

static void check(int head, int b, const int32_t *tau) {
    const int n_tok = head + 2 * b, width = CACHED + n_tok;
    static uint8_t vis[(2 + 2 * MAXB) * (CACHED + 2 + 2 * MAXB)];
    specd_simsd_visible(vis, CACHED, head, b, tau);
    for (int r = 0; r < n_tok; r++)
        for (int j = 0; j < width; j++) {
            int want;
            const int step = j - CACHED;
            if (j < CACHED)
                want = 1; /* the committed prefix (tau 0): everyone */
            else if (r < head)
                want = step <= r; /* head rows: plain causal, never the block */
            else if (step < head)
                want = 1; /* the head is prefix to the block */
            else {
                const int bi = r - head, bj = step - head;
                want = eq1(bi >= b, bj >= b, tau[bi % b], tau[bj % b]);
            }
            if (vis[r * width + j] != want)
                fail_msg("head %d b %d: row %d col %d is %d, eq. (1) says %d", head, b, r, j,
                         vis[r * width + j], want);
        }
}

static void test_visible_is_eq1(void **s) {
    (void)s;
    const int32_t ltr[4] = {1, 2, 3, 4}, rtl[4] = {4, 3, 2, 1}, mixed[6] = {3, 1, 6, 2, 5, 4};
    check(1, 4, ltr);
    check(1, 4, rtl);
    check(5, 4, ltr); /* a commit step: pending + the finished block */
    check(1, 6, mixed);
    const int32_t one = 1;
    check(2, 1, &one);
}

/* D~ of the first draft step sees every mask and no data row; the last sees every other draft
 * and only its own mask: the two ends of the temporal order, spelled out. */
static void test_first_and_last_step_rows(void **s) {
    (void)s;
    const int32_t tau[3] = {2, 3, 1}; /* slot 2 first, slot 1 last */
    const int head = 1, b = 3, n_tok = head + 2 * b, width = CACHED + n_tok;
    uint8_t vis[7 * 10];
    specd_simsd_visible(vis, CACHED, head, b, tau);
    const uint8_t *first = vis + (head + b + 2) * width + CACHED + head; /* D~ of slot 2 */
    const uint8_t *last = vis + (head + b + 1) * width + CACHED + head;  /* D~ of slot 1 */
    const uint8_t want_first[6] = {0, 0, 0, 1, 1, 1}, want_last[6] = {1, 0, 1, 0, 1, 0};
    assert_memory_equal(first, want_first, 6);
    assert_memory_equal(last, want_last, 6);
}

static void test_rope_copy(void **s) {
    (void)s;
    int32_t pos[8];
    specd_simsd_positions(pos, 40, 4, 1);
    const int32_t copy[8] = {40, 41, 42, 43, 40, 41, 42, 43};
    assert_memory_equal(pos, copy, sizeof copy);
    specd_simsd_positions(pos, 40, 4, 0);
    const int32_t cont[8] = {40, 41, 42, 43, 44, 45, 46, 47};
    assert_memory_equal(pos, cont, sizeof cont);
}

static void refused(const char *opts, int32_t max_step_rows, const char *says) {
    const specd_policy_ops *ops = specd_policy_find("simsd");
    assert_non_null(ops);
    specd_policy_env env = {.n_vocab = 16, .max_draft = 8, .rule = SPECD_ACCEPT_GREEDY,
                            .max_step_rows = max_step_rows};
    env.sampling = specd_sampling_default_params();
    void *st = NULL;
    specd_error err;
    assert_int_equal(ops->create(&env, opts, &st, &err), SPECD_E_INVALID_ARG);
    if (!strstr(err.message, says)) fail_msg("'%s': message '%s' lacks '%s'", opts, err.message, says);
    assert_null(st);
}

static void test_refusals(void **s) {
    (void)s;
    refused("gamma=2,block=4", 0, "gamma=2");
    refused("drafter=tiny", 0, "drafter=tiny");
    refused("rope_copy=2", 0, "rope_copy");
    refused("block=8", 17, "block=8 needs 25 rows");
    refused("block=4", 0, "drafter runs the target's weights"); /* no target, no path */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_visible_is_eq1),
        cmocka_unit_test(test_first_and_last_step_rows),
        cmocka_unit_test(test_rope_copy),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
