#include "serve/serve_detok.h"

#include <stdlib.h>
#include <string.h>

void serve_detok_init(serve_detok *d, const specd_tokenizer *tok, const char *const *stop,
                      const size_t *stop_len, int n_stop) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->stop = stop;
    d->stop_len = stop_len;
    d->n_stop = n_stop;
}

void serve_detok_free(serve_detok *d) {
    free(d->text);
    memset(d, 0, sizeof *d);
}

static int reserve(serve_detok *d, size_t more) {
    if (d->len + more + 1 <= d->cap) return 0;
    size_t cap = d->cap ? d->cap : 256;
    while (cap < d->len + more + 1) cap *= 2;
    char *t = realloc(d->text, cap);
    if (!t) return -1;
    d->text = t;
    d->cap = cap;
    return 0;
}

/* Cuts text at the first stop string that now appears. Only the part that could contain a new
 * match is searched: from the longest stop string's length before the previous end. */
static void find_stop(serve_detok *d, size_t old_len) {
    size_t best = SIZE_MAX;
    for (int s = 0; s < d->n_stop; s++) {
        size_t sl = d->stop_len[s];
        if (sl == 0 || sl > d->len) continue;
        size_t from = old_len >= sl ? old_len - sl + 1 : 0;
        if (from < d->released) from = d->released;
        for (size_t i = from; i + sl <= d->len && i < best; i++)
            if (!memcmp(d->text + i, d->stop[s], sl)) {
                best = i;
                break;
            }
    }
    if (best != SIZE_MAX) {
        d->len = best;
        d->text[best] = '\0';
        d->stopped = 1;
    }
}

int serve_detok_push(serve_detok *d, const int32_t *ids, size_t n) {
    if (d->stopped) return 0;
    size_t old_len = d->len;
    for (size_t i = 0; i < n; i++) {
        const char *piece;
        size_t pl = 0;
        /* Control tokens (the end-of-turn token that stops a request) render as nothing. */
        if (specd_tokenizer_token_to_piece(d->tok, ids[i], 0, &piece, &pl, NULL) != SPECD_OK)
            continue;
        if (reserve(d, pl) != 0) return -1;
        memcpy(d->text + d->len, piece, pl);
        d->len += pl;
        d->text[d->len] = '\0';
    }
    if (d->len > old_len) find_stop(d, old_len);
    return 0;
}

/* Bytes at the end of text[0..len) that begin a UTF-8 character still missing its last bytes. */
static size_t incomplete_utf8_tail(const unsigned char *t, size_t len) {
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned char c = t[len - back];
        if ((c & 0xc0) == 0x80) continue; /* a continuation byte: look further back */
        size_t need = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

/* The longest tail of text that is a proper prefix of a stop string. */
static size_t stop_prefix_tail(const serve_detok *d) {
    size_t hold = 0;
    for (int s = 0; s < d->n_stop; s++) {
        size_t sl = d->stop_len[s];
        for (size_t k = sl ? sl - 1 : 0; k > hold; k--)
            if (k <= d->len && !memcmp(d->text + d->len - k, d->stop[s], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

void serve_detok_take(serve_detok *d, int final, size_t *off, size_t *n) {
    /* The answer ends inside a character (max_tokens or a stop string cut it): those bytes are
     * not text, and a client would show them as U+FFFD. */
    if (final) {
        size_t cut = incomplete_utf8_tail((const unsigned char *)d->text, d->len);
        if (d->len - cut >= d->released) {
            d->len -= cut;
            if (d->text) d->text[d->len] = '\0';
        }
    }
    size_t end = d->len;
    if (!final && !d->stopped) {
        size_t hold = incomplete_utf8_tail((const unsigned char *)d->text, d->len);
        size_t h2 = stop_prefix_tail(d);
        if (h2 > hold) hold = h2;
        end = d->len - hold;
        if (end < d->released) end = d->released;
    }
    *off = d->released;
    *n = end - d->released;
    d->released = end;
}
