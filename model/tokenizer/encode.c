/* specd_tokenizer_encode: special-token partition, pre-tokenization, BPE. */
#include <string.h>

#include "common/alloc.h"
#include "common/status_internal.h"
#include "model/tokenizer/tokenizer_internal.h"
#include "model/tokenizer/unicode.h"

typedef struct frag {
    size_t off, len; /* bytes of the input */
    int32_t id;      /* special token id, or -1 for text still to tokenize */
} frag;

typedef struct enc {
    const specd_tokenizer *t;
    int exact;
    specd_error *err;
    frag *frags, *next;
    size_t n_frags, cap_frags, cap_next;
    uint32_t *units;
    size_t cap_units;
    uint8_t *bytes; /* BPE bytes of the current pre-token */
    size_t cap_bytes;
    specd_bpe_scratch bpe;
    int32_t *out;
    size_t n_out, cap_out;
} enc;

static void enc_free(enc *e) {
    specd_free(e->frags);
    specd_free(e->next);
    specd_free(e->units);
    specd_free(e->bytes);
    specd_free(e->out);
    specd_bpe_scratch_free(&e->bpe);
}

static specd_status push_frag(enc *e, size_t off, size_t len, int32_t id) {
    if (!specd_tok_grow((void **)&e->next, &e->cap_next, e->n_frags + 1, sizeof(frag)))
        return specd_fail(e->err, SPECD_E_NOMEM, "tokenizer fragments");
    e->next[e->n_frags++] = (frag){off, len, id};
    return SPECD_OK;
}

/* Cuts every occurrence of each special token out of the text fragments, one token at a time in
 * the tokenizer's order, exactly as llama.cpp's tokenizer_st_partition does. */
static specd_status partition(enc *e, const char *text, size_t len, int parse_special) {
    const specd_tokenizer *t = e->t;
    if (!specd_tok_grow((void **)&e->frags, &e->cap_frags, 1, sizeof(frag)))
        return specd_fail(e->err, SPECD_E_NOMEM, "tokenizer fragments");
    e->frags[0] = (frag){0, len, -1};
    size_t n_cur = 1;
    for (size_t s = 0; s < t->n_special; s++) {
        int32_t id = t->special[s];
        if (!parse_special && t->kind[id] != SPECD_TOKEN_USER_DEFINED) continue;
        const char *pat = t->pieces + t->piece_off[id];
        size_t plen = t->piece_off[id + 1] - t->piece_off[id];
        e->n_frags = 0;
        for (size_t f = 0; f < n_cur; f++) {
            frag fr = e->frags[f];
            if (fr.id >= 0) {
                SPECD_TRY(push_frag(e, fr.off, fr.len, fr.id));
                continue;
            }
            size_t pos = fr.off, end = fr.off + fr.len;
            while (pos < end) {
                const char *hit = memmem(text + pos, end - pos, pat, plen);
                if (!hit) break;
                size_t at = (size_t)(hit - text);
                if (at > pos) SPECD_TRY(push_frag(e, pos, at - pos, -1));
                SPECD_TRY(push_frag(e, at, plen, id));
                pos = at + plen;
            }
            if (pos < end) SPECD_TRY(push_frag(e, pos, end - pos, -1));
        }
        frag *tmp = e->frags;
        size_t tcap = e->cap_frags;
        e->frags = e->next, e->cap_frags = e->cap_next;
        e->next = tmp, e->cap_next = tcap;
        n_cur = e->n_frags;
    }
    e->n_frags = n_cur;
    return SPECD_OK;
}

static specd_status out_reserve(enc *e, size_t more) {
    size_t need;
    if (!specd_add_ok(e->n_out, more, &need) ||
        !specd_tok_grow((void **)&e->out, &e->cap_out, need, sizeof(int32_t)))
        return specd_fail(e->err, SPECD_E_NOMEM, "token output of %zu ids", e->n_out + more);
    return SPECD_OK;
}

/* One pre-token: its units' bytes, then BPE. */
static specd_status emit_piece(void *ctx, size_t begin, size_t end) {
    enc *e = ctx;
    size_t need = 4 * (end - begin);
    if (!specd_tok_grow((void **)&e->bytes, &e->cap_bytes, need, 1))
        return specd_fail(e->err, SPECD_E_NOMEM, "pre-token of %zu characters", end - begin);
    size_t nb = 0;
    for (size_t i = begin; i < end; i++) {
        uint32_t u = e->units[i];
        if (u < 0x80u)
            e->bytes[nb++] = (uint8_t)u;
        else
            nb += specd_unit_bytes(u, e->exact, e->bytes + nb);
    }
    SPECD_TRY(out_reserve(e, nb));
    size_t added = 0;
    SPECD_TRY(specd_bpe_word(e->t, &e->bpe, e->bytes, nb, e->exact, SPECD_BPE_HEAP_THRESHOLD,
                             e->out + e->n_out, &added, e->err));
    e->n_out += added;
    return SPECD_OK;
}

static specd_status encode_all(enc *e, const char *text, size_t len, uint32_t flags) {
    const specd_tokenizer *t = e->t;
    if ((flags & SPECD_TOKENIZE_ADD_SPECIAL) && t->add_bos) {
        SPECD_TRY(out_reserve(e, 1));
        e->out[e->n_out++] = t->bos;
    }
    if (len > 0) SPECD_TRY(partition(e, text, len, (flags & SPECD_TOKENIZE_PARSE_SPECIAL) != 0));
    for (size_t f = 0; f < e->n_frags && len > 0; f++) {
        frag fr = e->frags[f];
        if (fr.id >= 0) {
            SPECD_TRY(out_reserve(e, 1));
            e->out[e->n_out++] = fr.id;
            continue;
        }
        if (!specd_tok_grow((void **)&e->units, &e->cap_units, fr.len, sizeof(uint32_t)))
            return specd_fail(e->err, SPECD_E_NOMEM, "text fragment of %zu bytes", fr.len);
        size_t nu = specd_utf8_decode((const uint8_t *)text + fr.off, fr.len, e->exact, e->units);
        SPECD_TRY(specd_pretok_split(t->pretok, t->bmp_class, e->units, nu, emit_piece, e));
    }
    if ((flags & SPECD_TOKENIZE_ADD_SPECIAL) && t->add_eos) {
        SPECD_TRY(out_reserve(e, 1));
        e->out[e->n_out++] = t->eos;
    }
    return SPECD_OK;
}

specd_status specd_tokenizer_encode(const specd_tokenizer *tok, const char *text, size_t len,
                                    uint32_t flags, int32_t *ids, size_t cap, size_t *n_out,
                                    specd_error *err) {
    if (!tok || !n_out || (!text && len) || (!ids && cap))
        return specd_fail(err, SPECD_E_INVALID_ARG, "tokenizer encode: NULL argument");
    if (flags & ~(uint32_t)(SPECD_TOKENIZE_ADD_SPECIAL | SPECD_TOKENIZE_PARSE_SPECIAL |
                            SPECD_TOKENIZE_EXACT_BYTES))
        return specd_fail(err, SPECD_E_INVALID_ARG, "tokenizer encode: unknown flags 0x%x",
                          (unsigned)flags);
    enc e;
    memset(&e, 0, sizeof e);
    e.t = tok;
    e.exact = (flags & SPECD_TOKENIZE_EXACT_BYTES) != 0;
    e.err = err;
    specd_status st = encode_all(&e, text, len, flags);
    if (st == SPECD_OK) {
        *n_out = e.n_out;
        if (e.n_out > cap)
            st = specd_fail(err, SPECD_E_INVALID_ARG, "tokenizer encode: %zu ids need room, %zu given",
                            e.n_out, cap);
        else if (e.n_out)
            memcpy(ids, e.out, e.n_out * sizeof *ids);
    }
    enc_free(&e);
    return st;
}
