/* Tokenizer unit tests on a toy vocabulary: merge order, both BPE paths, special tokens, byte
 * round trips, capacity contracts, and refusal of malformed metadata. */
#include "test_main.h"

#include <string.h>

#include "model/tokenizer/tokenizer_internal.h"
#include "model/tokenizer/unicode.h"
#include "specd/gguf.h"
#include "specd/tokenizer.h"
#include "tokenizer/toy_vocab.h"

typedef struct toy {
    gguf_builder b;
    specd_gguf *g;
    specd_tokenizer *t;
} toy;

static specd_status toy_open(toy *x, const toy_opts *o, specd_error *err) {
    memset(x, 0, sizeof *x);
    toy_build(&x->b, o);
    specd_status st = specd_gguf_create_from_memory(x->b.buf, x->b.len, &x->g, err);
    assert_int_equal(st, SPECD_OK);
    return specd_tokenizer_create_from_gguf(x->g, &x->t, err);
}

static void toy_close(toy *x) {
    specd_tokenizer_destroy(x->t);
    specd_gguf_destroy(x->g);
    gb_free(&x->b);
}

static int32_t id_of(const specd_tokenizer *t, const char *s) {
    int32_t id = specd_tokenizer_find(t, s, strlen(s));
    assert_true(id >= 0);
    return id;
}

static size_t enc(const specd_tokenizer *t, const char *s, size_t len, uint32_t flags, int32_t *ids,
                  size_t cap) {
    size_t n = 0;
    specd_error err;
    specd_status st = specd_tokenizer_encode(t, s, len, flags, ids, cap, &n, &err);
    if (st != SPECD_OK) print_error("%s\n", err.message);
    assert_int_equal(st, SPECD_OK);
    return n;
}

static void test_merge_order(void **state) {
    (void)state;
    toy x;
    toy_opts o = {.bos = 1};
    assert_int_equal(toy_open(&x, &o, NULL), SPECD_OK);
    int32_t ids[64];
    /* smollm: digits alone; " aaaaa" merges leftmost-first: aa aa a -> aaaa a */
    const char *s = "abc the aaaaa 12";
    size_t n = enc(x.t, s, strlen(s), 0, ids, 64);
    int32_t want[] = {id_of(x.t, "abc"), id_of(x.t, " the"), id_of(x.t, " "), id_of(x.t, "aaaa"),
                      id_of(x.t, "a"),   id_of(x.t, " "),    id_of(x.t, "1"), id_of(x.t, "2")};
    assert_int_equal(n, 8);
    assert_memory_equal(ids, want, sizeof want);
    toy_close(&x);
}

/* The linear scan and the heap must make the same merges on any input. */
static void test_linear_equals_heap(void **state) {
    (void)state;
    toy x;
    toy_opts o = {.bos = 1};
    assert_int_equal(toy_open(&x, &o, NULL), SPECD_OK);
    specd_bpe_scratch s1, s2;
    memset(&s1, 0, sizeof s1);
    memset(&s2, 0, sizeof s2);
    static const char alphabet[] = "aabbcc the\x80";
    uint64_t r = 88172645463325252ull;
    int32_t a[512], b[512];
    uint8_t text[512];
    for (int iter = 0; iter < 2000; iter++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        size_t len = 1 + r % 300;
        for (size_t i = 0; i < len; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            text[i] = (uint8_t)alphabet[r % (sizeof alphabet - 1)];
        }
        size_t na = 0, nb = 0;
        assert_int_equal(specd_bpe_word(x.t, &s1, text, len, 0, SIZE_MAX, a, &na, NULL), SPECD_OK);
        assert_int_equal(specd_bpe_word(x.t, &s2, text, len, 0, 0, b, &nb, NULL), SPECD_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
    }
    specd_bpe_scratch_free(&s1);
    specd_bpe_scratch_free(&s2);
    toy_close(&x);
}

static void test_special_tokens(void **state) {
    (void)state;
    toy x;
    toy_opts o = {.bos = 1};
    assert_int_equal(toy_open(&x, &o, NULL), SPECD_OK);
    int32_t ids[64];
    const char *s = "<|im_start|>ab<tool>";
    size_t n = enc(x.t, s, strlen(s), SPECD_TOKENIZE_PARSE_SPECIAL, ids, 64);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], id_of(x.t, "ab"));
    assert_int_equal(ids[2], 3);
    /* Without parse_special the control text is plain text; user-defined tokens still match. */
    n = enc(x.t, s, strlen(s), 0, ids, 64);
    assert_true(n > 3);
    for (size_t i = 0; i + 1 < n; i++) assert_int_not_equal(ids[i], 1);
    assert_int_equal(ids[n - 1], 3);
    /* Control tokens render only on request; user-defined always. */
    int32_t in[] = {1, id_of(x.t, "ab"), 3, 2};
    char out[64];
    size_t m = 0;
    assert_int_equal(specd_tokenizer_decode(x.t, in, 4, 0, out, sizeof out, &m, NULL), SPECD_OK);
    assert_int_equal(m, 8);
    assert_memory_equal(out, "ab<tool>", 8);
    assert_int_equal(specd_tokenizer_decode(x.t, in, 4, SPECD_DETOKENIZE_RENDER_SPECIAL, out,
                                            sizeof out, &m, NULL),
                     SPECD_OK);
    assert_int_equal(m, strlen("<|im_start|>ab<tool><|im_end|>"));
    assert_memory_equal(out, "<|im_start|>ab<tool><|im_end|>", m);
    assert_true(specd_tokenizer_is_eog(x.t, 2));
    assert_true(specd_tokenizer_is_eog(x.t, 0)); /* <|endoftext|> by its text */
    assert_false(specd_tokenizer_is_eog(x.t, 1));
    assert_false(specd_tokenizer_is_eog(x.t, -1));
    assert_int_equal(specd_tokenizer_bos(x.t), 1);
    assert_int_equal(specd_tokenizer_eos(x.t), 2);
    assert_int_equal(specd_tokenizer_token_kind(x.t, 3), SPECD_TOKEN_USER_DEFINED);
    assert_int_equal(specd_tokenizer_token_kind(x.t, 100000), 0);
    toy_close(&x);
}

/* Any bytes survive encode + decode with EXACT_BYTES when the vocab has all 256 byte tokens. */
static void test_exact_bytes_roundtrip(void **state) {
    (void)state;
    static const char *const pres[] = {"smollm", "qwen2", "qwen35"};
    for (int p = 0; p < 3; p++) {
        toy x;
        toy_opts o = {.bos = 1, .pre = pres[p]};
        assert_int_equal(toy_open(&x, &o, NULL), SPECD_OK);
        uint64_t r = 0x2545F4914F6CDD1Dull + (uint64_t)p;
        static char text[4096], back[8192];
        static int32_t ids[4096];
        for (int iter = 0; iter < 300; iter++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            size_t len = r % 200;
            for (size_t i = 0; i < len; i++) {
                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                /* bias towards UTF-8 lead/continuation bytes and ASCII structure */
                text[i] = (char)(r % 3 == 0 ? 0x80 + (r >> 8) % 0x80 : (r >> 16) % 256);
            }
            uint32_t fl = SPECD_TOKENIZE_EXACT_BYTES | (iter % 2 ? SPECD_TOKENIZE_PARSE_SPECIAL : 0);
            size_t n = enc(x.t, text, len, fl, ids, 4096), m = 0;
            assert_int_equal(specd_tokenizer_decode(x.t, ids, n, SPECD_DETOKENIZE_RENDER_SPECIAL,
                                                    back, sizeof back, &m, NULL),
                             SPECD_OK);
            assert_int_equal(m, len);
            assert_memory_equal(back, text, len);
        }
        toy_close(&x);
    }
}

/* Default mode treats invalid UTF-8 as llama.cpp does: each bad byte becomes U+FFFD. */
static void test_invalid_utf8_default(void **state) {
    (void)state;
    toy x;
    toy_opts o = {.bos = 1};
    assert_int_equal(toy_open(&x, &o, NULL), SPECD_OK);
    int32_t ids[16];
    size_t n = enc(x.t, "a\xff", 2, 0, ids, 16), m = 0;
    char out[16];
    assert_int_equal(specd_tokenizer_decode(x.t, ids, n, 0, out, sizeof out, &m, NULL), SPECD_OK);
    assert_int_equal(m, 4);
    assert_memory_equal(out, "a\xEF\xBF\xBD", 4);
    /* overlong NUL decodes to U+0000, as in llama.cpp */
    n = enc(x.t, "\xC0\x80", 2, 0, ids, 16);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], specd_tokenizer_find(x.t, "\0", 1));
    toy_close(&x);
}

static void test_capacity_and_args(void **state) {
    (void)state;
    toy x;
    toy_opts o = {.bos = 1};
    assert_int_equal(toy_open(&x, &o, NULL), SPECD_OK);
    int32_t ids[4] = {-7, -7, -7, -7};
    size_t n = 0;
    specd_error err;
    assert_int_equal(specd_tokenizer_encode(x.t, "abcabcabcabcabc", 15, 0, ids, 2, &n, &err),
                     SPECD_E_INVALID_ARG);
    assert_int_equal(n, 5);
    assert_int_equal(ids[0], -7); /* untouched */
    assert_non_null(strstr(err.message, "5 ids"));
    assert_int_equal(specd_tokenizer_encode(x.t, "a", 1, 0, NULL, 0, &n, NULL), SPECD_E_INVALID_ARG);
    assert_int_equal(n, 1);
    assert_int_equal(specd_tokenizer_encode(x.t, "", 0, 0, NULL, 0, &n, NULL), SPECD_OK);
    assert_int_equal(n, 0);
    assert_int_equal(specd_tokenizer_encode(x.t, "a", 1, 0x100, ids, 4, &n, &err),
                     SPECD_E_INVALID_ARG);
    assert_int_equal(specd_tokenizer_encode(NULL, "a", 1, 0, ids, 4, &n, &err),
                     SPECD_E_INVALID_ARG);
    assert_int_equal(specd_tokenizer_encode(x.t, NULL, 3, 0, ids, 4, &n, &err),
                     SPECD_E_INVALID_ARG);
    /* decode: an id out of range is named and nothing is written */
    char buf[8] = "xxxxxxx";
    int32_t bad[] = {5, 99999};
    n = 77;
    assert_int_equal(specd_tokenizer_decode(x.t, bad, 2, 0, buf, sizeof buf, &n, &err),
                     SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "ids[1]"));
    assert_int_equal(n, 77);
    assert_string_equal(buf, "xxxxxxx");
    int32_t neg[] = {-1};
    assert_int_equal(specd_tokenizer_decode(x.t, neg, 1, 0, buf, sizeof buf, &n, &err),
                     SPECD_E_INVALID_ARG);
    int32_t many[] = {id_of(x.t, "abc"), id_of(x.t, "abc"), id_of(x.t, "abc")};
    assert_int_equal(specd_tokenizer_decode(x.t, many, 3, 0, buf, 4, &n, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(n, 9);
    const char *piece;
    size_t len;
    assert_int_equal(specd_tokenizer_token_to_piece(x.t, 99999, 0, &piece, &len, &err),
                     SPECD_E_INVALID_ARG);
    assert_int_equal(specd_tokenizer_token_to_piece(x.t, 1, 0, &piece, &len, &err), SPECD_OK);
    assert_int_equal(len, 0);
    assert_int_equal(specd_tokenizer_token_to_piece(x.t, 1, SPECD_DETOKENIZE_RENDER_SPECIAL, &piece,
                                                    &len, &err),
                     SPECD_OK);
    assert_int_equal(len, 12);
    specd_tokenizer_destroy(NULL);
    toy_close(&x);
}

static void expect_refused(const toy_opts *o, specd_status want, const char *needle) {
    toy x;
    specd_error err;
    specd_error_clear(&err);
    specd_status st = toy_open(&x, o, &err);
    if (st != want || !strstr(err.message, needle))
        print_error("got %s '%s', want %s mentioning '%s'\n", specd_status_name(st), err.message,
                    specd_status_name(want), needle);
    assert_int_equal(st, want);
    assert_non_null(strstr(err.message, needle));
    assert_null(x.t);
    toy_close(&x);
}

static void test_bad_metadata(void **state) {
    (void)state;
    expect_refused(&(toy_opts){.bos = 1, .model = "llama"}, SPECD_E_UNSUPPORTED,
                   "tokenizer.ggml.model");
    expect_refused(&(toy_opts){.bos = 1, .pre = "gpt-2"}, SPECD_E_UNSUPPORTED, "gpt-2");
    expect_refused(&(toy_opts){.bos = 1, .pre = ""}, SPECD_E_UNSUPPORTED, "tokenizer.ggml.pre");
    expect_refused(&(toy_opts){.bos = 1, .omit_tokens = 1}, SPECD_E_FORMAT, "tokenizer.ggml.tokens");
    expect_refused(&(toy_opts){.bos = 1, .tokens_not_strings = 1}, SPECD_E_FORMAT,
                   "tokenizer.ggml.tokens");
    expect_refused(&(toy_opts){.bos = 1, .omit_merges = 1}, SPECD_E_FORMAT, "tokenizer.ggml.merges");
    expect_refused(&(toy_opts){.bos = 1, .bad_merge = 1}, SPECD_E_FORMAT, "merges[3]");
    expect_refused(&(toy_opts){.bos = 1, .bad_type_value = 1}, SPECD_E_FORMAT, "token_type[7]");
    expect_refused(&(toy_opts){.bos = 1, .short_types = 1}, SPECD_E_FORMAT, "token_type");
    expect_refused(&(toy_opts){.bos = 1, .types_u32 = 1}, SPECD_E_FORMAT, "token_type");
    /* an out-of-range BOS id is dropped (as llama.cpp does), not fatal */
    toy x;
    toy_opts o = {.bos = 70000};
    assert_int_equal(toy_open(&x, &o, NULL), SPECD_OK);
    assert_int_equal(specd_tokenizer_bos(x.t), -1);
    toy_close(&x);
    specd_tokenizer *t = (specd_tokenizer *)1;
    assert_int_equal(specd_tokenizer_create_from_gguf(NULL, &t, NULL), SPECD_E_INVALID_ARG);
}

static void test_chat_template(void **state) {
    (void)state;
    toy x;
    toy_opts o = {.bos = 1};
    assert_int_equal(toy_open(&x, &o, NULL), SPECD_OK);
    specd_chat_message m[2] = {{.role = "user", .content = "hi"},
                               {.role = "assistant", .content = "yo"}};
    size_t n = 0;
    char buf[512];
    assert_int_equal(specd_tokenizer_apply_chat_template(x.t, m, 2, 1, buf, sizeof buf, &n, NULL),
                     SPECD_E_UNSUPPORTED);
    toy_close(&x);
    /* Qwen2.5 style: Jinja escapes ("\n" as backslash-n) around the default system prompt */
    o.chat_template = "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
                      "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- "
                      "'<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}{%- endif %}";
    assert_int_equal(toy_open(&x, &o, NULL), SPECD_OK);
    assert_int_equal(specd_tokenizer_apply_chat_template(x.t, m, 2, 1, buf, sizeof buf, &n, NULL),
                     SPECD_OK);
    const char *want = "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nhi<|im_end|>"
                       "\n<|im_start|>assistant\nyo<|im_end|>\n<|im_start|>assistant\n";
    assert_int_equal(n, strlen(want));
    assert_memory_equal(buf, want, n);
    memset(buf, 'z', sizeof buf);
    assert_int_equal(specd_tokenizer_apply_chat_template(x.t, m, 2, 1, buf, 10, &n, NULL),
                     SPECD_E_INVALID_ARG);
    assert_int_equal(n, strlen(want));
    assert_int_equal(buf[0], 'z');
    specd_chat_message bad[1] = {{.role = "user", .content = NULL}};
    assert_int_equal(specd_tokenizer_apply_chat_template(x.t, bad, 1, 1, buf, sizeof buf, &n, NULL),
                     SPECD_E_INVALID_ARG);
    /* a system message first: no default */
    specd_chat_message s[1] = {{.role = "system", .content = "S"}};
    assert_int_equal(specd_tokenizer_apply_chat_template(x.t, s, 1, 0, buf, sizeof buf, &n, NULL),
                     SPECD_OK);
    assert_int_equal(n, strlen("<|im_start|>system\nS<|im_end|>\n"));
    toy_close(&x);
}

/* Pre-token boundaries, as "|"-joined pieces of the units' UTF-8. */
typedef struct pieces {
    const uint32_t *units;
    char out[256];
    size_t len;
} pieces;

static specd_status collect(void *ctx, size_t begin, size_t end) {
    pieces *p = ctx;
    if (p->len) p->out[p->len++] = '|';
    for (size_t i = begin; i < end; i++) {
        uint8_t b[4];
        size_t n = specd_unit_bytes(p->units[i], 1, b);
        memcpy(p->out + p->len, b, n);
        p->len += n;
    }
    p->out[p->len] = '\0';
    return SPECD_OK;
}

static const char *split(specd_pretok kind, const char *text) {
    static uint8_t bmp[0x10000];
    static uint32_t units[256];
    static pieces p;
    specd_unicode_fill_bmp(bmp);
    size_t n = specd_utf8_decode((const uint8_t *)text, strlen(text), 1, units);
    memset(&p, 0, sizeof p);
    p.units = units;
    assert_int_equal(specd_pretok_split(kind, bmp, units, n, collect, &p), SPECD_OK);
    return p.out;
}

/* The splitting rules that tell the pre-tokenizers apart (llama.cpp's outputs for these are in the
 * golden file too, but a shared vocabulary can hide a boundary when no merge crosses it). */
static void test_pretokenizers(void **state) {
    (void)state;
    /* SmolLM: every digit alone, even after a space; GPT-2 contractions are lowercase only */
    assert_string_equal(split(SPECD_PRETOK_SMOLLM, "ab 123 x"), "ab| |1|2|3| x");
    assert_string_equal(split(SPECD_PRETOK_SMOLLM, "it's IT'S"), "it|'s| IT|'|S");
    assert_string_equal(split(SPECD_PRETOK_SMOLLM, "a  b\n\nc"), "a| | b|\n|\n|c");
    /* Qwen2: contractions in any case, a non-letter prefix joins a word, newlines group */
    assert_string_equal(split(SPECD_PRETOK_QWEN2, "IT'S 12"), "IT|'S| |1|2");
    assert_string_equal(split(SPECD_PRETOK_QWEN2, "(abc) x"), "(abc|)| x");
    assert_string_equal(split(SPECD_PRETOK_QWEN2, "a  \n\n b"), "a|  \n\n| b");
    assert_string_equal(split(SPECD_PRETOK_QWEN2, "x!!\n\ny"), "x|!!\n\n|y");
    /* Qwen3.5 keeps combining marks inside words; Qwen2 does not */
    assert_string_equal(split(SPECD_PRETOK_QWEN2, "cafe\xcc\x81 x"), "cafe|\xcc\x81| x");
    assert_string_equal(split(SPECD_PRETOK_QWEN35, "cafe\xcc\x81 x"), "cafe\xcc\x81| x");
    /* CJK is letters: one word; fullwidth digits are numbers */
    assert_string_equal(split(SPECD_PRETOK_QWEN2, "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x91"),
                        "\xe4\xbd\xa0\xe5\xa5\xbd|\xef\xbc\x91");
    assert_string_equal(specd_unicode_version, "15.1.0");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_order),          cmocka_unit_test(test_linear_equals_heap),
        cmocka_unit_test(test_special_tokens),       cmocka_unit_test(test_exact_bytes_roundtrip),
        cmocka_unit_test(test_invalid_utf8_default), cmocka_unit_test(test_capacity_and_args),
        cmocka_unit_test(test_bad_metadata),         cmocka_unit_test(test_chat_template),
        cmocka_unit_test(test_pretokenizers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
