/* Every registered policy refuses an option it does not know, naming the key, and creates
 * nothing: a typo in --policy-opts must never run with the default silently. Checked as the spec
 * does it: shared_create first where a policy has one (it may leave bad options to create), then
 * create, before any daemon is needed. "none" knows no option at all. A policy that cannot parse
 * its options without the target model (layerskip: its ranges are the model's) is checked on the
 * real model by tests/cli/test_generate.sh. */
#include "test_main.h"

#include "specd/policy.h"

#include <string.h>

static void expect_refused(const char *policy, const char *what, specd_status st,
                           const specd_error *err, const char *key) {
    if (st != SPECD_E_INVALID_ARG || !strstr(err->message, key)) {
        print_error("policy %s (%s): status %d, message '%s', want INVALID_ARG naming '%s'\n",
                    policy, what, (int)st, st == SPECD_OK ? "" : err->message, key);
        fail();
    }
}

static void check_policy(const specd_policy_ops *ops, const char *options, const char *key) {
    specd_policy_env env = {.n_vocab = 49152, .max_draft = 4, .seq_key = 1};
    specd_error err = {0};
    void *shared = NULL;
    if (ops->abi_version >= 2 && ops->shared_create) {
        specd_status st = ops->shared_create(&env, options, &shared, &err);
        if (st != SPECD_OK) {
            expect_refused(ops->name, "shared_create", st, &err, key);
            return;
        }
        env.shared = shared;
    }
    void *state = NULL;
    specd_status st = ops->create(&env, options, &state, &err);
    if (st == SPECD_OK) ops->destroy(state);
    if (shared) ops->shared_destroy(shared);
    if (st != SPECD_OK && strstr(err.message, "needs the target model")) return;
    expect_refused(ops->name, "create", st, &err, key);
}

static void test_unknown_keys_are_refused(void **s) {
    (void)s;
    assert_true(specd_policy_count() > 0);
    for (int32_t i = 0; i < specd_policy_count(); i++) {
        const specd_policy_ops *ops = specd_policy_at(i);
        check_policy(ops, "no_such_key=1", "no_such_key");
        check_policy(ops, "garbage", "garbage");
    }
}

static void test_none_takes_no_options(void **s) {
    (void)s;
    const specd_policy_ops *ops = specd_policy_find("none");
    specd_policy_env env = {.n_vocab = 100, .max_draft = 4};
    void *state = NULL;
    specd_error err = {0};
    assert_int_equal(ops->create(&env, NULL, &state, &err), SPECD_OK);
    ops->destroy(state);
    assert_int_equal(ops->create(&env, "", &state, &err), SPECD_OK);
    ops->destroy(state);
    assert_int_equal(ops->create(&env, "k=4", &state, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "none"));
    assert_non_null(strstr(err.message, "'k'"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_keys_are_refused),
        cmocka_unit_test(test_none_takes_no_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
