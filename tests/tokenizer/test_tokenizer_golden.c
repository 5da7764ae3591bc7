/* The tokenizer against llama.cpp: tests/data/tokenizer_golden.tsv holds llama.cpp's ids for
 * 356 inputs through the default model's vocabulary with the smollm, qwen2 and qwen35
 * pre-tokenizers (scripts/golden/make_token_golden.py). Every id must match. */
#include "test_main.h"

#include <string.h>

#include "model/tokenizer/tokenizer_internal.h"
#include "specd/gguf.h"
#include "specd/tokenizer.h"
#include "tokenizer/golden.h"

#define MAX_IDS 8192
#define MIN_STRINGS 300

typedef struct fixture {
    specd_gguf *gguf;
    specd_tokenizer *smollm, *qwen2, *qwen35;
    char *golden;
    size_t golden_len;
} fixture;

static int setup(void **state) {
    const char *model = specd_test_model_path();
    const char *src = getenv("SPECD_SOURCE_DIR");
    if (!model || !src) return -1;
    fixture *fx = calloc(1, sizeof *fx);
    specd_error err;
    if (specd_gguf_create(model, &fx->gguf, &err) != SPECD_OK) {
        print_error("model: %s\n", err.message);
        return -1;
    }
    if (specd_tokenizer_create_from_gguf(fx->gguf, &fx->smollm, &err) != SPECD_OK ||
        specd_tokenizer_create_from_gguf_ex(fx->gguf, "qwen2", 1, 1, &fx->qwen2, &err) !=
            SPECD_OK ||
        specd_tokenizer_create_from_gguf_ex(fx->gguf, "qwen35", -1, -1, &fx->qwen35, &err) !=
            SPECD_OK) {
        print_error("tokenizer: %s\n", err.message);
        return -1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/tokenizer_golden.tsv", src);
    fx->golden = golden_read_file(path, &fx->golden_len);
    if (!fx->golden) {
        print_error("cannot read %s\n", path);
        return -1;
    }
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    specd_tokenizer_destroy(fx->smollm);
    specd_tokenizer_destroy(fx->qwen2);
    specd_tokenizer_destroy(fx->qwen35);
    specd_gguf_destroy(fx->gguf);
    free(fx->golden);
    free(fx);
    return 0;
}

static specd_tokenizer *by_pre(fixture *fx, const char *pre) {
    if (strcmp(pre, "smollm") == 0) return fx->smollm;
    if (strcmp(pre, "qwen2") == 0) return fx->qwen2;
    if (strcmp(pre, "qwen35") == 0) return fx->qwen35;
    return NULL;
}

/* Calls fn on every record of the given type (fields split, line copied). */
typedef void (*record_fn)(fixture *fx, char **f, int nf, void *ctx);
static size_t each_record(fixture *fx, char type, record_fn fn, void *ctx) {
    size_t n = 0;
    char *line = NULL;
    size_t cap = 0;
    for (const char *p = fx->golden; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > 0 && p[0] == type && p[1] == '\t') {
            if (len + 1 > cap) {
                cap = len + 1;
                line = realloc(line, cap);
            }
            memcpy(line, p, len);
            line[len] = '\0';
            char *f[8];
            int nf = golden_fields(line, f, 8);
            fn(fx, f, nf, ctx);
            n++;
        }
        p = nl ? nl + 1 : p + len;
    }
    free(line);
    return n;
}

typedef struct counts {
    size_t checked, bad;
    size_t per_pre[3];
} counts;

static void check_encode(fixture *fx, char **f, int nf, void *ctx) {
    counts *c = ctx;
    assert_int_equal(nf, 5);
    specd_tokenizer *tok = by_pre(fx, f[1]);
    assert_non_null(tok);
    int gflags = atoi(f[2]);
    uint32_t flags = ((gflags & 1) ? SPECD_TOKENIZE_ADD_SPECIAL : 0) |
                     ((gflags & 2) ? SPECD_TOKENIZE_PARSE_SPECIAL : 0);
    static uint8_t text[1 << 16];
    static int32_t want[MAX_IDS], got[MAX_IDS];
    long len = golden_unhex(f[3], strlen(f[3]), text);
    long n_want = golden_ids(f[4], want, MAX_IDS);
    assert_true(len >= 0 && n_want >= 0);
    size_t n_got = 0;
    specd_error err;
    specd_status st = specd_tokenizer_encode(tok, (const char *)text, (size_t)len, flags, got,
                                             MAX_IDS, &n_got, &err);
    c->checked++;
    c->per_pre[tok == fx->smollm ? 0 : tok == fx->qwen2 ? 1 : 2]++;
    if (st != SPECD_OK || n_got != (size_t)n_want ||
        memcmp(got, want, n_got * sizeof *got) != 0) {
        if (c->bad++ < 10) {
            print_error("MISMATCH pre=%s flags=%d input=%s\n  want: %s\n  got (%s):", f[1], gflags,
                        f[3], f[4], specd_status_name(st));
            for (size_t i = 0; i < n_got && st == SPECD_OK; i++) print_error(" %d", got[i]);
            print_error("\n");
        }
    }
}

static void test_golden_encode(void **state) {
    fixture *fx = *state;
    counts c = {0};
    each_record(fx, 'E', check_encode, &c);
    print_message("encode: %zu cases checked (smollm %zu, qwen2 %zu, qwen35 %zu), %zu differ\n",
                  c.checked, c.per_pre[0], c.per_pre[1], c.per_pre[2], c.bad);
    for (int i = 0; i < 3; i++) assert_true(c.per_pre[i] >= 2 * MIN_STRINGS);
    assert_int_equal(c.bad, 0);
}

static void check_decode(fixture *fx, char **f, int nf, void *ctx) {
    counts *c = ctx;
    assert_int_equal(nf, 5);
    specd_tokenizer *tok = by_pre(fx, f[1]);
    int gflags = atoi(f[2]);
    uint32_t flags = ((gflags & 1) ? SPECD_DETOKENIZE_RENDER_SPECIAL : 0) |
                     ((gflags & 2) ? SPECD_DETOKENIZE_REMOVE_SPECIAL : 0);
    static int32_t ids[MAX_IDS];
    static uint8_t want[1 << 16];
    static char got[1 << 16];
    long n_ids = golden_ids(f[3], ids, MAX_IDS);
    long n_want = golden_unhex(f[4], strlen(f[4]), want);
    assert_true(n_ids >= 0 && n_want >= 0);
    size_t n_got = 0;
    specd_status st = specd_tokenizer_decode(tok, ids, (size_t)n_ids, flags, got, sizeof got,
                                             &n_got, NULL);
    c->checked++;
    if (st != SPECD_OK || n_got != (size_t)n_want || memcmp(got, want, n_got) != 0) {
        if (c->bad++ < 10)
            print_error("DECODE MISMATCH pre=%s flags=%d ids=%s want=%s\n", f[1], gflags, f[3],
                        f[4]);
    }
}

static void test_golden_decode(void **state) {
    fixture *fx = *state;
    counts c = {0};
    each_record(fx, 'D', check_decode, &c);
    print_message("decode: %zu cases checked, %zu differ\n", c.checked, c.bad);
    assert_true(c.checked >= 4 * MIN_STRINGS);
    assert_int_equal(c.bad, 0);
}

static void check_eog(fixture *fx, char **f, int nf, void *ctx) {
    counts *c = ctx;
    assert_int_equal(nf, 3);
    specd_tokenizer *tok = by_pre(fx, f[1]);
    static int32_t want[1024];
    long n = golden_ids(f[2], want, 1024);
    assert_true(n > 0);
    size_t k = 0;
    for (int32_t id = 0; id < specd_tokenizer_vocab_size(tok); id++) {
        int expect = k < (size_t)n && want[k] == id;
        k += expect;
        if (specd_tokenizer_is_eog(tok, id) != expect) c->bad++;
        c->checked++;
    }
}

static void test_golden_eog(void **state) {
    fixture *fx = *state;
    counts c = {0};
    assert_int_equal(each_record(fx, 'G', check_eog, &c), 3);
    assert_int_equal(c.bad, 0);
}

static void check_chat(fixture *fx, char **f, int nf, void *ctx) {
    counts *c = ctx;
    assert_int_equal(nf, 4);
    specd_chat_message msgs[16];
    static uint8_t text[1 << 14];
    size_t used = 0, n = 0;
    /* "hex(role)=hex(content);..." */
    for (char *p = f[2]; *p && n < 16;) {
        char *eq = strchr(p, '='), *semi = strchr(p, ';');
        size_t rlen = (size_t)(eq - p), clen = (size_t)((semi ? semi : p + strlen(p)) - eq - 1);
        long a = golden_unhex(p, rlen, text + used);
        msgs[n].role = (const char *)text + used;
        used += (size_t)a;
        text[used++] = 0;
        long b = golden_unhex(eq + 1, clen, text + used);
        msgs[n].content = (const char *)text + used;
        used += (size_t)b;
        text[used++] = 0;
        n++;
        p = semi ? semi + 1 : p + strlen(p);
    }
    static uint8_t want[1 << 14];
    static char got[1 << 14];
    long n_want = golden_unhex(f[3], strlen(f[3]), want);
    size_t n_got = 0;
    specd_status st = specd_tokenizer_apply_chat_template(fx->smollm, msgs, n, atoi(f[1]), got,
                                                          sizeof got, &n_got, NULL);
    c->checked++;
    if (st != SPECD_OK || n_got != (size_t)n_want || memcmp(got, want, n_got) != 0) {
        c->bad++;
        print_error("CHAT MISMATCH: want %.*s\ngot %.*s\n", (int)n_want, (const char *)want,
                    (int)n_got, got);
    }
}

static void test_golden_chat(void **state) {
    fixture *fx = *state;
    counts c = {0};
    each_record(fx, 'C', check_chat, &c);
    assert_true(c.checked >= 10);
    assert_int_equal(c.bad, 0);
}

/* decode(encode(x)) == x with EXACT_BYTES for every golden input whose bytes all have tokens;
 * the others are refused naming the byte. */
static void check_roundtrip(fixture *fx, char **f, int nf, void *ctx) {
    counts *c = ctx;
    if (strcmp(f[1], "smollm") != 0 || atoi(f[2]) != 2) return;
    (void)nf;
    static uint8_t text[1 << 16];
    static int32_t ids[MAX_IDS];
    static char back[1 << 16];
    long len = golden_unhex(f[3], strlen(f[3]), text);
    int representable = 1;
    for (long i = 0; i < len; i++)
        if (specd_tokenizer_find(fx->smollm, (const char *)&text[i], 1) < 0) representable = 0;
    size_t n = 0, m = 0;
    specd_error err;
    specd_status st = specd_tokenizer_encode(
        fx->smollm, (const char *)text, (size_t)len,
        SPECD_TOKENIZE_PARSE_SPECIAL | SPECD_TOKENIZE_EXACT_BYTES, ids, MAX_IDS, &n, &err);
    c->checked++;
    if (!representable) {
        if (st != SPECD_E_UNSUPPORTED) c->bad++;
        return;
    }
    assert_int_equal(st, SPECD_OK);
    assert_int_equal(specd_tokenizer_decode(fx->smollm, ids, n, SPECD_DETOKENIZE_RENDER_SPECIAL,
                                            back, sizeof back, &m, NULL),
                     SPECD_OK);
    if (m != (size_t)len || memcmp(back, text, m) != 0) {
        c->bad++;
        print_error("ROUNDTRIP MISMATCH input=%s\n", f[3]);
    }
}

static void test_exact_roundtrip(void **state) {
    fixture *fx = *state;
    counts c = {0};
    each_record(fx, 'E', check_roundtrip, &c);
    assert_true(c.checked >= MIN_STRINGS);
    assert_int_equal(c.bad, 0);
}

int main(void) {
    if (!specd_test_model_path()) return SPECD_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_encode), cmocka_unit_test(test_golden_decode),
        cmocka_unit_test(test_golden_eog),    cmocka_unit_test(test_golden_chat),
        cmocka_unit_test(test_exact_roundtrip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
