/* Token ids back to bytes, as llama.cpp's token_to_piece / detokenize (no space cleaning: the
 * supported pre-tokenizers all turn it off). */
#include <string.h>

#include "common/status_internal.h"
#include "model/tokenizer/tokenizer_internal.h"

static size_t piece_of(const specd_tokenizer *t, int32_t id, uint32_t flags, const char **p) {
    int k = t->kind[id];
    if ((k == SPECD_TOKEN_CONTROL || k == SPECD_TOKEN_UNKNOWN) &&
        !(flags & SPECD_DETOKENIZE_RENDER_SPECIAL)) {
        *p = t->pieces;
        return 0;
    }
    *p = t->pieces + t->piece_off[id];
    return t->piece_off[id + 1] - t->piece_off[id];
}

specd_status specd_tokenizer_token_to_piece(const specd_tokenizer *tok, int32_t id,
                                            uint32_t flags, const char **piece, size_t *len,
                                            specd_error *err) {
    if (!tok || !piece || !len)
        return specd_fail(err, SPECD_E_INVALID_ARG, "token_to_piece: NULL argument");
    if (id < 0 || id >= tok->n_vocab)
        return specd_fail(err, SPECD_E_INVALID_ARG, "token id %d out of range [0, %d)", (int)id,
                          (int)tok->n_vocab);
    *len = piece_of(tok, id, flags, piece);
    return SPECD_OK;
}

specd_status specd_tokenizer_decode(const specd_tokenizer *tok, const int32_t *ids, size_t n,
                                    uint32_t flags, char *buf, size_t cap, size_t *n_out,
                                    specd_error *err) {
    if (!tok || !n_out || (!ids && n) || (!buf && cap))
        return specd_fail(err, SPECD_E_INVALID_ARG, "decode: NULL argument");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok->n_vocab)
            return specd_fail(err, SPECD_E_INVALID_ARG, "ids[%zu] = %d out of range [0, %d)", i,
                              (int)ids[i], (int)tok->n_vocab);
    size_t first = 0, last = n;
    if (flags & SPECD_DETOKENIZE_REMOVE_SPECIAL) {
        if (tok->add_bos && last > first && ids[first] == tok->bos) first++;
        if (tok->add_eos && last > first && ids[last - 1] == tok->eos) last--;
    }
    size_t total = 0;
    for (size_t i = first; i < last; i++) {
        const char *p;
        total += piece_of(tok, ids[i], flags, &p);
    }
    *n_out = total;
    if (total > cap)
        return specd_fail(err, SPECD_E_INVALID_ARG, "decode: %zu bytes need room, %zu given",
                          total, cap);
    size_t at = 0;
    for (size_t i = first; i < last; i++) {
        const char *p;
        size_t len = piece_of(tok, ids[i], flags, &p);
        memcpy(buf + at, p, len);
        at += len;
    }
    return SPECD_OK;
}
