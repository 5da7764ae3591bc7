/* Suffix decoding's global cache over requests that ended (suffix_cache.h). */
#include "policy/ar/suffix_cache.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <pthread.h>
#include <string.h>

typedef struct cached {
    int32_t *tokens; /* what was appended to the trie: its removal walks them again */
    int64_t n;       /* of n_alloc */
    int64_t n_alloc;
} cached;

struct specd_suffix_cache {
    pthread_mutex_t lock;
    specd_suffix_tree *tree;
    int32_t max_depth, max_requests;
    size_t max_bytes, fixed; /* fixed: this struct and the ring */
    cached *ring;            /* max_requests slots, oldest at head */
    int32_t head, count;
    int64_t n_tokens;      /* in the trie */
    int64_t n_stored;      /* tokens in the copies (n_alloc summed) */
    int64_t pending;       /* the copy being inserted */
    int64_t n_evicted, n_lookups, n_hits;
};

static size_t token_bytes(const specd_suffix_cache *c) {
    return (size_t)(c->n_stored + c->pending) * sizeof(int32_t);
}

static size_t total_bytes(const specd_suffix_cache *c) {
    return c->fixed + token_bytes(c) + specd_suffix_tree_bytes(c->tree);
}

static int evict(specd_suffix_cache *c) {
    if (c->count == 0) return 0;
    cached *r = &c->ring[c->head];
    specd_suffix_tree_remove(c->tree, r->tokens, r->n);
    c->n_tokens -= r->n;
    c->n_stored -= r->n_alloc;
    specd_free(r->tokens);
    *r = (cached){0};
    c->head = (c->head + 1) % c->max_requests;
    c->count--;
    c->n_evicted++;
    return 1;
}

/* A trie of its first capacity: what an empty cache starts from. */
static specd_status fresh_tree(specd_suffix_cache *c, specd_error *err) {
    specd_suffix_tree *t = NULL;
    SPECD_TRY(specd_suffix_tree_create(c->max_depth, &t, err));
    specd_suffix_tree_destroy(c->tree);
    c->tree = t;
    return SPECD_OK;
}

specd_status specd_suffix_cache_create(int32_t max_depth, int32_t max_requests, size_t max_bytes,
                                       specd_suffix_cache **out, specd_error *err) {
    if (max_requests < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "suffix cache: %d requests (want >= 1)",
                          max_requests);
    specd_suffix_cache *c = specd_alloc_array(1, sizeof *c);
    if (!c) return specd_fail(err, SPECD_E_NOMEM, "suffix cache: out of memory");
    c->max_depth = max_depth;
    c->max_requests = max_requests;
    c->max_bytes = max_bytes;
    c->fixed = sizeof *c + (size_t)max_requests * sizeof(cached);
    specd_status st = fresh_tree(c, err);
    if (st != SPECD_OK) {
        specd_free(c);
        return st;
    }
    /* room for the bookkeeping, the empty trie and a few requests' growth */
    size_t least = c->fixed + 4 * specd_suffix_tree_bytes(c->tree);
    if (max_bytes < least) {
        specd_suffix_tree_destroy(c->tree);
        specd_free(c);
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "suffix cache: %zu bytes cannot hold %d requests' bookkeeping (want at "
                          "least %zu)", max_bytes, max_requests, least);
    }
    c->ring = specd_alloc_array((size_t)max_requests, sizeof *c->ring);
    if (!c->ring || pthread_mutex_init(&c->lock, NULL) != 0) {
        specd_suffix_tree_destroy(c->tree);
        specd_free(c->ring);
        specd_free(c);
        return specd_fail(err, SPECD_E_NOMEM, "suffix cache: out of memory");
    }
    *out = c;
    return SPECD_OK;
}

void specd_suffix_cache_destroy(specd_suffix_cache *c) {
    if (!c) return;
    while (evict(c)) {
    }
    specd_suffix_tree_destroy(c->tree);
    specd_free(c->ring);
    pthread_mutex_destroy(&c->lock);
    specd_free(c);
}

/* Appends tokens[0..n) (the copy being cached, counted in c->pending) as one sequence; returns
 * how many went in. An append that finds no room evicts the oldest and tries again (the sequence
 * being appended is not in the ring yet, and its own nodes hold counts of its own, so no eviction
 * frees them). */
static int64_t append_fitting(specd_suffix_cache *c, const int32_t *tokens, int64_t n) {
    specd_suffix_tree_end_sequence(c->tree);
    int64_t i = 0;
    while (i < n) {
        specd_suffix_tree_set_max_bytes(c->tree, c->max_bytes - c->fixed - token_bytes(c));
        if (specd_suffix_tree_append(c->tree, tokens[i], NULL) == SPECD_OK) i++;
        else if (!evict(c)) break;
    }
    specd_suffix_tree_end_sequence(c->tree);
    return i;
}

static specd_status insert_locked(specd_suffix_cache *c, const int32_t *tokens, int64_t n,
                                  specd_error *err) {
    if (n <= 0) return SPECD_OK;
    if (c->count == c->max_requests) evict(c);
    /* the tokens must fit beside the trie; what never will is left out */
    size_t need, sum;
    if (!specd_mul_ok((size_t)n, sizeof(int32_t), &need)) need = SIZE_MAX;
    while (c->count > 0 && (!specd_add_ok(total_bytes(c), need, &sum) || sum > c->max_bytes))
        evict(c);
    if (c->count == 0 && (!specd_add_ok(total_bytes(c), need, &sum) || sum > c->max_bytes))
        SPECD_TRY(fresh_tree(c, err));
    size_t room = c->max_bytes - total_bytes(c);
    if ((size_t)n > room / sizeof(int32_t)) n = (int64_t)(room / sizeof(int32_t));
    if (n <= 0) return SPECD_OK;
    int32_t *copy = specd_alloc_array((size_t)n, sizeof *copy);
    if (!copy) return specd_fail(err, SPECD_E_NOMEM, "suffix cache: out of memory");
    memcpy(copy, tokens, (size_t)n * sizeof *copy);
    c->pending = n;
    int64_t in = append_fitting(c, copy, n);
    c->pending = 0;
    if (in == 0) {
        specd_free(copy);
        return SPECD_OK;
    }
    /* the copy keeps its n tokens' bytes; only the first in are the trie's (and removed later) */
    int32_t slot = (c->head + c->count) % c->max_requests;
    c->ring[slot] = (cached){.tokens = copy, .n = in, .n_alloc = n};
    c->count++;
    c->n_tokens += in;
    c->n_stored += n;
    return SPECD_OK;
}

specd_status specd_suffix_cache_insert(specd_suffix_cache *c, const int32_t *tokens, int64_t n,
                                       specd_error *err) {
    pthread_mutex_lock(&c->lock);
    specd_status st = insert_locked(c, tokens, n, err);
    pthread_mutex_unlock(&c->lock);
    return st;
}

int specd_suffix_cache_evict_oldest(specd_suffix_cache *c) {
    pthread_mutex_lock(&c->lock);
    int any = evict(c);
    pthread_mutex_unlock(&c->lock);
    return any;
}

void specd_suffix_cache_speculate(specd_suffix_cache *c, const int32_t *ctx, int64_t n,
                                  const specd_suffix_spec_params *p, specd_suffix_draft *out) {
    pthread_mutex_lock(&c->lock);
    specd_suffix_tree_speculate(c->tree, ctx, n, p, out);
    c->n_lookups++;
    c->n_hits += out->n > 0;
    pthread_mutex_unlock(&c->lock);
}

void specd_suffix_cache_stats_get(specd_suffix_cache *c, specd_suffix_cache_stats *out) {
    pthread_mutex_lock(&c->lock);
    *out = (specd_suffix_cache_stats){.n_requests = c->count,
                                      .n_tokens = c->n_tokens,
                                      .n_nodes = specd_suffix_tree_nodes(c->tree),
                                      .bytes = total_bytes(c),
                                      .n_evicted = c->n_evicted,
                                      .n_lookups = c->n_lookups,
                                      .n_hits = c->n_hits};
    pthread_mutex_unlock(&c->lock);
}

int specd_suffix_cache_check(specd_suffix_cache *c) {
    pthread_mutex_lock(&c->lock);
    int64_t tokens = 0;
    int64_t alloc = 0;
    for (int32_t i = 0; i < c->count; i++) {
        const cached *r = &c->ring[(c->head + i) % c->max_requests];
        tokens += r->n;
        alloc += r->n_alloc;
    }
    int ok = alloc == c->n_stored && specd_suffix_tree_check(c->tree) && tokens == c->n_tokens &&
             c->count <= c->max_requests && total_bytes(c) <= c->max_bytes &&
             specd_suffix_tree_count(c->tree, SPECD_SUFFIX_ROOT) == c->n_tokens;
    pthread_mutex_unlock(&c->lock);
    return ok;
}
