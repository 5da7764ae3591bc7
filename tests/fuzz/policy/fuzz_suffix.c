/* Fuzz target for suffix decoding's structures (policy/ar/suffix_tree.c, suffix_cache.c): the
 * bytes are a program of operations on one request's trie (append, pop, finish the request into
 * the global cache), the cache (insert, evict) and speculation from both. After each operation
 * the invariants hold: every count positive and consistent with its children and parent, the
 * root's count the tokens held, the cache within its request and byte bounds with its bytes
 * accounted, and every speculation a tree within the asked bounds whose probabilities fall along
 * each path and sum to its score. Seeds: tests/fuzz/corpus/fuzz_suffix. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/ar/suffix_cache.h"
#include "policy/ar/suffix_tree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_SEQ = 512 };

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static uint8_t next(reader *r) {
    if (r->n == 0) return 0;
    r->n--;
    return *r->p++;
}

static void check_draft(const specd_suffix_draft *d, const specd_suffix_spec_params *p) {
    int32_t cap = p->max_nodes < SPECD_SUFFIX_MAX_NODES ? p->max_nodes : SPECD_SUFFIX_MAX_NODES;
    if (d->n < 0 || d->n > cap) abort();
    if (d->n > 0 && d->n > (int32_t)((double)d->match_len * p->spec_factor + p->spec_offset + 1e-6))
        abort();
    int32_t depth[SPECD_SUFFIX_MAX_NODES];
    double score = 0;
    for (int32_t i = 0; i < d->n; i++) {
        int32_t par = d->parent[i];
        if (par < -1 || par >= i) abort();
        depth[i] = par < 0 ? 1 : depth[par] + 1;
        if (depth[i] > p->max_depth) abort();
        if (!(d->prob[i] >= p->min_prob) || d->prob[i] > 1.0f) abort();
        if (par >= 0 && d->prob[i] > d->prob[par]) abort();
        if (!p->use_tree && par != i - 1) abort();
        score += d->prob[i];
    }
    if (fabs(score - d->score) > 1e-3 * (1 + score)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    int32_t depth = 1 + next(&r) % 8, vocab = 2 + next(&r) % 15;
    int32_t max_requests = 1 + next(&r) % 16;
    /* small: evictions come early, and checking every node after each operation stays cheap */
    size_t max_bytes = ((size_t)64 << 10) + (size_t)next(&r) * 256;
    specd_suffix_tree *local = NULL;
    specd_suffix_cache *cache = NULL;
    if (specd_suffix_tree_create(depth, &local, NULL) != SPECD_OK) abort();
    if (specd_suffix_cache_create(depth, max_requests, max_bytes, &cache, NULL) != SPECD_OK) abort();
    int32_t seq[MAX_SEQ], req[MAX_SEQ], parent[SPECD_SUFFIX_MAX_NODES],
        token[SPECD_SUFFIX_MAX_NODES];
    float prob[SPECD_SUFFIX_MAX_NODES];
    int64_t n_seq = 0, n_ops = 0;
    while (r.n > 0) {
        uint8_t op = next(&r) % 6;
        switch (op) {
        case 0: /* the request grows */
            if (n_seq < MAX_SEQ) {
                seq[n_seq] = next(&r) % vocab;
                if (specd_suffix_tree_append(local, seq[n_seq], NULL) == SPECD_OK) n_seq++;
            }
            break;
        case 1: /* a rollback */
            for (int k = next(&r) % 4; k >= 0 && n_seq > 0; k--)
                specd_suffix_tree_pop(local, seq, n_seq--);
            break;
        case 2: /* the request ends: into the cache, out of its own trie */
            if (specd_suffix_cache_insert(cache, seq, n_seq, NULL) != SPECD_OK) abort();
            specd_suffix_tree_end_sequence(local);
            specd_suffix_tree_remove(local, seq, n_seq);
            if (specd_suffix_tree_nodes(local) != 1) abort();
            n_seq = 0;
            break;
        case 3:
            specd_suffix_cache_evict_oldest(cache);
            break;
        case 4: { /* another request, whole */
            int64_t n = next(&r) % 64;
            for (int64_t i = 0; i < n; i++) req[i] = next(&r) % vocab;
            if (specd_suffix_cache_insert(cache, req, n, NULL) != SPECD_OK) abort();
            break;
        }
        default: { /* speculation on the request so far (or a context of its own) */
            uint8_t how = next(&r);
            specd_suffix_spec_params p = {.max_nodes = 1 + next(&r) % 40,
                                          .max_depth = 1 + next(&r) % 12,
                                          .spec_factor = (float)(next(&r) % 8) * 0.5f,
                                          .spec_offset = (float)(next(&r) % 8) - 2.0f,
                                          .min_prob = (float)(next(&r) % 11) * 0.1f,
                                          .use_tree = how & 1};
            const int32_t *ctx = seq;
            int64_t n = n_seq;
            if (how & 2) {
                n = next(&r) % 32;
                for (int64_t i = 0; i < n; i++) req[i] = next(&r) % vocab;
                ctx = req;
            }
            specd_suffix_draft d = {.parent = parent, .token = token, .prob = prob};
            specd_suffix_tree_speculate(local, ctx, n, &p, &d);
            check_draft(&d, &p);
            specd_suffix_cache_speculate(cache, ctx, n, &p, &d);
            check_draft(&d, &p);
            break;
        }
        }
        /* a full check walks every node: after each of the first operations that change
         * something, then every 32nd (a broken invariant stays broken) and at the end */
        n_ops++;
        if ((op != 5 && (n_ops < 64 || n_ops % 32 == 0)) || r.n == 0)
            if (!specd_suffix_tree_check(local) ||
                specd_suffix_tree_count(local, SPECD_SUFFIX_ROOT) != n_seq ||
                !specd_suffix_cache_check(cache))
                abort();
        specd_suffix_cache_stats st;
        specd_suffix_cache_stats_get(cache, &st);
        if (st.bytes > max_bytes || st.n_requests > max_requests) abort();
    }
    specd_suffix_cache_destroy(cache);
    specd_suffix_tree_destroy(local);
    return 0;
}
