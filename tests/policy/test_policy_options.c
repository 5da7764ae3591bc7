/* Every registered policy refuses an option it does not know, naming the key, and creates
 * nothing: a typo in --policy-opts must never run with the default silently. Checked as the spec
 * does it: shared_create first where a policy has one (it may leave bad options to create), then
 * create, before any daemon is needed. "none" knows no option at all. A policy that cannot parse
 * its options without the target model (layerskip: its ranges are the model's) is checked on the
 * real model by tests/cli/test_generate.sh. */
#include "test_main.h"

#include "policy/options.h"
#include "specd/policy.h"

#include <math.h>
#include <stdlib.h>
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

/* One row of every kind, parsed by the table parser the policies use. */
typedef struct demo_opts {
    int32_t n, k, flag, pick, derived;
    float alpha;
    char name[8], path[16];
} demo_opts;

static const specd_policy_option demo_rows[] = {
    {.key = "n", .kind = SPECD_OPTION_INT, .offset = offsetof(demo_opts, n), .dflt = "4",
     .min = 1, .max = 16, .help = "an int"},
    {.key = "k", .kind = SPECD_OPTION_INT, .offset = offsetof(demo_opts, k), .dflt = "max_draft",
     .min = 1, .flags = SPECD_OPTION_MAX_IS_DRAFT | SPECD_OPTION_DEFAULT_DERIVED, .help = "k"},
    {.key = "flag", .kind = SPECD_OPTION_BOOL, .offset = offsetof(demo_opts, flag), .dflt = "1",
     .help = "a bool"},
    {.key = "pick", .kind = SPECD_OPTION_ENUM, .offset = offsetof(demo_opts, pick),
     .dflt = "beta", .choices = "alpha|beta|gamma", .help = "an enum"},
    {.key = "derived", .kind = SPECD_OPTION_INT, .offset = offsetof(demo_opts, derived),
     .dflt = "from the model", .min = 0, .max = 9, .flags = SPECD_OPTION_DEFAULT_DERIVED,
     .help = "left alone unless given"},
    {.key = "alpha", .kind = SPECD_OPTION_FLOAT, .offset = offsetof(demo_opts, alpha),
     .dflt = "0.25", .min = 0, .max = 1, .help = "a float"},
    {.key = "name", .kind = SPECD_OPTION_STRING, .offset = offsetof(demo_opts, name),
     .size = sizeof((demo_opts *)0)->name, .dflt = "abc", .help = "a string"},
    {.key = "path", .kind = SPECD_OPTION_PATH, .offset = offsetof(demo_opts, path),
     .size = sizeof((demo_opts *)0)->path, .help = "a path"},
};
static const specd_option_table demo = SPECD_OPTION_TABLE(demo_rows);
static const specd_option_bounds demo_bounds = {.max_draft = 6, .n_layer = 30};

static specd_status demo_parse(const char *options, demo_opts *o, specd_error *err) {
    memset(o, 0x5a, sizeof *o); /* what the parser must overwrite with defaults */
    o->derived = -7;
    return specd_options_parse_table("demo", &demo, &demo_bounds, options, o, err);
}

static void expect_demo_refused(const char *options, const char *needle) {
    demo_opts o;
    specd_error err = {0};
    specd_status st = demo_parse(options, &o, &err);
    if (st != SPECD_E_INVALID_ARG || !strstr(err.message, needle)) {
        print_error("'%s': status %d, message '%s', want INVALID_ARG with '%s'\n", options,
                    (int)st, st == SPECD_OK ? "" : err.message, needle);
        fail();
    }
}

static void test_table_parser(void **s) {
    (void)s;
    demo_opts o;
    specd_error err = {0};
    assert_int_equal(demo_parse(NULL, &o, &err), SPECD_OK);
    assert_int_equal(o.n, 4);
    assert_int_equal(o.flag, 1);
    assert_int_equal(o.pick, 1);
    assert_int_equal(o.derived, -7); /* derived defaults are the caller's */
    assert_true(o.alpha == 0.25f);
    assert_string_equal(o.name, "abc");
    assert_string_equal(o.path, "");
    assert_int_equal(demo_parse("n=16,k=6,flag=0,pick=gamma,derived=9,alpha=1,name=xyz1234,"
                                "path=/a/b",
                                &o, &err),
                     SPECD_OK);
    assert_int_equal(o.n, 16);
    assert_int_equal(o.k, 6);
    assert_int_equal(o.flag, 0);
    assert_int_equal(o.pick, 2);
    assert_int_equal(o.derived, 9);
    assert_true(o.alpha == 1.0f);
    assert_string_equal(o.name, "xyz1234");
    assert_string_equal(o.path, "/a/b");

    expect_demo_refused("nope=1", "unknown option 'nope' (valid: n, k, flag, pick, derived, "
                                  "alpha, name, path)");
    expect_demo_refused("n", "option 'n' is not key=value");
    expect_demo_refused("n=17", "option n=17 is outside [1, 16]");
    expect_demo_refused("n=0", "option n=0 is outside [1, 16]");
    expect_demo_refused("n=4x", "n=4x is not an integer");
    expect_demo_refused("n=", "option n needs a number");
    expect_demo_refused("k=7", "option k=7 is outside [1, 6]"); /* max_draft bounds it */
    expect_demo_refused("flag=2", "flag=2 is outside [0, 1]");
    expect_demo_refused("pick=delta", "pick=delta (want one of alpha|beta|gamma)");
    expect_demo_refused("pick=", "(want one of alpha|beta|gamma)");
    expect_demo_refused("alpha=1.5", "alpha=1.5 (want a number in [0, 1])");
    expect_demo_refused("alpha=nan", "alpha=nan");
    expect_demo_refused("name=12345678", "option name has an empty or too long value");
    expect_demo_refused("path=", "option path has an empty or too long value");
    expect_demo_refused("n=3,,k=2", "option '' is not key=value");
}

/* Every built-in policy's table: unique keys, defaults its own parser accepts, a value of each
 * row's kind accepted; every row has help. */
static void test_builtin_tables(void **s) {
    (void)s;
    for (int32_t i = 0; i < specd_policy_count(); i++) {
        const char *name = specd_policy_at(i)->name;
        specd_option_table t = {NULL, 0};
        t.rows = specd_policy_options_table(name, &t.n);
        assert_non_null(t.rows);
        size_t need = 1;
        for (int32_t r = 0; r < t.n; r++) {
            const specd_policy_option *o = &t.rows[r];
            assert_non_null(o->help);
            assert_true(o->help[0] != '\0');
            for (int32_t q = 0; q < r; q++) assert_string_not_equal(t.rows[q].key, o->key);
            size_t end = o->offset + (o->size ? o->size : sizeof(int32_t));
            need = end > need ? end : need;
        }
        char *buf = calloc(1, need + 16);
        assert_non_null(buf);
        specd_error err = {0};
        const specd_option_bounds b = {.max_draft = 8, .n_layer = 30};
        if (specd_options_parse_table(name, &t, &b, "", buf, &err) != SPECD_OK)
            fail_msg("policy %s: its defaults do not parse: %s", name, err.message);
        for (int32_t r = 0; r < t.n; r++) {
            const specd_policy_option *o = &t.rows[r];
            char opt[128];
            if (o->kind == SPECD_OPTION_ENUM)
                snprintf(opt, sizeof opt, "%s=%.*s", o->key, (int)strcspn(o->choices, "|"),
                         o->choices);
            else if (o->kind == SPECD_OPTION_STRING || o->kind == SPECD_OPTION_PATH)
                snprintf(opt, sizeof opt, "%s=x", o->key);
            else
                snprintf(opt, sizeof opt, "%s=%.10g", o->key, o->kind == SPECD_OPTION_BOOL ? 1 : o->min);
            if (specd_options_parse_table(name, &t, &b, opt, buf, &err) != SPECD_OK)
                fail_msg("policy %s: %s refused: %s", name, opt, err.message);
        }
        free(buf);
    }
    int32_t n = 1;
    assert_null(specd_policy_options_table("no_such_policy", &n));
    assert_int_equal(n, 0);
    assert_non_null(specd_policy_options_table("none", &n));
    assert_int_equal(n, 0);
}

static void test_table_printer(void **s) {
    (void)s;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    specd_options_print(f, &demo, 0);
    specd_options_print(f, &demo, 1);
    fclose(f);
    const char *want[] = {"pick     enum    beta", "alpha|beta|gamma", "1..max_draft",
                          "from the model", "| `pick` | enum | beta | alpha/beta/gamma | an enum |",
                          "| `path` | path | none | - | a path |", "0..1"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(text, want[i])) fail_msg("the printed table lacks '%s':\n%s", want[i], text);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_keys_are_refused),
        cmocka_unit_test(test_none_takes_no_options),
        cmocka_unit_test(test_table_parser),
        cmocka_unit_test(test_builtin_tables),
        cmocka_unit_test(test_table_printer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
