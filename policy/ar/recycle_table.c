/* Token Recycling's adjacency table (recycle_table.h). */
#include "policy/ar/recycle_table.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <string.h>

/* The extra words next to the public struct: which entries hold prompt bigrams, not rankings. */
typedef struct table_impl {
    specd_recycle_table pub; /* first: the public pointer is this one */
    /* per token: 0 when its entry is empty or the target's top-k, else the seed call that wrote
     * it (a later prompt's bigrams replace an earlier one's; the target's rows replace both) */
    uint32_t *seed_call;
    uint32_t n_seed_calls;
} table_impl;

specd_status specd_recycle_table_create(int32_t n_vocab, int32_t k, specd_recycle_table **out,
                                        specd_error *err) {
    if (n_vocab < 1 || k < 1 || k > SPECD_RECYCLE_MAX_K)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "recycle table: n_vocab %d, k %d (want n_vocab >= 1, k in 1..%d)",
                          n_vocab, k, SPECD_RECYCLE_MAX_K);
    table_impl *t = specd_alloc_array(1, sizeof *t);
    size_t cells = (size_t)n_vocab * (size_t)k;
    int32_t *next = t ? specd_alloc_array(cells, sizeof *next) : NULL;
    uint32_t *seed_call = next ? specd_alloc_array((size_t)n_vocab, sizeof *seed_call) : NULL;
    if (!seed_call) {
        specd_free(next);
        specd_free(t);
        return specd_fail(err, SPECD_E_NOMEM, "recycle table: out of memory (%d x %d ids)",
                          n_vocab, k);
    }
    memset(next, 0xff, cells * sizeof *next); /* every id -1 */
    t->pub = (specd_recycle_table){.n_vocab = n_vocab, .k = k, .next = next};
    t->seed_call = seed_call;
    *out = &t->pub;
    return SPECD_OK;
}

void specd_recycle_table_destroy(specd_recycle_table *pub) {
    if (!pub) return;
    table_impl *t = (table_impl *)(void *)pub;
    specd_free(t->seed_call);
    specd_free(pub->next);
    specd_free(t);
}

const int32_t *specd_recycle_table_entry(const specd_recycle_table *t, int32_t token) {
    if (token < 0 || token >= t->n_vocab) return NULL;
    return t->next + (size_t)token * (size_t)t->k;
}

/* Puts x[i] into the sorted buffer (vals descending; an equal value stays behind the earlier,
 * lower index). m: filled so far. */
static int32_t insert(float *vals, int32_t *ids, int32_t m, int32_t k, float v, int32_t i) {
    int32_t at = m < k ? m++ : k - 1;
    while (at > 0 && v > vals[at - 1]) {
        vals[at] = vals[at - 1];
        ids[at] = ids[at - 1];
        at--;
    }
    vals[at] = v;
    ids[at] = i;
    return m;
}

int32_t specd_recycle_topk(const float *x, int32_t n, int32_t k, int32_t *ids) {
    enum { BLOCK = 32 };
    float vals[SPECD_RECYCLE_MAX_K];
    int32_t m = 0, i = 0;
    /* fill the buffer, then test whole blocks against its least value: once the buffer holds
     * large logits nearly every block has nothing above it, and that test is a branch-free
     * reduction the compiler vectorises */
    for (; i < n && m < k; i++) m = insert(vals, ids, m, k, x[i], i);
    for (; i + BLOCK <= n; i += BLOCK) {
        const float thr = vals[k - 1];
        int any = 0;
        for (int32_t j = 0; j < BLOCK; j++) any |= x[i + j] > thr;
        if (!any) continue;
        for (int32_t j = 0; j < BLOCK; j++)
            if (x[i + j] > vals[k - 1]) m = insert(vals, ids, m, k, x[i + j], i + j);
    }
    for (; i < n; i++)
        if (x[i] > vals[k - 1]) m = insert(vals, ids, m, k, x[i], i);
    return m;
}

void specd_recycle_table_observe(specd_recycle_table *pub, const int32_t *tokens, int32_t n_rows,
                                 const float *logits, int64_t row_stride, int32_t n_vocab) {
    table_impl *t = (table_impl *)(void *)pub;
    int32_t width = n_vocab < pub->n_vocab ? n_vocab : pub->n_vocab; /* ids the table can hold */
    for (int32_t r = 0; r < n_rows; r++) {
        int32_t tok = tokens[r];
        if (tok < 0 || tok >= pub->n_vocab || width < 1) continue;
        int32_t *entry = pub->next + (size_t)tok * (size_t)pub->k;
        int32_t m = specd_recycle_topk(logits + (size_t)r * (size_t)row_stride, width, pub->k,
                                       entry);
        for (int32_t j = m; j < pub->k; j++) entry[j] = -1;
        t->seed_call[tok] = 0;
    }
}

void specd_recycle_table_seed(specd_recycle_table *pub, const int32_t *tokens, int64_t n) {
    table_impl *t = (table_impl *)(void *)pub;
    uint32_t call = ++t->n_seed_calls;
    if (call == 0) call = t->n_seed_calls = 1; /* wrapped: 0 means "not seeded" */
    for (int64_t i = n - 2; i >= 0; i--) { /* latest occurrence first */
        int32_t tok = tokens[i], succ = tokens[i + 1];
        if (tok < 0 || tok >= pub->n_vocab || succ < 0 || succ >= pub->n_vocab) continue;
        int32_t *entry = pub->next + (size_t)tok * (size_t)pub->k;
        if (t->seed_call[tok] != call) {
            if (entry[0] >= 0 && t->seed_call[tok] == 0) continue; /* the target's ranking */
            for (int32_t j = 0; j < pub->k; j++) entry[j] = -1;  /* empty, or older bigrams */
            t->seed_call[tok] = call;
        }
        int32_t j = 0;
        while (j < pub->k && entry[j] >= 0 && entry[j] != succ) j++;
        if (j < pub->k && entry[j] < 0) entry[j] = succ;
    }
}
