/* fuzz_tokenizer: the tokenizer on arbitrary input.
 * First byte < 0x80: the rest is text, encoded with flags from the first byte through the toy
 * vocabulary (all 256 byte tokens, merges, control and user-defined tokens); with EXACT_BYTES the
 * decode must give the text back. First byte >= 0x80: the rest is a GGUF file; a tokenizer built
 * from it (if the reader and tokenizer accept it) encodes and decodes a fixed text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "specd/gguf.h"
#include "specd/tokenizer.h"
#include "tokenizer/toy_vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static specd_tokenizer *toy_tokenizer(int pre) {
    static specd_tokenizer *tok[3];
    static gguf_builder b[3];
    static specd_gguf *g[3];
    static const char *const pres[3] = {"smollm", "qwen2", "qwen35"};
    if (!tok[pre]) {
        toy_opts o = {.bos = 1, .pre = pres[pre]};
        toy_build(&b[pre], &o);
        if (specd_gguf_create_from_memory(b[pre].buf, b[pre].len, &g[pre], NULL) != SPECD_OK ||
            specd_tokenizer_create_from_gguf(g[pre], &tok[pre], NULL) != SPECD_OK)
            abort();
    }
    return tok[pre];
}

static void roundtrip(const specd_tokenizer *t, const char *text, size_t len, uint32_t flags) {
    /* A byte makes at most 3 tokens (a bad byte is U+FFFD), plus BOS and EOS. */
    size_t cap = 3 * len + 2, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    specd_status st = specd_tokenizer_encode(t, text, len, flags, ids, cap, &n, NULL);
    if (st != SPECD_OK) {
        /* only exact mode may refuse, and only for a byte the vocab cannot represent */
        if (!(flags & SPECD_TOKENIZE_EXACT_BYTES) || st != SPECD_E_UNSUPPORTED) abort();
        free(ids);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= specd_tokenizer_vocab_size(t)) abort();
    size_t m = 0;
    st = specd_tokenizer_decode(t, ids, n, SPECD_DETOKENIZE_RENDER_SPECIAL, NULL, 0, &m, NULL);
    if (st != SPECD_OK && st != SPECD_E_INVALID_ARG) abort();
    char *back = malloc(m + 1);
    size_t m2 = 0;
    if (specd_tokenizer_decode(t, ids, n, SPECD_DETOKENIZE_RENDER_SPECIAL, back, m, &m2, NULL) !=
            SPECD_OK ||
        m2 != m)
        abort();
    if ((flags & SPECD_TOKENIZE_EXACT_BYTES) && !(flags & SPECD_TOKENIZE_ADD_SPECIAL) &&
        (m != len || memcmp(back, text, len) != 0))
        abort();
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] < 0x80) {
        uint32_t flags = data[0] & 7u;
        roundtrip(toy_tokenizer((data[0] >> 3) % 3), (const char *)data + 1, size - 1, flags);
        return 0;
    }
    specd_gguf *g = NULL;
    specd_tokenizer *t = NULL;
    if (specd_gguf_create_from_memory(data + 1, size - 1, &g, NULL) == SPECD_OK &&
        specd_tokenizer_create_from_gguf(g, &t, NULL) == SPECD_OK) {
        static const char text[] = "Hello <|im_start|> world 123 \xe4\xbd\xa0\xe5\xa5\xbd \xff";
        roundtrip(t, text, sizeof text - 1, SPECD_TOKENIZE_PARSE_SPECIAL);
        specd_chat_message m = {.role = "user", .content = "hi"};
        char buf[256];
        size_t n;
        (void)specd_tokenizer_apply_chat_template(t, &m, 1, 1, buf, sizeof buf, &n, NULL);
    }
    specd_tokenizer_destroy(t);
    specd_gguf_destroy(g);
    return 0;
}
