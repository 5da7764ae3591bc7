#include "test_main.h"

#include "specd/policy.h"

#include <string.h>

static void *make(const char *options, specd_status *st) {
    const specd_policy_ops *ops = specd_policy_find("ngram");
    specd_policy_env env = {.n_vocab = 100, .max_draft = 8};
    void *state = NULL;
    specd_error err;
    *st = ops->create(&env, options, &state, &err);
    return state;
}

static void test_proposes_continuation_of_latest_match(void **s) {
    (void)s;
    specd_status st;
    void *state = make("n=3,n_min=1,k=4", &st);
    assert_int_equal(st, SPECD_OK);
    /* "1 2 3 9 9 | 1 2 3 7 8 | 1 2 3": the latest earlier "1 2 3" is followed by 7 8 1 2 */
    const int32_t h[] = {1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3};
    int32_t draft[8], n = -1;
    int has_q = 1;
    const specd_policy_ops *ops = specd_policy_find("ngram");
    assert_int_equal(ops->propose(state, h, 13, 8, draft, &n, NULL, &has_q, NULL), SPECD_OK);
    assert_int_equal(n, 4);
    assert_int_equal(has_q, 0);
    const int32_t want[] = {7, 8, 1, 2};
    assert_memory_equal(draft, want, sizeof want);
    /* max_draft below k caps the proposal */
    assert_int_equal(ops->propose(state, h, 13, 2, draft, &n, NULL, &has_q, NULL), SPECD_OK);
    assert_int_equal(n, 2);
    ops->destroy(state);
}

static void test_no_match_proposes_nothing(void **s) {
    (void)s;
    specd_status st;
    void *state = make("", &st);
    const int32_t h[] = {1, 2, 3, 4, 5, 6};
    int32_t draft[8], n = -1;
    int has_q;
    const specd_policy_ops *ops = specd_policy_find("ngram");
    assert_int_equal(ops->propose(state, h, 6, 8, draft, &n, NULL, &has_q, NULL), SPECD_OK);
    assert_int_equal(n, 0);
    ops->destroy(state);
}

static void test_bad_options_are_refused(void **s) {
    (void)s;
    specd_status st;
    const char *bad[] = {"n=0", "n=3,n_min=4", "k=9", "bogus=1", "n", "n=x", "n=99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *state = make(bad[i], &st);
        assert_int_equal(st, SPECD_E_INVALID_ARG);
        assert_null(state);
    }
}

static void test_remote_refuses_a_bad_tokenizer_hash(void **s) {
    (void)s;
    const specd_policy_ops *ops = specd_policy_find("remote");
    specd_policy_env env = {.n_vocab = 100, .max_draft = 8};
    void *state = NULL;
    specd_error err;
    assert_int_equal(ops->create(&env, "tokenizer_hash=zz", &state, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "tokenizer_hash"));
    assert_null(state);
}

static void test_registry(void **s) {
    (void)s;
    assert_non_null(specd_policy_find("none"));
    assert_null(specd_policy_find("no-such-policy"));
    assert_null(specd_policy_find(NULL));
    for (int32_t i = 0; i < specd_policy_count(); i++) {
        const specd_policy_ops *ops = specd_policy_at(i);
        assert_int_equal(ops->abi_version, SPECD_POLICY_ABI_VERSION);
        assert_ptr_equal(specd_policy_find(ops->name), ops);
    }
    assert_null(specd_policy_at(specd_policy_count()));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proposes_continuation_of_latest_match),
        cmocka_unit_test(test_no_match_proposes_nothing),
        cmocka_unit_test(test_bad_options_are_refused),
        cmocka_unit_test(test_remote_refuses_a_bad_tokenizer_hash),
        cmocka_unit_test(test_registry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
