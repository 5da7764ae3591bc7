#include "ipc/fingerprint.h"

#include "common/status_internal.h"
#include "specd/gguf.h"

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

specd_status specd_ipc_fingerprint_of_tokenizer(const specd_tokenizer *tok,
                                                specd_ipc_fingerprint *out, specd_error *err) {
    if (!tok || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "fingerprint: NULL argument");
    int32_t n = specd_tokenizer_vocab_size(tok);
    if (n <= 0) return specd_fail(err, SPECD_E_INVALID_ARG, "fingerprint: empty vocabulary");
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int32_t id = 0; id < n; id++) {
        const char *piece = NULL;
        size_t len = 0;
        SPECD_TRY(specd_tokenizer_token_to_piece(tok, id, SPECD_DETOKENIZE_RENDER_SPECIAL, &piece,
                                                 &len, err));
        h = fnv(h, piece, len);
        h = fnv(h, "\xff", 1); /* no two vocabularies concatenate alike */
    }
    int32_t special[2] = {specd_tokenizer_bos(tok), specd_tokenizer_eos(tok)};
    h = fnv(h, special, sizeof special);
    out->vocab_size = (uint32_t)n;
    out->tokenizer_hash = h;
    return SPECD_OK;
}

specd_status specd_ipc_fingerprint_of_model(const char *path, specd_ipc_fingerprint *out,
                                            specd_error *err) {
    specd_gguf *g = NULL;
    SPECD_TRY(specd_gguf_create(path, &g, err));
    specd_tokenizer *tok = NULL;
    specd_status st = specd_tokenizer_create_from_gguf(g, &tok, err);
    if (st == SPECD_OK) st = specd_ipc_fingerprint_of_tokenizer(tok, out, err);
    specd_tokenizer_destroy(tok);
    specd_gguf_destroy(g);
    return st;
}
