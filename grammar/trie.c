/* The token trie: every token the grammar may match (normal and byte tokens with at least one
 * byte), as a prefix tree over their bytes laid out in depth-first order, so a mask is one pass
 * over an array that skips the subtree of every byte the grammar refuses. */
#include "grammar/grammar_internal.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_TOKEN_BYTES = 255 };

typedef struct piece {
    const unsigned char *s;
    uint32_t len;
    int32_t id;
} piece;

static int cmp_piece(const void *a, const void *b) {
    const piece *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int gram_token_in_grammar(const specd_tokenizer *tok, int32_t id) {
    int k = specd_tokenizer_token_kind(tok, id);
    return (k == SPECD_TOKEN_NORMAL || k == SPECD_TOKEN_BYTE) && !specd_tokenizer_is_eog(tok, id);
}

specd_status gram_trie_build(const specd_tokenizer *tok, gram_trie *out, specd_error *err) {
    int32_t V = specd_tokenizer_vocab_size(tok);
    piece *ps = specd_alloc_array((size_t)V + 1, sizeof *ps);
    if (!ps) return specd_fail(err, SPECD_E_NOMEM, "grammar: out of memory for the token trie");
    size_t n = 0, total = 0;
    for (int32_t id = 0; id < V; id++) {
        const char *s;
        size_t len;
        if (!gram_token_in_grammar(tok, id) ||
            specd_tokenizer_token_to_piece(tok, id, 0, &s, &len, NULL) != SPECD_OK || !len ||
            len > MAX_TOKEN_BYTES)
            continue;
        ps[n++] = (piece){(const unsigned char *)s, (uint32_t)len, id};
        total += len;
    }
    qsort(ps, n, sizeof *ps, cmp_piece);
    gram_trie t = {0};
    t.byte = specd_alloc_array(total + 1, 1);
    t.depth = specd_alloc_array(total + 1, 1);
    t.end = specd_alloc_array(total + 1, sizeof *t.end);
    t.below = specd_alloc_array(total + 1, sizeof *t.below);
    t.tok_off = specd_alloc_array(total + 2, sizeof *t.tok_off);
    t.tok = specd_alloc_array(n + 1, sizeof *t.tok);
    int32_t path[MAX_TOKEN_BYTES + 1]; /* node at each depth on the current path */
    if (!t.byte || !t.depth || !t.end || !t.tok_off || !t.tok || !t.below) {
        gram_trie_free(&t);
        specd_free(ps);
        return specd_fail(err, SPECD_E_NOMEM, "grammar: out of memory for the token trie");
    }
    uint32_t d = 0; /* depth of the current path */
    const piece *prev = NULL;
    int32_t nt = 0;
    for (size_t i = 0; i < n; i++) {
        const piece *q = &ps[i];
        uint32_t lcp = 0;
        if (prev)
            while (lcp < prev->len && lcp < q->len && prev->s[lcp] == q->s[lcp])
                lcp++;
        while (d > lcp)
            t.end[path[--d]] = t.n; /* close the subtrees left behind */
        while (d < q->len) {
            t.byte[t.n] = q->s[d];
            t.depth[t.n] = (uint8_t)(d + 1);
            t.tok_off[t.n] = nt;
            path[d++] = t.n++;
        }
        t.tok[nt++] = q->id; /* tok_off of the next node closes this one's list */
        prev = q;
    }
    while (d > 0)
        t.end[path[--d]] = t.n;
    t.tok_off[t.n] = nt;
    for (int32_t i = 0; i < t.n; i++)
        if (t.depth[i] > t.max_depth) t.max_depth = t.depth[i];
    /* below[i]: each node adds its byte's class to its ancestors (path holds them) */
    for (int32_t i = 0; i < t.n; i++) {
        uint32_t dd = t.depth[i];
        path[dd - 1] = i;
        uint16_t c = (uint16_t)(1u << gram_byte_class(t.byte[i]));
        for (uint32_t a = 0; a + 1 < dd; a++) t.below[path[a]] |= c;
    }
    specd_free(ps);
    *out = t;
    return SPECD_OK;
}

void gram_trie_free(gram_trie *t) {
    specd_free(t->byte);
    specd_free(t->depth);
    specd_free(t->end);
    specd_free(t->below);
    specd_free(t->tok_off);
    specd_free(t->tok);
    memset(t, 0, sizeof *t);
}
