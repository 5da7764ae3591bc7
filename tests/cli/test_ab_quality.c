/* specd ab's quality pieces (cli/ab_quality.h, cli/ab_tasks.h): each task rule on hand-written
 * passing and failing outputs, malformed items and files refused with the field or line named,
 * the repeated-4-gram count against a naive count on built token lists, agreement, and the NLL
 * scorer against -log softmax computed here from one-token decodes of the real model. */
#include "runtime/rt_test_util.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "cli/ab_quality.h"
#include "cli/ab_tasks.h"
#include "specd/tokenizer.h"

/* ---- task rules --------------------------------------------------------------------------- */

static ab_task task(const char *json) {
    ab_task t;
    char msg[256];
    if (ab_task_parse(json, strlen(json), &t, msg, sizeof msg)) fail_msg("%s: %s", json, msg);
    return t;
}

static int passes(const char *json, const char *text) {
    ab_task t = task(json);
    int ok = ab_task_check(&t, text, strlen(text));
    ab_task_free(&t);
    return ok;
}

#define ITEM(rule_and_fields) "{\"id\": \"t\", \"prompt\": \"p\", \"rule\": " rule_and_fields "}"

static void test_count(void **state) {
    (void)state;
    const char *up = ITEM("\"count\", \"from\": 1, \"to\": 5");
    assert_true(passes(up, "1, 2, 3, 4, 5"));
    assert_true(passes(up, "Sure! 1\n2\n3\n4\n5\n6"));
    assert_true(passes(up, "1. one 2. two 3. three 4. four 5. five")); /* numbered: in order */
    assert_false(passes(up, "1, 2, 3, 5"));                           /* a number skipped */
    assert_false(passes(up, "1, 2, 3, 4"));                           /* stopped short */
    assert_false(passes(up, "5, 4, 3, 2, 1"));                        /* wrong direction */
    assert_false(passes(up, "1, 2, 3, 45"));                          /* 45 is not 4 then 5 */
    assert_false(passes(up, ""));
    const char *down = ITEM("\"count\", \"from\": 10, \"to\": 8");
    assert_true(passes(down, "10 9 8"));
    assert_false(passes(down, "8 9 10"));
}

static void test_copy(void **state) {
    (void)state;
    const char *t = ITEM("\"copy\", \"items\": [\"red\", \"green\", \"blue\"]");
    assert_true(passes(t, "red, green, blue"));
    assert_true(passes(t, "Here it is:\n- red\n- green\n- blue"));
    assert_false(passes(t, "red, blue, green"));  /* order */
    assert_false(passes(t, "red, green"));        /* one missing */
    assert_false(passes(t, "Red, Green, Blue"));  /* exact text */
    assert_false(passes(t, "redgreen"));          /* blue absent; green used once */
}

static void test_number(void **state) {
    (void)state;
    const char *t = ITEM("\"number\", \"answer\": 42");
    assert_true(passes(t, "6 times 7 is 42."));
    assert_true(passes(t, "The answer: 42"));
    assert_false(passes(t, "The answer is 420."));
    assert_false(passes(t, "It is 142"));
    assert_false(passes(t, "It is 42.5"));
    assert_false(passes(t, "It is -42"));
    assert_false(passes(t, "forty-two"));
    const char *neg = ITEM("\"number\", \"answer\": -3");
    assert_true(passes(neg, "2 - 5 = -3"));
    assert_false(passes(neg, "5-3 is 2")); /* a minus between operands is not a sign */
    assert_false(passes(neg, "3"));
}

static void test_format_rules(void **state) {
    (void)state;
    const char *caps = ITEM("\"caps\", \"contains\": [\"HELLO\"]");
    assert_true(passes(caps, "HELLO!"));
    assert_false(passes(caps, "Hello!"));
    assert_false(passes(caps, "HELLO, world"));
    assert_false(passes(caps, "HI THERE")); /* contains */
    assert_false(passes(ITEM("\"caps\""), "123 !"));   /* no letter */
    assert_true(passes(ITEM("\"lowercase\""), "world."));
    assert_false(passes(ITEM("\"lowercase\""), "World."));

    const char *bullets = ITEM("\"bullets\", \"count\": 3");
    assert_true(passes(bullets, "Fruits:\n- apple\n- pear\n- plum\nEnjoy!"));
    assert_true(passes(bullets, "* a\n  * b\n\xe2\x80\xa2 c"));
    assert_false(passes(bullets, "- a\n- b"));
    assert_false(passes(bullets, "- a\n- b\n- c\n- d"));
    assert_false(passes(bullets, "-a\n-b\n-c")); /* no space after the mark */

    const char *lines = ITEM("\"lines\", \"count\": 2, \"icontains\": [\"hello\", \"goodbye\"]");
    assert_true(passes(lines, "Hello\n\nGoodbye\n"));
    assert_false(passes(lines, "Hello goodbye"));
    assert_false(passes(lines, "Hello\nthere\nGoodbye"));

    const char *json = ITEM("\"json_key\", \"key\": \"name\"");
    assert_true(passes(json, "```json\n{\"name\": \"Alice\"}\n```"));
    assert_true(passes(json, "{ broken { \"name\": 1 }"));  /* one of its '{' starts an object */
    assert_false(passes(json, "{\"Name\": \"Alice\"}"));     /* keys are case-sensitive */
    assert_false(passes(json, "{\"a\": {\"name\": 1}}"));    /* not at the top level */
    assert_false(passes(json, "name: Alice"));

    const char *words = ITEM("\"max_words\", \"n\": 2, \"icontains\": [\"blue\"]");
    assert_true(passes(words, "Blue."));
    assert_true(passes(words, " light blue\n"));
    assert_false(passes(words, "The sky is blue."));
    assert_false(passes(words, ""));

    const char *start = ITEM("\"starts_with\", \"text\": \"Yes\"");
    assert_true(passes(start, "  Yes, water is wet."));
    assert_false(passes(start, "Well, yes."));
    assert_false(passes(start, "yes"));
    assert_true(passes(ITEM("\"contains\", \"icontains\": [\"BLUE\"]"), "it is blue"));
    assert_false(passes(ITEM("\"contains\", \"contains\": [\"BLUE\"]"), "it is blue"));
}

/* ---- malformed items and files ------------------------------------------------------------ */

static void refused(const char *json, const char *says) {
    ab_task t;
    char msg[256] = "";
    assert_int_not_equal(ab_task_parse(json, strlen(json), &t, msg, sizeof msg), 0);
    if (!strstr(msg, says)) fail_msg("%s: message '%s' does not say '%s'", json, msg, says);
    assert_null(t.item);
}

static void test_malformed_items(void **state) {
    (void)state;
    refused("{\"id\": \"a\", \"prompt\": \"p\", \"rule\": \"count\", \"from\": 1", "not valid JSON");
    refused("[1, 2]", "JSON object");
    refused("{\"prompt\": \"p\", \"rule\": \"caps\"}", "\"id\"");
    refused("{\"id\": \"a\", \"rule\": \"caps\"}", "\"prompt\"");
    refused(ITEM("\"nosuch\""), "unknown rule \"nosuch\"");
    refused(ITEM("\"count\", \"from\": 1"), "needs field \"to\"");
    refused(ITEM("\"count\", \"from\": 1, \"to\": \"5\""), "\"to\" must be an integer");
    refused(ITEM("\"count\", \"from\": 1, \"to\": 2.5"), "\"to\" must be an integer");
    refused(ITEM("\"copy\", \"items\": []"), "\"items\" must be a non-empty array");
    refused(ITEM("\"copy\", \"items\": [\"a\", 3]"), "\"items\" must be a non-empty array");
    refused(ITEM("\"bullets\", \"count\": 0"), "\"count\" must be an integer in [1, 1000]");
    refused(ITEM("\"caps\", \"colour\": 1"), "unknown field \"colour\"");
    refused(ITEM("\"contains\""), "needs \"contains\" or \"icontains\"");
    refused(ITEM("\"caps\"") " {}", "text after the JSON object");
}

static const char *write_file(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/specd-tasks-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void load_refused(const char *text, const char *says) {
    const char *path = write_file(text);
    ab_tasks t;
    char msg[512] = "";
    int rc = ab_tasks_load(path, &t, msg, sizeof msg);
    unlink(path);
    assert_int_not_equal(rc, 0);
    if (!strstr(msg, says)) fail_msg("message '%s' does not say '%s'", msg, says);
}

static void test_files(void **state) {
    (void)state;
    const char *good = ITEM("\"caps\"") "\n\n{\"id\": \"u\", \"prompt\": \"q\", \"rule\": "
                                        "\"number\", \"answer\": 7}\n";
    const char *path = write_file(good);
    ab_tasks t;
    char msg[512];
    assert_int_equal(ab_tasks_load(path, &t, msg, sizeof msg), 0);
    unlink(path);
    assert_int_equal(t.n, 2);
    assert_string_equal(t.items[1].id, "u");
    assert_string_equal(t.items[1].prompt, "q");
    assert_int_equal(t.items[1].line_no, 3);
    assert_true(ab_task_check(&t.items[1], "7", 1));
    ab_tasks_free(&t);

    load_refused(ITEM("\"caps\"") "\n{\"id\": \"v\", oops}\n", ":2: ");
    load_refused(ITEM("\"caps\"") "\n{\"id\": \"v\", oops}\n", "not valid JSON");
    load_refused(ITEM("\"caps\"") "\n" ITEM("\"lowercase\"") "\n", "id \"t\" is already used");
    load_refused("\n  \n", "has no task items");
    ab_tasks none;
    assert_int_not_equal(ab_tasks_load("/nonexistent/tasks.jsonl", &none, msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "cannot open"));
}

/* ---- repetition and agreement ------------------------------------------------------------- */

static void naive_repeats(const int32_t *t, int64_t n, int64_t *grams, int64_t *repeated) {
    *grams = n >= 4 ? n - 3 : 0;
    *repeated = 0;
    for (int64_t i = 0; i < *grams; i++)
        for (int64_t j = 0; j < i; j++)
            if (!memcmp(t + i, t + j, 4 * sizeof *t)) {
                ++*repeated;
                break;
            }
}

static void test_repeats(void **state) {
    (void)state;
    ab_quality q = {0};
    const int32_t loop[] = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2};
    assert_int_equal(ab_quality_repeats(loop, 10, &q), 0);
    assert_int_equal(q.grams, 7);    /* windows at 0..6 */
    assert_int_equal(q.repeated, 3); /* those at 4, 5, 6 repeat 0, 1, 2 */
    const int32_t distinct[] = {5, 6, 7, 8, 9};
    assert_int_equal(ab_quality_repeats(distinct, 5, &q), 0);
    assert_int_equal(q.grams, 2);
    assert_int_equal(q.repeated, 0);
    assert_int_equal(ab_quality_repeats(distinct, 3, &q), 0);
    assert_int_equal(q.grams, 0);
    assert_true(ab_quality_repeat_rate(&q) == 0.0);
    const int32_t same[] = {7, 7, 7, 7, 7, 7};
    assert_int_equal(ab_quality_repeats(same, 6, &q), 0);
    assert_int_equal(q.repeated, 2);
    /* random lists over small alphabets, against the quadratic count */
    uint32_t s = 12345;
    int32_t t[600];
    for (int round = 0; round < 40; round++) {
        int64_t n = 1 + round * 15;
        int32_t alphabet = 2 + round % 5;
        for (int64_t i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            t[i] = (int32_t)((s >> 16) % (uint32_t)alphabet) + (round % 2 ? 49000 : 0);
        }
        int64_t g, r;
        naive_repeats(t, n, &g, &r);
        assert_int_equal(ab_quality_repeats(t, n, &q), 0);
        assert_int_equal(q.grams, g);
        assert_int_equal(q.repeated, r);
    }
}

static void test_agreement(void **state) {
    (void)state;
    const int32_t plain[] = {1, 2, 3, 4, 5, 6};
    const int32_t spec[] = {1, 2, 9, 4, 5};
    ab_agreement a;
    ab_agreement_of(plain, 6, spec, 5, &a);
    assert_int_equal(a.prefix, 2);
    assert_int_equal(a.matches, 4);
    assert_true(fabs(ab_agreement_prefix(&a) - 2.0 / 6.0) < 1e-12);
    assert_true(fabs(ab_agreement_positions(&a) - 4.0 / 6.0) < 1e-12);
    ab_agreement_of(plain, 6, plain, 6, &a);
    assert_true(ab_agreement_prefix(&a) == 1.0 && ab_agreement_positions(&a) == 1.0);
    ab_agreement_of(plain, 3, plain, 6, &a); /* a longer speculative output */
    assert_true(ab_agreement_prefix(&a) == 1.0);
    assert_true(fabs(ab_agreement_positions(&a) - 0.5) < 1e-12);
}

/* ---- NLL under the base model ------------------------------------------------------------- */

static void test_nll(void **state) {
    (void)state;
    specd_model *m = fixture_model_open();
    specd_tokenizer *tok;
    assert_int_equal(specd_tokenizer_create_from_gguf(specd_model_gguf(m), &tok, NULL), SPECD_OK);
    const char *text = "The quick brown fox jumps over the lazy dog. Then it ran into the forest, "
                       "where the trees were tall and the air was cool and quiet at night.";
    int32_t ids[128];
    size_t n = 0;
    assert_int_equal(specd_tokenizer_encode(tok, text, strlen(text), 0, ids, 128, &n, NULL),
                     SPECD_OK);
    assert_true(n > 30);
    int64_t n_prompt = 11, n_out = (int64_t)n - n_prompt;
    int32_t n_vocab = specd_model_get_info(m)->n_vocab;

    /* the reference: one token at a time through decode, log-sum-exp in long double */
    specd_context *ref = rt_test_context(m, 1, 256, 256, 1);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    long double want = 0.0L;
    for (int64_t i = 0; i + 1 < (int64_t)n; i++) {
        assert_int_equal(specd_context_decode(ref, 0, ids[i], logits, NULL), SPECD_OK);
        if (i < n_prompt - 1) continue;
        long double mx = logits[0], sum = 0.0L;
        for (int32_t v = 1; v < n_vocab; v++) mx = logits[v] > mx ? logits[v] : mx;
        for (int32_t v = 0; v < n_vocab; v++) sum += expl((long double)logits[v] - mx);
        want += logl(sum) + mx - (long double)logits[ids[i + 1]];
    }
    specd_context_destroy(ref);
    free(logits);

    /* n_batch 8: the scorer's prompt prefill and its scored rows both span several extends */
    specd_context *ctx = rt_test_context(m, 1, 256, 8, 1);
    int32_t junk[3] = {1, 2, 3};
    assert_int_equal(specd_context_extend(ctx, &(specd_seq_batch){.n_tokens = 3, .tokens = junk},
                                          1, NULL, NULL),
                     SPECD_OK); /* stale rows the scorer must clear first */
    double got = -1.0;
    specd_error err;
    assert_int_equal(ab_quality_score(ctx, ids, n_prompt, ids + n_prompt, n_out, &got, &err),
                     SPECD_OK);
    assert_int_equal(specd_context_kv_len(ctx, 0), 0);
    fprintf(stderr, "nll of %lld tokens: %.9f (reference %.9Lf)\n", (long long)n_out, got, want);
    assert_true(got > 0.0);
    assert_true(fabsl((long double)got - want) <= 1e-9L * (long double)n_out);

    /* a token outside the vocabulary is refused, the output untouched */
    int32_t bad_out[2] = {ids[n_prompt], n_vocab};
    double keep = 123.0;
    assert_int_equal(ab_quality_score(ctx, ids, n_prompt, bad_out, 2, &keep, &err),
                     SPECD_E_INVALID_ARG);
    assert_true(keep == 123.0);
    assert_non_null(strstr(err.message, "outside the vocabulary"));
    specd_context_destroy(ctx);
    specd_tokenizer_destroy(tok);
    specd_model_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count),          cmocka_unit_test(test_copy),
        cmocka_unit_test(test_number),         cmocka_unit_test(test_format_rules),
        cmocka_unit_test(test_malformed_items), cmocka_unit_test(test_files),
        cmocka_unit_test(test_repeats),        cmocka_unit_test(test_agreement),
        cmocka_unit_test(test_nll),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
