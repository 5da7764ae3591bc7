#include "test_main.h"

#include "common/status_internal.h"
#include "specd/specd.h"

#include <string.h>

static specd_status fails_with_format(specd_error *err, int n) {
    return specd_fail(err, SPECD_E_FORMAT, "tensor %d: offset out of range", n);
}

static void test_fail_fills_error(void **state) {
    (void)state;
    specd_error err;
    specd_error_clear(&err);
    assert_int_equal(fails_with_format(&err, 7), SPECD_E_FORMAT);
    assert_int_equal(err.status, SPECD_E_FORMAT);
    assert_string_equal(err.message, "tensor 7: offset out of range");
    specd_error_clear(&err);
    assert_int_equal(err.status, SPECD_OK);
    assert_string_equal(err.message, "");
}

static void test_fail_accepts_null_error(void **state) {
    (void)state;
    assert_int_equal(fails_with_format(NULL, 1), SPECD_E_FORMAT);
    specd_error_clear(NULL);
}

static void test_message_is_truncated_not_overrun(void **state) {
    (void)state;
    char big[4 * SPECD_ERROR_MESSAGE_MAX];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    specd_error err;
    specd_fail(&err, SPECD_E_IO, "%s", big);
    assert_int_equal(strlen(err.message), SPECD_ERROR_MESSAGE_MAX - 1);
}

static void test_every_status_has_a_name(void **state) {
    (void)state;
    for (int s = SPECD_OK; s <= SPECD_E_INTERNAL; s++) {
        const char *name = specd_status_name((specd_status)s);
        assert_non_null(name);
        assert_int_equal(strncmp(name, "SPECD_", 6), 0);
        assert_string_not_equal(name, "SPECD_E_UNKNOWN");
    }
    assert_string_equal(specd_status_name((specd_status)999), "SPECD_E_UNKNOWN");
}

static void test_version_matches_header(void **state) {
    (void)state;
    assert_string_equal(specd_version(), SPECD_VERSION_STRING);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fail_fills_error),
        cmocka_unit_test(test_fail_accepts_null_error),
        cmocka_unit_test(test_message_is_truncated_not_overrun),
        cmocka_unit_test(test_every_status_has_a_name),
        cmocka_unit_test(test_version_matches_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
