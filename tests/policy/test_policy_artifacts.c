/* Trained artifacts matched to their target (policy/artifacts.h), without a model: the target
 * records an artifact carries are read strictly; specd_policy_default_options adds the artifact
 * whose record names the target (the shipped ones, for the fingerprint their own records give),
 * leaves a given key alone, takes an environment override as named, and refuses a needed one it
 * cannot find, naming the option; policies with no artifact rows are untouched. */
#include "test_main.h"

#include "policy/artifacts.h"
#include "policy/options.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/specd_artifacts_XXXXXX";

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* the fingerprint a shipped artifact's record names (the source tree's) */
static uint64_t shipped(const char *rel) {
    const char *src = getenv("SPECD_SOURCE_DIR");
    assert_non_null(src);
    char path[4096];
    snprintf(path, sizeof path, "%s/artifacts/%s", src, rel);
    uint64_t fp = 0;
    specd_error err;
    assert_int_equal(specd_artifact_target(path, &fp, &err), SPECD_OK);
    return fp;
}

static void test_records(void **state) {
    (void)state;
    char path[256], rec[300];
    uint64_t fp = 0;
    specd_error err;
    snprintf(path, sizeof path, "%s/head.gguf", dir);
    write_file(path, "x");
    assert_int_equal(specd_artifact_target(path, &fp, &err), SPECD_E_IO); /* no record */
    snprintf(rec, sizeof rec, "%s.target.json", path);
    write_file(rec, "{\"target_fingerprint\": \"00000000000000aB\", \"target\": \"m.gguf\"}");
    assert_int_equal(specd_artifact_target(path, &fp, &err), SPECD_OK);
    assert_int_equal(fp, 0xab);
    static const char *const bad[] = {
        "{\"target_fingerprint\": \"abc\"}",                /* too short */
        "{\"target_fingerprint\": \"0x00000000000000ab\"}", /* too long */
        "{\"target_fingerprint\": \"000000000000000g\"}",   /* not hex */
        "{\"target_fingerprint\": \" 00000000000000a\"}",   /* not hex */
        "{\"target_fingerprint\": 171}",                    /* not a string */
        "{\"target\": \"m.gguf\"}",                         /* none */
        "{\"target_fingerprint\": "};                       /* not JSON */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(rec, bad[i]);
        fp = 7;
        assert_int_equal(specd_artifact_target(path, &fp, &err), SPECD_E_FORMAT);
        assert_int_equal(fp, 7); /* untouched on failure */
    }
    unlink(rec);
    unlink(path);
}

static void test_shipped_defaults(void **state) {
    (void)state;
    const uint64_t fp = shipped("mrp/smollm2-135m-mrp.gguf");
    char out[8192];
    specd_error err;
    assert_int_equal(specd_policy_default_options("mrp", fp, NULL, out, sizeof out, &err),
                     SPECD_OK);
    assert_non_null(strstr(out, "head="));
    assert_non_null(strstr(out, "mrp/smollm2-135m-mrp.gguf"));
    /* the key given: left as given, nothing added */
    assert_int_equal(
        specd_policy_default_options("mrp", fp, "k=2,head=/x.gguf", out, sizeof out, &err),
        SPECD_OK);
    assert_string_equal(out, "k=2,head=/x.gguf");
    assert_int_equal(specd_policy_default_options("simsd", fp, "block=4", out, sizeof out, &err),
                     SPECD_OK);
    assert_non_null(strstr(out, "block=4,adapter="));
    assert_non_null(strstr(out, "adapters/smollm2-135m-sdar"));
    assert_non_null(strstr(out, ",drafter_adapter="));
    assert_non_null(strstr(out, "adapters/smollm2-135m-simsd-drafter"));
    /* every shipped artifact was recorded over the same target */
    assert_int_equal(shipped("adapters/smollm2-135m-risd"), fp);
    assert_int_equal(shipped("adapters/smollm2-135m-wedlm"), fp);
    assert_int_equal(shipped("adapters/smollm2-135m-sdar"), fp);
    assert_int_equal(shipped("adapters/smollm2-135m-simsd-drafter"), fp);
    /* no room: refused, not cut */
    assert_int_equal(specd_policy_default_options("mrp", fp, NULL, out, 16, &err),
                     SPECD_E_INVALID_ARG);
}

static void test_other_target(void **state) {
    (void)state;
    const uint64_t other = shipped("mrp/smollm2-135m-mrp.gguf") ^ 1;
    char out[8192];
    specd_error err;
    static const char *const needs[][2] = {{"mrp", "head"},
                                           {"risd", "adapter"},
                                           {"wedlm", "adapter"},
                                           {"sdar", "adapter"},
                                           {"simsd", "adapter"}};
    for (size_t i = 0; i < sizeof needs / sizeof needs[0]; i++) {
        assert_int_equal(
            specd_policy_default_options(needs[i][0], other, NULL, out, sizeof out, &err),
            SPECD_E_INVALID_ARG);
        char want[64];
        snprintf(want, sizeof want, "policy %s needs %s=PATH", needs[i][0], needs[i][1]);
        assert_non_null(strstr(err.message, want));
    }
    /* named by the caller: the caller's choice, on any target */
    assert_int_equal(
        specd_policy_default_options("risd", other, "adapter=/a", out, sizeof out, &err), SPECD_OK);
    assert_string_equal(out, "adapter=/a");
    /* policies without artifact rows, and unknown ones, keep their options */
    static const char *const plain[] = {"none", "ngram", "isd", "draft", "no_such_policy"};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        assert_int_equal(
            specd_policy_default_options(plain[i], other, "n=3", out, sizeof out, &err), SPECD_OK);
        assert_string_equal(out, "n=3");
    }
}

static void test_env_override(void **state) {
    (void)state;
    char adapter[256], config[300];
    snprintf(adapter, sizeof adapter, "%s/adapter", dir);
    assert_int_equal(mkdir(adapter, 0700), 0);
    snprintf(config, sizeof config, "%s/adapter_config.json", adapter);
    write_file(config, "{}");
    char out[8192];
    specd_error err;
    /* taken as named, whatever the target (it has no record at all) */
    setenv("SPECD_RISD_ADAPTER", adapter, 1);
    assert_int_equal(specd_policy_default_options("risd", 42, "n=3", out, sizeof out, &err),
                     SPECD_OK);
    char want[300];
    snprintf(want, sizeof want, "n=3,adapter=%s", adapter);
    assert_string_equal(out, want);
    /* naming nothing usable: refused, naming the variable */
    setenv("SPECD_RISD_ADAPTER", "/no/such/adapter", 1);
    assert_int_equal(specd_policy_default_options("risd", 42, NULL, out, sizeof out, &err),
                     SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "$SPECD_RISD_ADAPTER"));
    unsetenv("SPECD_RISD_ADAPTER");
    unlink(config);
    rmdir(adapter);
}

static void test_has_key(void **state) {
    (void)state;
    assert_true(specd_options_has_key("a=1,head=x", "head"));
    assert_true(specd_options_has_key("head=x", "head"));
    assert_false(specd_options_has_key("heady=x", "head"));
    assert_false(specd_options_has_key("x=head", "head"));
    assert_false(specd_options_has_key(NULL, "head"));
    assert_false(specd_options_has_key("", "head"));
}

int main(void) {
    /* the operator's overrides would change what is found */
    static const char *const vars[] = {"SPECD_MRP_HEAD", "SPECD_RISD_ADAPTER",
                                       "SPECD_WEDLM_ADAPTER", "SPECD_SDAR_ADAPTER",
                                       "SPECD_SIMSD_DRAFTER_ADAPTER"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records),      cmocka_unit_test(test_shipped_defaults),
        cmocka_unit_test(test_other_target), cmocka_unit_test(test_env_override),
        cmocka_unit_test(test_has_key),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(dir);
    return rc;
}
