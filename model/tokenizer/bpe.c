/* Byte-pair merging of one pre-token, as llama.cpp does it: repeatedly merge the adjacent pair
 * with the lowest merge rank, the leftmost one among equals, until no pair has a rank.
 *
 * Symbols are token ids from the start (one per byte), so a merge is one hash lookup of the id
 * pair. Short pieces (almost all) use a linear scan over an array of pair ranks; long ones (runs of
 * spaces, long CJK words) a binary heap of candidate pairs over a linked list, with stale entries
 * skipped when popped. Both give the same merges. */
#include <string.h>

#include "common/alloc.h"
#include "common/status_internal.h"
#include "model/tokenizer/tokenizer_internal.h"

typedef struct cand {
    int32_t rank;
    int32_t left, right;       /* symbol positions */
    int32_t left_id, right_id; /* ids when pushed: the entry is stale once either changed */
} cand;

static inline int cand_less(const cand *a, const cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(cand *h, size_t *n, cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n) {
    cand top = h[0];
    cand last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m) break;
        size_t c = l + 1 < m && cand_less(&h[l + 1], &h[l]) ? l + 1 : l;
        if (!cand_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m > 0) h[i] = last;
    return top;
}

void specd_bpe_scratch_free(specd_bpe_scratch *s) {
    specd_free(s->id); /* one block holds all five arrays */
    specd_free(s->heap);
    memset(s, 0, sizeof *s);
}

static int reserve(specd_bpe_scratch *s, size_t n) {
    if (n <= s->cap) return 1;
    size_t cap = n < 64 ? 64 : n + n / 2, bytes;
    if (!specd_mul_ok(cap, 5 * sizeof(int32_t), &bytes)) return 0;
    int32_t *block = specd_alloc(bytes);
    if (!block) return 0;
    specd_free(s->id);
    s->id = block;
    s->prev = block + cap;
    s->next = block + 2 * cap;
    s->rank = block + 3 * cap;
    s->merged = block + 4 * cap;
    s->cap = cap;
    return 1;
}

/* Linear path: symbols are a compact array; rank[i] is the rank of (id[i], id[i+1]). */
static size_t merge_linear(const specd_tokenizer *t, specd_bpe_scratch *s, size_t n) {
    int32_t *id = s->id, *rank = s->rank, *merged = s->merged;
    for (size_t i = 0; i + 1 < n; i++) {
        specd_tok_merge m = specd_tok_merge_find(t, id[i], id[i + 1]);
        rank[i] = m.rank < 0 ? INT32_MAX : m.rank;
        merged[i] = m.result;
    }
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        id[best] = merged[best];
        size_t tail = n - best - 2; /* symbols after the absorbed one */
        memmove(&id[best + 1], &id[best + 2], tail * sizeof *id);
        memmove(&rank[best + 1], &rank[best + 2], tail * sizeof *rank);
        memmove(&merged[best + 1], &merged[best + 2], tail * sizeof *merged);
        n--;
        if (best > 0) {
            specd_tok_merge m = specd_tok_merge_find(t, id[best - 1], id[best]);
            rank[best - 1] = m.rank < 0 ? INT32_MAX : m.rank;
            merged[best - 1] = m.result;
        }
        if (best + 1 < n) {
            specd_tok_merge m = specd_tok_merge_find(t, id[best], id[best + 1]);
            rank[best] = m.rank < 0 ? INT32_MAX : m.rank;
            merged[best] = m.result;
        } else {
            rank[best] = INT32_MAX;
        }
    }
    return n;
}

static void push_pair(const specd_tokenizer *t, specd_bpe_scratch *s, size_t *hn, int32_t left,
                      int32_t right) {
    if (left < 0 || right < 0) return;
    specd_tok_merge m = specd_tok_merge_find(t, s->id[left], s->id[right]);
    if (m.rank < 0) return;
    cand c = {m.rank, left, right, s->id[left], s->id[right]};
    heap_push((cand *)s->heap, hn, c);
}

/* Heap path; returns the number of symbols left, compacted to the front of id[]. */
static size_t merge_heap(const specd_tokenizer *t, specd_bpe_scratch *s, size_t n) {
    int32_t *id = s->id, *prev = s->prev, *next = s->next;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, s, &hn, (int32_t)i, (int32_t)i + 1);
    cand *h = (cand *)s->heap;
    while (hn > 0) {
        cand c = heap_pop(h, &hn);
        if (id[c.left] != c.left_id || id[c.right] != c.right_id || next[c.left] != c.right)
            continue; /* a neighbour merged since this pair was queued */
        specd_tok_merge m = specd_tok_merge_find(t, c.left_id, c.right_id);
        id[c.left] = m.result;
        id[c.right] = -2; /* absorbed */
        next[c.left] = next[c.right];
        if (next[c.right] >= 0) prev[next[c.right]] = c.left;
        push_pair(t, s, &hn, prev[c.left], c.left);
        push_pair(t, s, &hn, c.left, next[c.left]);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) id[k++] = id[i];
    return k;
}

specd_status specd_bpe_word(const specd_tokenizer *t, specd_bpe_scratch *s, const uint8_t *bytes,
                            size_t n, int exact, size_t heap_threshold, int32_t *out,
                            size_t *n_added, specd_error *err) {
    if (n == 0) {
        *n_added = 0;
        return SPECD_OK;
    }
    if (n == 1) { /* most digits and punctuation: no merging to do */
        int32_t id = t->byte_token[bytes[0]];
        if (id < 0 && exact)
            return specd_fail(err, SPECD_E_UNSUPPORTED, "byte 0x%02X has no token in the vocab",
                              bytes[0]);
        if (id >= 0) out[0] = id;
        *n_added = id >= 0;
        return SPECD_OK;
    }
    if (!reserve(s, n)) return specd_fail(err, SPECD_E_NOMEM, "BPE scratch for %zu bytes", n);
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_token[bytes[i]];
        if (id < 0 && exact)
            return specd_fail(err, SPECD_E_UNSUPPORTED, "byte 0x%02X has no token in the vocab",
                              bytes[i]);
        s->id[i] = id; /* -1: never merges, emits nothing (llama.cpp drops such bytes) */
    }
    size_t k;
    if (n <= heap_threshold) {
        k = merge_linear(t, s, n);
    } else {
        /* Each merge pushes at most two pairs, on top of the n - 1 initial ones. */
        size_t need = 3 * n;
        if (need > s->heap_cap &&
            !specd_tok_grow(&s->heap, &s->heap_cap, need, sizeof(cand)))
            return specd_fail(err, SPECD_E_NOMEM, "BPE queue for %zu bytes", n);
        k = merge_heap(t, s, n);
    }
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (s->id[i] >= 0) out[m++] = s->id[i];
    *n_added = m;
    return SPECD_OK;
}
