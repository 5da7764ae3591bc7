/* fuzz_grammar: the grammar compilers and the matcher on arbitrary input, through the toy
 * vocabulary (all 256 byte tokens, merges, control tokens). Input: one mode byte (even: GBNF,
 * odd: JSON Schema), the grammar text up to the first 0x00 byte, then the bytes that drive a
 * matcher: each byte picks a token, taken as is when the grammar allows it, else the allowed
 * token of that rank in the mask. Every step checks allows/accept/mask/forced against each other;
 * limits (grammar size, stacks, depth) must refuse, never crash or grow without bound. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "specd/gguf.h"
#include "specd/grammar.h"
#include "specd/tokenizer.h"
#include "tokenizer/toy_vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_STEPS = 48 };

static const specd_tokenizer *toy_tokenizer(void) {
    static specd_tokenizer *tok;
    static gguf_builder b;
    static specd_gguf *g;
    if (!tok) {
        toy_opts o = {.bos = 1, .pre = "smollm"};
        toy_build(&b, &o);
        if (specd_gguf_create_from_memory(b.buf, b.len, &g, NULL) != SPECD_OK ||
            specd_tokenizer_create_from_gguf(g, &tok, NULL) != SPECD_OK)
            abort();
    }
    return tok;
}

static int bit(const uint32_t *bits, int32_t t) {
    return (int)(bits[t >> 5] >> (t & 31) & 1);
}

static void drive(const specd_grammar *g, const uint8_t *in, size_t n, int32_t V) {
    specd_grammar_matcher *m, *c;
    if (specd_grammar_matcher_create(g, &m, NULL) != SPECD_OK) return;
    if (specd_grammar_matcher_create(g, &c, NULL) != SPECD_OK) abort();
    uint32_t *bits = calloc((size_t)(V + 31) / 32, sizeof *bits);
    int32_t forced[16];
    for (size_t i = 0; i < n && i < MAX_STEPS; i++) {
        if (specd_grammar_matcher_fill_mask(m, bits, V) != SPECD_OK) abort();
        int32_t t = (int32_t)(in[i] % V);
        if (specd_grammar_matcher_allows(m, t) != bit(bits, t)) abort();
        if (!bit(bits, t)) { /* the allowed token of rank in[i] among the allowed ones */
            int32_t n_ok = 0, k;
            for (k = 0; k < V; k++)
                n_ok += bit(bits, k);
            if (!n_ok) break;
            int32_t want = in[i] % n_ok;
            for (k = 0; k < V && (want -= bit(bits, k)) >= 0;)
                k++;
            t = k;
            if (specd_grammar_matcher_copy(c, m) != SPECD_OK) abort();
        }
        /* forced tokens are allowed in sequence */
        int32_t k = specd_grammar_matcher_forced(m, forced, 16);
        if (k < 0 || k > 16 || specd_grammar_matcher_copy(c, m) != SPECD_OK) abort();
        for (int32_t j = 0; j < k; j++)
            if (specd_grammar_matcher_accept(c, forced[j]) != SPECD_OK) abort();
        specd_status st = specd_grammar_matcher_accept(m, t);
        if (st != SPECD_OK && st != SPECD_E_UNSUPPORTED && st != SPECD_E_NOMEM) abort();
        if (st != SPECD_OK) break; /* a limit: the mask allowed what accept could not take */
        if (specd_tokenizer_is_eog(toy_tokenizer(), t)) break;
    }
    (void)specd_grammar_matcher_done(m);
    (void)specd_grammar_matcher_must_end(m);
    free(bits);
    specd_grammar_matcher_destroy(c);
    specd_grammar_matcher_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const specd_tokenizer *tok = toy_tokenizer();
    const uint8_t *text = data + 1, *nul = memchr(text, 0, size - 1);
    size_t len = nul ? (size_t)(nul - text) : size - 1;
    const uint8_t *rest = nul ? nul + 1 : data + size;
    specd_grammar *g = NULL;
    specd_error err;
    specd_status st;
    if (data[0] & 1) {
        st = specd_grammar_create_json_schema((const char *)text, len, tok, &g, &err);
        char buf[64];
        size_t n = 0;
        specd_status st2 =
            specd_grammar_to_gbnf((const char *)text, len, buf, sizeof buf, &n, NULL);
        if (st == SPECD_OK && st2 != SPECD_OK && st2 != SPECD_E_INVALID_ARG) abort();
    } else {
        st = specd_grammar_create_gbnf((const char *)text, len, tok, &g, &err);
    }
    if (st != SPECD_OK) {
        if (!err.message[0]) abort(); /* every refusal says why */
        return 0;
    }
    drive(g, rest, (size_t)(data + size - rest), specd_tokenizer_vocab_size(tok));
    specd_grammar_destroy(g);
    return 0;
}
