/* The grammar engine (include/specd/grammar.h) on the default model's real vocabulary: GBNF
 * errors, the JSON Schema subset, matching real documents token by token as the tokenizer encodes
 * them, masks against a brute-force check of every token, forced tokens, the end-of-generation
 * rules, partial UTF-8 characters and copies. */
#include "test_main.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "specd/gguf.h"
#include "specd/grammar.h"
#include "specd/tokenizer.h"

typedef struct fixture {
    specd_gguf *gguf;
    specd_tokenizer *tok;
    int32_t V;
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    specd_error err;
    if (specd_gguf_create(specd_test_model_path(), &fx->gguf, &err) != SPECD_OK ||
        specd_tokenizer_create_from_gguf(fx->gguf, &fx->tok, &err) != SPECD_OK) {
        print_error("model: %s\n", err.message);
        return -1;
    }
    fx->V = specd_tokenizer_vocab_size(fx->tok);
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    specd_tokenizer_destroy(fx->tok);
    specd_gguf_destroy(fx->gguf);
    free(fx);
    return 0;
}

static specd_grammar *gbnf(const fixture *fx, const char *text) {
    specd_grammar *g = NULL;
    specd_error err;
    specd_status st = specd_grammar_create_gbnf(text, strlen(text), fx->tok, &g, &err);
    if (st != SPECD_OK) print_error("gbnf: %s\n", err.message);
    assert_int_equal(st, SPECD_OK);
    return g;
}

static specd_grammar *schema(const fixture *fx, const char *text) {
    specd_grammar *g = NULL;
    specd_error err;
    specd_status st =
        specd_grammar_create_json_schema(text, text ? strlen(text) : 0, fx->tok, &g, &err);
    if (st != SPECD_OK) print_error("schema: %s\n", err.message);
    assert_int_equal(st, SPECD_OK);
    return g;
}

static size_t encode(const fixture *fx, const char *text, int32_t *ids, size_t cap) {
    size_t n = 0;
    assert_int_equal(specd_tokenizer_encode(fx->tok, text, strlen(text), 0, ids, cap, &n, NULL),
                     SPECD_OK);
    return n;
}

/* 1 when every token of text is allowed and accepted in turn and the grammar may end after. */
static int matches(const fixture *fx, const specd_grammar *g, const char *text) {
    int32_t ids[4096];
    size_t n = encode(fx, text, ids, 4096);
    specd_grammar_matcher *m;
    assert_int_equal(specd_grammar_matcher_create(g, &m, NULL), SPECD_OK);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        int allowed = specd_grammar_matcher_allows(m, ids[i]);
        specd_status st = specd_grammar_matcher_accept(m, ids[i]);
        assert_int_equal(allowed, st == SPECD_OK); /* allows and accept agree */
        ok = st == SPECD_OK;
    }
    ok = ok && specd_grammar_matcher_done(m);
    specd_grammar_matcher_destroy(m);
    return ok;
}

static void expect_error(const fixture *fx, const char *text, specd_status want, const char *msg) {
    specd_grammar *g = NULL;
    specd_error err;
    specd_status st = specd_grammar_create_gbnf(text, strlen(text), fx->tok, &g, &err);
    if (st != want || !strstr(err.message, msg))
        print_error("grammar %s: got %s '%s', want '%s'\n", text, specd_status_name(st),
                    err.message, msg);
    assert_int_equal(st, want);
    assert_non_null(strstr(err.message, msg));
    assert_null(g);
}

static void test_gbnf_errors(void **state) {
    const fixture *fx = *state;
    expect_error(fx, "root ::= foo", SPECD_E_FORMAT, "line 1 col 10: undefined rule 'foo'");
    expect_error(fx, "root ::= \"abc", SPECD_E_FORMAT, "line 1 col 10: unterminated literal");
    expect_error(fx, "root ::= \"a\"\n  x [a-", SPECD_E_FORMAT,
                 "line 2 col 5: unterminated character class");
    expect_error(fx, "root ::= (\"a\" | \"b\"", SPECD_E_FORMAT, "line 1 col 10: unclosed '('");
    expect_error(fx, "a ::= \"x\"", SPECD_E_FORMAT, "no rule named 'root'");
    expect_error(fx, "root ::= x\nx ::= \"\"? x \"a\"", SPECD_E_FORMAT, "left recursion");
    expect_error(fx, "root ::= \"a\"{3,2}", SPECD_E_FORMAT, "n < m");
    expect_error(fx, "root ::= \"\\q\"", SPECD_E_FORMAT, "line 1 col 11: unknown escape '\\q'");
    expect_error(fx, "root ::= \"a\"\nroot ::= \"b\"", SPECD_E_FORMAT,
                 "line 2 col 1: rule 'root' defined twice");
    expect_error(fx, "root ::= \"a\" @", SPECD_E_FORMAT, "line 1 col 14: unexpected character '@'");
    expect_error(fx, "root ::= \"a\"{99999}", SPECD_E_UNSUPPORTED, "repetition count above");
    expect_error(fx, "", SPECD_E_FORMAT, "empty grammar");
}

static void test_gbnf_matches(void **state) {
    const fixture *fx = *state;
    specd_grammar *g = gbnf(fx, "# a list of greetings\n"
                                "root ::= greeting (\", \" greeting)* \"!\"?\n"
                                "greeting ::= (\"hello\" | \"hi\") \" \" name\n"
                                "name ::= [A-Z] [a-z]{1,8}   # capitalised\n");
    assert_true(matches(fx, g, "hello World"));
    assert_true(matches(fx, g, "hi Bob, hello Alice!"));
    assert_false(matches(fx, g, "hello world"));        /* lower-case name */
    assert_false(matches(fx, g, "hello Bartholomewx")); /* name longer than 9 */
    assert_false(matches(fx, g, "hello Bob,"));         /* cut short */
    specd_grammar_destroy(g);
    /* the layout llama-server users write: rules over several lines, an empty first
     * alternative, trailing comments */
    g = gbnf(fx, "root ::= pair (\"; \" pair)*\n"
                 "pair ::=\n"
                 "  key \"=\" sp (\n"
                 "      num   # a number\n"
                 "    | \"'\" [^'\\x7F\\x00-\\x1F]* \"'\"\n"
                 "  )\n"
                 "key ::= [a-z_]+\n"
                 "num ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) (\".\" [0-9]+)?\n"
                 "sp ::= | \" \" | \"\\n\" [ \\t]{0,20}\n");
    assert_true(matches(fx, g, "a= 1; b_c='x y'; d=\n    -2.5"));
    assert_false(matches(fx, g, "a=01"));
    assert_false(matches(fx, g, "a='x'; "));
    specd_grammar_destroy(g);
    g = gbnf(fx, "root ::= [^\\n]+ \"\\n\" . \"\\u00e9\" [\\x30-\\x39]");
    assert_true(matches(fx, g,
                        "any text\n\xe2\x82\xac\xc3\xa9"
                        "7"));
    assert_false(matches(fx, g,
                         "\nx\xc3\xa9"
                         "7"));
    specd_grammar_destroy(g);
}

static const char PERSON[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\", \"minLength\": 1},"
    "\"age\": {\"type\": \"integer\"},"
    "\"email\": {\"type\": \"string\", \"pattern\": \"^[a-z]+@[a-z]+\\\\.com$\"},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"a\", \"b\", 3]}, \"maxItems\": 2},"
    "\"kind\": {\"const\": \"person\"},"
    "\"home\": {\"$ref\": \"#/$defs/place\"},"
    "\"score\": {\"anyOf\": [{\"type\": \"number\"}, {\"type\": \"null\"}]}},"
    "\"required\": [\"name\", \"age\"], \"additionalProperties\": false,"
    "\"$defs\": {\"place\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
    "\"string\"}}, \"required\": [\"city\"], \"additionalProperties\": false}}}";

static void test_schema_documents(void **state) {
    const fixture *fx = *state;
    specd_grammar *g = schema(fx, PERSON);
    assert_true(matches(fx, g, "{\"name\": \"Ann\", \"age\": 31}"));
    assert_true(
        matches(fx, g, "{\"name\":\"Ann\",\"age\":-4,\"tags\":[\"a\",3],\"kind\":\"person\"}"));
    assert_true(
        matches(fx, g,
                "{\n  \"name\": \"Bo \\\"B\\\" \\u00e9\",\n  \"age\": 0,\n  \"email\": "
                "\"bo@mail.com\",\n  \"home\": {\"city\": \"Paris\"},\n  \"score\": 1.5e3\n}"));
    assert_true(matches(fx, g, "{\"name\": \"X\", \"age\": 1, \"score\": null}"));
    assert_false(matches(fx, g, "{\"age\": 31, \"name\": \"Ann\"}"));          /* order */
    assert_false(matches(fx, g, "{\"name\": \"\", \"age\": 31}"));             /* minLength */
    assert_false(matches(fx, g, "{\"name\": \"Ann\", \"age\": 3.5}"));         /* integer */
    assert_false(matches(fx, g, "{\"name\": \"Ann\", \"age\": 3, \"x\": 1}")); /* extra key */
    assert_false(matches(fx, g, "{\"name\": \"A\", \"age\": 3, \"email\": \"A@b.com\"}"));
    assert_false(matches(fx, g, "{\"name\": \"A\", \"age\": 3, \"tags\": [\"a\", \"b\", 3]}"));
    assert_false(matches(fx, g, "{\"name\": \"A\", \"age\": 3, \"kind\": \"dog\"}"));
    assert_false(matches(fx, g, "{\"name\": \"A\", \"age\": 3, \"home\": {}}"));
    assert_false(matches(fx, g, "{\"name\": \"A\", \"age\": 01}"));
    specd_grammar_destroy(g);

    /* json_object: any object, extra keys anywhere, nesting */
    g = schema(fx, NULL);
    assert_true(matches(fx, g, "{\"a\": [1, {\"b\": null}, \"x\"], \"c\": true}"));
    assert_true(matches(fx, g, "{}"));
    assert_false(matches(fx, g, "[1, 2]"));
    assert_false(matches(fx, g, "{\"a\": tru}"));
    specd_grammar_destroy(g);
    g = schema(fx, "{}");
    assert_true(matches(fx, g, "{\"k\": 1}"));
    specd_grammar_destroy(g);

    /* optional members only, extra keys allowed (additionalProperties absent) */
    g = schema(fx,
               "{\"properties\": {\"a\": {\"type\": \"boolean\"}, \"b\": {\"type\": \"null\"}}}");
    assert_true(matches(fx, g, "{}"));
    assert_true(matches(fx, g, "{\"b\": null}"));
    assert_true(matches(fx, g, "{\"a\": true, \"b\": null, \"zz\": [1]}"));
    assert_false(matches(fx, g, "{, \"b\": null}"));
    specd_grammar_destroy(g);

    /* unanchored patterns: the match may sit anywhere in the string */
    g = schema(fx, "{\"type\": \"string\", \"pattern\": \"ab|c\\\\d\"}");
    assert_true(matches(fx, g, "\"xxabyy\""));
    assert_true(matches(fx, g, "\"c7\""));
    assert_false(matches(fx, g, "\"cx\""));
    specd_grammar_destroy(g);

    /* type arrays, min/max items, recursion through $ref */
    g = schema(fx,
               "{\"type\": [\"integer\", \"array\"], \"items\": {\"$ref\": \"#/definitions/n\"}, "
               "\"minItems\": 1, \"definitions\": {\"n\": {\"type\": [\"array\", \"integer\"], "
               "\"items\": {\"$ref\": \"#/definitions/n\"}}}}");
    assert_true(matches(fx, g, "7"));
    assert_true(matches(fx, g, "[1, [2, [3, []]]]"));
    assert_false(matches(fx, g, "[]"));
    specd_grammar_destroy(g);
}

static void expect_schema_error(const fixture *fx, const char *text, specd_status want,
                                const char *msg) {
    specd_grammar *g = NULL;
    specd_error err;
    specd_status st = specd_grammar_create_json_schema(text, strlen(text), fx->tok, &g, &err);
    if (st != want || !strstr(err.message, msg))
        print_error("schema %s: got %s '%s'\n", text, specd_status_name(st), err.message);
    assert_int_equal(st, want);
    assert_non_null(strstr(err.message, msg));
}

static void test_schema_refusals(void **state) {
    const fixture *fx = *state;
    expect_schema_error(fx, "{\"type\": \"object\"", SPECD_E_FORMAT, "json:");
    expect_schema_error(fx, "{\"not\": {}}", SPECD_E_UNSUPPORTED, "'not'");
    expect_schema_error(fx, "{\"type\": \"date\"}", SPECD_E_UNSUPPORTED, "type 'date'");
    expect_schema_error(fx, "{\"$ref\": \"http://x/y\"}", SPECD_E_UNSUPPORTED, "$ref");
    expect_schema_error(fx, "{\"$ref\": \"#/$defs/q\"}", SPECD_E_FORMAT, "names no definition");
    expect_schema_error(fx, "{\"type\": \"string\", \"pattern\": \"(?=a)b\"}", SPECD_E_UNSUPPORTED,
                        "lookaround");
    expect_schema_error(fx, "{\"type\": \"string\", \"pattern\": \"a\\\\1\"}", SPECD_E_UNSUPPORTED,
                        "escape");
    expect_schema_error(fx, "{\"type\": \"array\", \"items\": [{}]}", SPECD_E_UNSUPPORTED,
                        "tuples");
    expect_schema_error(fx, "{\"type\": \"array\", \"maxItems\": -1}", SPECD_E_UNSUPPORTED,
                        "maxItems");
    char buf[8];
    size_t n = 0;
    assert_int_equal(specd_grammar_to_gbnf("{}", 2, buf, sizeof buf, &n, NULL),
                     SPECD_E_INVALID_ARG);
    assert_true(n > sizeof buf);
    char *big = malloc(n + 1);
    assert_int_equal(specd_grammar_to_gbnf("{}", 2, big, n + 1, &n, NULL), SPECD_OK);
    assert_non_null(strstr(big, "root ::= json-object"));
    free(big);
}

/* The mask equals a check of every token on its own (copy the matcher, accept the token). */
static void check_mask(const fixture *fx, specd_grammar_matcher *m, const specd_grammar *g) {
    uint32_t *bits = calloc((size_t)(fx->V + 31) / 32, sizeof *bits);
    assert_int_equal(specd_grammar_matcher_fill_mask(m, bits, fx->V), SPECD_OK);
    specd_grammar_matcher *c;
    assert_int_equal(specd_grammar_matcher_create(g, &c, NULL), SPECD_OK);
    int32_t n_allowed = 0;
    for (int32_t t = 0; t < fx->V; t++) {
        assert_int_equal(specd_grammar_matcher_copy(c, m), SPECD_OK);
        int ok = specd_grammar_matcher_accept(c, t) == SPECD_OK;
        int bit = (int)(bits[t >> 5] >> (t & 31) & 1);
        if (ok != bit) print_error("token %d: accept %d, mask %d\n", t, ok, bit);
        assert_int_equal(ok, bit);
        n_allowed += ok;
    }
    assert_true(n_allowed > 0);
    /* apply agrees with the mask */
    float *logits = calloc((size_t)fx->V, sizeof *logits);
    assert_int_equal(specd_grammar_matcher_apply(m, logits, fx->V), SPECD_OK);
    for (int32_t t = 0; t < fx->V; t += 97)
        assert_int_equal(isinf(logits[t]) != 0, !(bits[t >> 5] >> (t & 31) & 1));
    /* a second fill is a cache hit with the same bits */
    uint32_t *again = calloc((size_t)(fx->V + 31) / 32, sizeof *again);
    uint64_t hits0, hits1;
    specd_grammar_cache_stats(g, &hits0, NULL);
    assert_int_equal(specd_grammar_matcher_fill_mask(m, again, fx->V), SPECD_OK);
    specd_grammar_cache_stats(g, &hits1, NULL);
    assert_true(hits1 > hits0);
    assert_memory_equal(bits, again, (size_t)(fx->V + 31) / 32 * sizeof *bits);
    assert_int_equal(specd_grammar_matcher_fill_mask(m, bits, fx->V - 1), SPECD_E_MISMATCH);
    /* padded rows: the ids past the vocabulary are never allowed */
    uint32_t *padded = calloc((size_t)(fx->V + 64 + 31) / 32, sizeof *padded);
    memset(padded, 0xff, (size_t)(fx->V + 64 + 31) / 32 * sizeof *padded);
    assert_int_equal(specd_grammar_matcher_fill_mask(m, padded, fx->V + 64), SPECD_OK);
    assert_memory_equal(padded, again, (size_t)(fx->V + 31) / 32 * sizeof *bits);
    for (int32_t t = fx->V; t < fx->V + 64; t++)
        assert_int_equal(padded[t >> 5] >> (t & 31) & 1, 0);
    free(padded);
    specd_grammar_matcher_destroy(c);
    free(bits);
    free(again);
    free(logits);
}

static void test_masks_brute_force(void **state) {
    const fixture *fx = *state;
    specd_grammar *g = schema(fx, PERSON);
    static const char doc[] =
        "{\"name\": \"J\xc3\xa9r\xc3\xb4me\", \"age\": 12, \"tags\": [\"b\"], "
        "\"home\": {\"city\": \"Oslo\"}}";
    int32_t ids[256];
    size_t n = encode(fx, doc, ids, 256);
    specd_grammar_matcher *m;
    assert_int_equal(specd_grammar_matcher_create(g, &m, NULL), SPECD_OK);
    for (size_t i = 0; i <= n; i++) {
        if (i % 4 == 0 || i == n) check_mask(fx, m, g); /* sampled states, and the end */
        if (i < n) assert_int_equal(specd_grammar_matcher_accept(m, ids[i]), SPECD_OK);
    }
    specd_grammar_matcher_destroy(m);
    specd_grammar_destroy(g);

    /* GBNF class loops (whole trie subtrees taken at once), a comma list and free text */
    g = gbnf(fx, "root ::= [a-z ]+ (\",\" [a-zA-Z0-9 ]+)* \"\\n\" [^\\n]* \"\\n\"");
    static const char text[] = "some words, More 42\nfree text: {\"x\"} \xc3\xa9!\n";
    n = encode(fx, text, ids, 256);
    assert_int_equal(specd_grammar_matcher_create(g, &m, NULL), SPECD_OK);
    for (size_t i = 0; i <= n; i++) {
        if (i % 3 == 1 || i == n) check_mask(fx, m, g);
        if (i < n) assert_int_equal(specd_grammar_matcher_accept(m, ids[i]), SPECD_OK);
    }
    assert_true(specd_grammar_matcher_done(m));
    specd_grammar_matcher_destroy(m);
    specd_grammar_destroy(g);
}

/* A token that ends inside a UTF-8 character: allowed when a completion can match. */
static void test_partial_utf8(void **state) {
    const fixture *fx = *state;
    int32_t lead = specd_tokenizer_find(fx->tok, "\xc3", 1);
    int32_t tail = specd_tokenizer_find(fx->tok, "\xa9", 1);
    if (lead < 0 || tail < 0) skip();
    specd_grammar *g = gbnf(fx, "root ::= [\\u00e0-\\u00ef] \"!\"");
    specd_grammar_matcher *m;
    assert_int_equal(specd_grammar_matcher_create(g, &m, NULL), SPECD_OK);
    assert_true(specd_grammar_matcher_allows(m, lead));
    assert_int_equal(specd_grammar_matcher_accept(m, lead), SPECD_OK);
    assert_false(specd_grammar_matcher_done(m));
    check_mask(fx, m, g);                                   /* inside the character */
    int32_t bad = specd_tokenizer_find(fx->tok, "\x80", 1); /* U+00C0: outside the class */
    if (bad >= 0) assert_false(specd_grammar_matcher_allows(m, bad));
    assert_int_equal(specd_grammar_matcher_accept(m, tail), SPECD_OK);
    assert_int_equal(specd_grammar_matcher_accept(m, specd_tokenizer_find(fx->tok, "!", 1)),
                     SPECD_OK);
    assert_true(specd_grammar_matcher_must_end(m));
    specd_grammar_matcher_destroy(m);
    specd_grammar_destroy(g);
    /* a class that no character starting with C3 meets: the lead byte is refused */
    g = gbnf(fx, "root ::= [a-z\\u0100-\\u0200]");
    assert_int_equal(specd_grammar_matcher_create(g, &m, NULL), SPECD_OK);
    assert_false(specd_grammar_matcher_allows(m, lead));
    assert_int_equal(specd_grammar_matcher_accept(m, lead), SPECD_E_STATE);
    specd_grammar_matcher_destroy(m);
    specd_grammar_destroy(g);
}

static void test_forced(void **state) {
    const fixture *fx = *state;
    specd_grammar *g = schema(fx, PERSON);
    specd_grammar_matcher *m, *c;
    assert_int_equal(specd_grammar_matcher_create(g, &m, NULL), SPECD_OK);
    assert_int_equal(specd_grammar_matcher_create(g, &c, NULL), SPECD_OK);
    static const char doc[] = "{\"name\": \"Al\", \"age\": 5, \"kind\": \"person\"}";
    int32_t ids[128], forced[64];
    size_t n = encode(fx, doc, ids, 128);
    int32_t total = 0;
    for (size_t i = 0; i <= n; i++) {
        int32_t k = specd_grammar_matcher_forced(m, forced, 64);
        assert_true(k >= 0 && k <= 64);
        total += k;
        assert_int_equal(specd_grammar_matcher_copy(c, m), SPECD_OK);
        for (int32_t j = 0; j < k; j++) { /* allowed in sequence */
            assert_true(specd_grammar_matcher_allows(c, forced[j]));
            assert_int_equal(specd_grammar_matcher_accept(c, forced[j]), SPECD_OK);
        }
        if (i < n) assert_int_equal(specd_grammar_matcher_accept(m, ids[i]), SPECD_OK);
    }
    assert_true(total > 0); /* `{"name":` and `person"` are forced */
    /* right after '{' and its whitespace, the key "name" is forced */
    specd_grammar_matcher_destroy(m);
    assert_int_equal(specd_grammar_matcher_create(g, &m, NULL), SPECD_OK);
    assert_int_equal(specd_grammar_matcher_accept(m, specd_tokenizer_find(fx->tok, "{", 1)),
                     SPECD_OK);
    assert_int_equal(specd_grammar_matcher_accept(m, specd_tokenizer_find(fx->tok, " ", 1)),
                     SPECD_OK);
    int32_t k = specd_grammar_matcher_forced(m, forced, 64);
    assert_true(k > 0);
    char text[64];
    size_t len = 0;
    assert_int_equal(
        specd_tokenizer_decode(fx->tok, forced, (size_t)k, 0, text, sizeof text, &len, NULL),
        SPECD_OK);
    assert_true(len >= 5 && !memcmp(text, "\"name", 5));
    specd_grammar_matcher_destroy(m);
    specd_grammar_matcher_destroy(c);
    specd_grammar_destroy(g);
}

static void test_done_and_eog(void **state) {
    const fixture *fx = *state;
    int32_t eos = specd_tokenizer_eos(fx->tok);
    int32_t im_start = specd_tokenizer_find(fx->tok, "<|im_start|>", 12);
    assert_true(eos >= 0 && specd_tokenizer_is_eog(fx->tok, eos));
    specd_grammar *g = gbnf(fx, "root ::= \"ab\" \"c\"?");
    specd_grammar_matcher *m;
    assert_int_equal(specd_grammar_matcher_create(g, &m, NULL), SPECD_OK);
    assert_false(specd_grammar_matcher_done(m));
    assert_false(specd_grammar_matcher_allows(m, eos));
    assert_int_equal(specd_grammar_matcher_accept(m, eos), SPECD_E_STATE);
    if (im_start >= 0) assert_false(specd_grammar_matcher_allows(m, im_start));
    assert_int_equal(specd_grammar_matcher_accept(m, specd_tokenizer_find(fx->tok, "ab", 2)),
                     SPECD_OK);
    assert_true(specd_grammar_matcher_done(m));
    assert_false(specd_grammar_matcher_must_end(m)); /* "c" may follow */
    assert_true(specd_grammar_matcher_allows(m, eos));
    assert_true(specd_grammar_matcher_allows(m, specd_tokenizer_find(fx->tok, "c", 1)));
    assert_int_equal(specd_grammar_matcher_accept(m, specd_tokenizer_find(fx->tok, "c", 1)),
                     SPECD_OK);
    assert_true(specd_grammar_matcher_must_end(m));
    /* complete: only the EOG tokens */
    uint32_t *bits = calloc((size_t)(fx->V + 31) / 32, sizeof *bits);
    assert_int_equal(specd_grammar_matcher_fill_mask(m, bits, fx->V), SPECD_OK);
    for (int32_t t = 0; t < fx->V; t++)
        assert_int_equal((int)(bits[t >> 5] >> (t & 31) & 1), specd_tokenizer_is_eog(fx->tok, t));
    assert_int_equal(specd_grammar_matcher_accept(m, eos), SPECD_OK);
    /* after EOG nothing */
    assert_false(specd_grammar_matcher_allows(m, eos));
    assert_false(specd_grammar_matcher_done(m));
    assert_int_equal(specd_grammar_matcher_fill_mask(m, bits, fx->V), SPECD_OK);
    for (int32_t t = 0; t < fx->V; t++)
        assert_int_equal(bits[t >> 5] >> (t & 31) & 1, 0);
    assert_int_equal(specd_grammar_matcher_accept(m, -1), SPECD_E_INVALID_ARG);
    free(bits);
    specd_grammar_matcher_destroy(m);
    specd_grammar_destroy(g);
}

static void test_copy(void **state) {
    const fixture *fx = *state;
    specd_grammar *g = gbnf(fx, "root ::= \"x\" ( \"y\" | \"z\" )"),
                  *h = gbnf(fx, "root ::= \"x\"");
    int32_t x = specd_tokenizer_find(fx->tok, "x", 1), y = specd_tokenizer_find(fx->tok, "y", 1),
            z = specd_tokenizer_find(fx->tok, "z", 1);
    specd_grammar_matcher *a, *b, *o;
    assert_int_equal(specd_grammar_matcher_create(g, &a, NULL), SPECD_OK);
    assert_int_equal(specd_grammar_matcher_create(g, &b, NULL), SPECD_OK);
    assert_int_equal(specd_grammar_matcher_create(h, &o, NULL), SPECD_OK);
    assert_int_equal(specd_grammar_matcher_accept(a, x), SPECD_OK);
    assert_int_equal(specd_grammar_matcher_copy(b, a), SPECD_OK);
    assert_int_equal(specd_grammar_matcher_accept(b, y), SPECD_OK);
    assert_true(specd_grammar_matcher_done(b));
    assert_false(specd_grammar_matcher_done(a)); /* the source is untouched */
    assert_int_equal(specd_grammar_matcher_accept(a, y), SPECD_OK);
    assert_int_equal(specd_grammar_matcher_accept(b, z), SPECD_E_STATE); /* refused: unchanged */
    assert_true(specd_grammar_matcher_done(b));
    assert_int_equal(specd_grammar_matcher_copy(o, a), SPECD_E_MISMATCH);
    specd_grammar_matcher_destroy(a);
    specd_grammar_matcher_destroy(b);
    specd_grammar_matcher_destroy(o);
    specd_grammar_destroy(g);
    specd_grammar_destroy(h);
}

/* One grammar shared by threads: each thread's masks along a document equal the masks a grammar
 * of its own gives (the shared cache is filled and read concurrently). */
enum { N_THREADS = 4, MAX_DOC = 64 };

typedef struct thread_job {
    const fixture *fx;
    const specd_grammar *g;
    const int32_t *ids;
    size_t n;
    const uint32_t *want; /* (n + 1) masks */
    int bad;
} thread_job;

static void *thread_main(void *arg) {
    thread_job *j = arg;
    size_t words = (size_t)(j->fx->V + 31) / 32;
    uint32_t *bits = malloc(words * sizeof *bits);
    specd_grammar_matcher *m;
    if (specd_grammar_matcher_create(j->g, &m, NULL) != SPECD_OK) j->bad = 1;
    for (size_t i = 0; !j->bad && i <= j->n; i++) {
        if (specd_grammar_matcher_fill_mask(m, bits, j->fx->V) != SPECD_OK ||
            memcmp(bits, j->want + i * words, words * sizeof *bits) != 0 ||
            (i < j->n && specd_grammar_matcher_accept(m, j->ids[i]) != SPECD_OK))
            j->bad = 1;
    }
    if (!j->bad) specd_grammar_matcher_destroy(m);
    free(bits);
    return NULL;
}

static void test_shared_across_threads(void **state) {
    const fixture *fx = *state;
    int32_t ids[MAX_DOC];
    size_t n = encode(fx, "{\"name\": \"Li\", \"age\": 40, \"tags\": [\"a\", 3]}", ids, MAX_DOC);
    size_t words = (size_t)(fx->V + 31) / 32;
    uint32_t *want = malloc((n + 1) * words * sizeof *want);
    specd_grammar *ref = schema(fx, PERSON), *shared = schema(fx, PERSON);
    specd_grammar_matcher *m;
    assert_int_equal(specd_grammar_matcher_create(ref, &m, NULL), SPECD_OK);
    for (size_t i = 0; i <= n; i++) {
        assert_int_equal(specd_grammar_matcher_fill_mask(m, want + i * words, fx->V), SPECD_OK);
        if (i < n) assert_int_equal(specd_grammar_matcher_accept(m, ids[i]), SPECD_OK);
    }
    specd_grammar_matcher_destroy(m);
    pthread_t th[N_THREADS];
    thread_job jobs[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        jobs[t] = (thread_job){fx, shared, ids, n, want, 0};
        assert_int_equal(pthread_create(&th[t], NULL, thread_main, &jobs[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(jobs[t].bad, 0);
    }
    /* the masks the threads computed are the grammar's: a new request finds them */
    uint64_t hits0, hits1;
    specd_grammar_cache_stats(shared, &hits0, NULL);
    assert_int_equal(specd_grammar_matcher_create(shared, &m, NULL), SPECD_OK);
    assert_int_equal(specd_grammar_matcher_fill_mask(m, want, fx->V), SPECD_OK);
    specd_grammar_cache_stats(shared, &hits1, NULL);
    assert_int_equal(hits1, hits0 + 1);
    specd_grammar_matcher_destroy(m);
    free(want);
    specd_grammar_destroy(ref);
    specd_grammar_destroy(shared);
}

int main(void) {
    if (!specd_test_model_path()) return SPECD_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gbnf_errors),
        cmocka_unit_test(test_gbnf_matches),
        cmocka_unit_test(test_schema_documents),
        cmocka_unit_test(test_schema_refusals),
        cmocka_unit_test(test_masks_brute_force),
        cmocka_unit_test(test_partial_utf8),
        cmocka_unit_test(test_forced),
        cmocka_unit_test(test_done_and_eog),
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_shared_across_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
