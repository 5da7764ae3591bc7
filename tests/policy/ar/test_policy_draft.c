/* The draft policy refuses a drafter whose vocabulary is not the target's, and bad options, with
 * a message that says why. */
#include "test_main.h"

#include "fixture_model.h"

#include "specd/policy.h"
#include "specd/runtime.h"

#include <string.h>

static specd_model *target;

static specd_status create(const char *options, specd_error *err) {
    const specd_policy_ops *ops = specd_policy_find("draft");
    specd_policy_env env = {.n_vocab = specd_model_get_info(target)->n_vocab, .max_draft = 8,
                            .target = target, .sampling = specd_sampling_default_params()};
    void *state = NULL;
    specd_status st = ops->create(&env, options, &state, err);
    if (st == SPECD_OK) ops->destroy(state);
    return st;
}

static void test_other_vocabulary_is_refused(void **s) {
    (void)s;
    char opts[2048];
    snprintf(opts, sizeof opts, "model=%s/tests/fuzz/corpus/fuzz_gguf/valid_llama.gguf",
             getenv("SPECD_SOURCE_DIR"));
    specd_error err;
    assert_int_equal(create(opts, &err), SPECD_E_MISMATCH);
    assert_non_null(strstr(err.message, "vocabulary size"));
}

static void test_missing_or_bad_model_is_refused(void **s) {
    (void)s;
    specd_error err;
    assert_int_equal(create("", &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "model=PATH"));
    assert_int_equal(create("model=/nonexistent.gguf", &err), SPECD_E_IO);
    assert_int_equal(create("model=x,k=99", &err), SPECD_E_INVALID_ARG);
}

static void test_same_vocabulary_is_accepted(void **s) {
    (void)s;
    char opts[2048];
    snprintf(opts, sizeof opts, "model=%s,k=3", specd_test_model_path());
    specd_error err;
    if (create(opts, &err) != SPECD_OK) fail_msg("%s", err.message);
}

int main(void) {
    target = fixture_model_open();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_other_vocabulary_is_refused),
        cmocka_unit_test(test_missing_or_bad_model_is_refused),
        cmocka_unit_test(test_same_vocabulary_is_accepted),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fixture_close(target, NULL);
    return rc;
}
