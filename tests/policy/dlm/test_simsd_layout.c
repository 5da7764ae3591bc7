/* SimSD's verification layout as pure functions (policy/dlm/simsd_layout.h): the temporal attention
 * mask against eq. (1) of paper 004 written out case by case for every pair of rows, for several
 * draft orders and block states (gamma = B, and gamma < B with slots decided earlier), the rows'
 * labels and positions (the RoPE copy and its ablation); and the policy's refusals (bad options, a step too
 * small for its rows), each with a message naming the cause. The real-model checks are
 * test_simsd_model. */
#include "test_main.h"

#include "policy/dlm/simsd_layout.h"
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

/* A block state: token[i] >= 0 decided before, tau[i] > 0 drafted this step (draft step tau),
 * else masked. Checks the rows (which, in what order, labels, positions) against the rules of
 * policy/dlm/simsd_layout.h written out here, then every visibility bit against eq. (1). */
static void check(int head, int b, const int32_t *token, const int32_t *tau, int rope) {
    enum { FIRST = 40 };
    int32_t draft[MAXB];
    int gamma = 0;
    for (int i = 0; i < b; i++) {
        draft[i] = tau[i] > 0 ? 100 + i : -1;
        if (tau[i] > gamma) gamma = tau[i];
    }
    specd_simsd_row rows[2 * MAXB];
    const int n = specd_simsd_rows(b, FIRST, token, tau, draft, rope, rows);
    int k = 0;
    for (int i = 0; i < b; i++) /* data rows: decided and drafted slots */
        if (token[i] >= 0 || tau[i] > 0) {
            assert_int_equal(rows[k].slot, i);
            assert_int_equal(rows[k].token, token[i] >= 0 ? token[i] : 100 + i);
            assert_int_equal(rows[k].tau, token[i] >= 0 ? 0 : tau[i]);
            assert_int_equal(rows[k].pos, FIRST + i);
            k++;
        }
    for (int i = 0; i < b; i++) /* mask rows: drafted and still-masked slots */
        if (token[i] < 0) {
            assert_int_equal(rows[k].slot, i);
            assert_int_equal(rows[k].token, -1);
            assert_int_equal(rows[k].tau, tau[i] > 0 ? tau[i] : gamma);
            assert_int_equal(rows[k].pos, rope ? FIRST + i : FIRST + k);
            k++;
        }
    assert_int_equal(n, k);
    const int n_tok = head + n, width = CACHED + n_tok;
    int last = -1; /* the last draft's data row */
    for (int j = 0; j < n; j++)
        if (rows[j].token >= 0 && rows[j].tau == gamma && gamma > 0) last = j;
    static uint8_t vis[(6 + 2 * MAXB) * (CACHED + 6 + 2 * MAXB)];
    specd_simsd_visible(vis, CACHED, head, rows, n);
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
                const specd_simsd_row *ri = &rows[r - head], *rj = &rows[step - head];
                want = eq1(ri->token < 0, rj->token < 0, ri->tau, rj->tau);
            }
            if (vis[r * width + j] != want)
                fail_msg("head %d b %d: row %d col %d is %d, eq. (1) says %d", head, b, r, j,
                         vis[r * width + j], want);
            /* the last draft: no row but its own sees it (nothing verifies against it) */
            if (last >= 0 && step == head + last && r != head + last && vis[r * width + j])
                fail_msg("head %d b %d: row %d sees the last draft", head, b, r);
        }
}

static void test_visible_is_eq1(void **s) {
    (void)s;
    const int32_t none[6] = {-1, -1, -1, -1, -1, -1};
    const int32_t ltr[4] = {1, 2, 3, 4}, rtl[4] = {4, 3, 2, 1}, mixed[6] = {3, 1, 6, 2, 5, 4};
    check(1, 4, none, ltr, 1);
    check(1, 4, none, rtl, 1);
    check(5, 4, none, ltr, 1); /* a commit step: pending + the finished block */
    check(1, 6, none, mixed, 1);
    check(1, 6, none, mixed, 0);
    /* gamma < B: slots decided in earlier rounds, two drafted, the rest still masked */
    const int32_t tok[6] = {7, -1, 9, -1, -1, -1}, part[6] = {0, 2, 0, 0, 1, 0};
    check(1, 6, tok, part, 1);
    check(1, 6, tok, part, 0);
    const int32_t one = 1, m1 = -1;
    check(2, 1, &m1, &one, 1);
}

/* The paired layout (gamma = B): D~ of the first draft step sees every mask and no data row; the
 * last sees every other draft and only its own mask - the two ends of the order, spelled out. */
static void test_first_and_last_step_rows(void **s) {
    (void)s;
    const int32_t tau[3] = {2, 3, 1}, token[3] = {-1, -1, -1}, draft[3] = {5, 6, 7};
    specd_simsd_row rows[6];
    const int head = 1, n = specd_simsd_rows(3, 10, token, tau, draft, 1, rows);
    assert_int_equal(n, 6);
    const int n_tok = head + n, width = CACHED + n_tok;
    uint8_t vis[7 * 10];
    specd_simsd_visible(vis, CACHED, head, rows, n);
    const uint8_t *first = vis + (head + 3 + 2) * width + CACHED + head; /* D~ of slot 2 */
    const uint8_t *last = vis + (head + 3 + 1) * width + CACHED + head;  /* D~ of slot 1 */
    const uint8_t want_first[6] = {0, 0, 0, 1, 1, 1}, want_last[6] = {1, 0, 1, 0, 1, 0};
    assert_memory_equal(first, want_first, 6);
    assert_memory_equal(last, want_last, 6);
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
    refused("gamma=5,block=4", 0, "gamma=5");
    refused("drafter=tiny", 0, "drafter=tiny");
    refused("rope_copy=2", 0, "rope_copy");
    refused("block=8", 17, "block=8 needs 25 rows");
    refused("block=4", 0, "drafter runs the target's weights"); /* no target, no path */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_visible_is_eq1),
        cmocka_unit_test(test_first_and_last_step_rows),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
