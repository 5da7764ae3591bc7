/* Suffix decoding's global cache: one suffix trie (suffix_tree.h) over the token sequences of
 * requests that ended, which every sequence of a spec (or of a specd-drafter process) reads.
 *
 * Bounded twice: at most max_requests requests and at most max_bytes bytes in all (the trie's
 * capacity, the stored tokens a request's removal needs, the bookkeeping). The oldest request is
 * evicted first (its counts removed) until a new one fits; a request longer than what fits on its
 * own is kept as far as it fits (its first tokens). The trie's capacity does not shrink as
 * requests leave; when every request has gone and a new one still does not fit, the trie is made
 * anew.
 *
 * Thread-safe: a mutex guards every call. specd's own callers never call it from two threads at
 * once (a spec is driven by one thread, specd-drafter's service loop is one thread), so the lock
 * is uncontended there; a host that shares one across threads may. */
#ifndef SPECD_POLICY_AR_SUFFIX_CACHE_H
#define SPECD_POLICY_AR_SUFFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "policy/ar/suffix_tree.h"
#include "specd/status.h"

typedef struct specd_suffix_cache specd_suffix_cache;

typedef struct specd_suffix_cache_stats {
    int64_t n_requests; /* cached now */
    int64_t n_tokens;   /* their tokens */
    int64_t n_nodes;    /* the trie's live nodes */
    size_t bytes;       /* all it holds, <= max_bytes */
    int64_t n_evicted;  /* requests evicted so far */
    int64_t n_lookups;  /* speculations asked */
    int64_t n_hits;     /* ... that proposed at least one token */
} specd_suffix_cache_stats;

/* max_depth as the trie's; max_requests >= 1; max_bytes must hold the bookkeeping of
 * max_requests requests and a small trie (SPECD_E_INVALID_ARG naming the least otherwise).
 * Caller owns *out. */
specd_status specd_suffix_cache_create(int32_t max_depth, int32_t max_requests, size_t max_bytes,
                                       specd_suffix_cache **out, specd_error *err);
void specd_suffix_cache_destroy(specd_suffix_cache *c);

/* Caches a request that ended, tokens[0..n) (copied), evicting the oldest as the bounds need.
 * Fails only when memory runs out (the cache is then as before, less any evicted requests). */
specd_status specd_suffix_cache_insert(specd_suffix_cache *c, const int32_t *tokens, int64_t n,
                                       specd_error *err);
/* Evicts the oldest request; 0 when there was none. */
int specd_suffix_cache_evict_oldest(specd_suffix_cache *c);
/* specd_suffix_tree_speculate on the cache's trie. */
void specd_suffix_cache_speculate(specd_suffix_cache *c, const int32_t *ctx, int64_t n,
                                  const specd_suffix_spec_params *p, specd_suffix_draft *out);
void specd_suffix_cache_stats_get(specd_suffix_cache *c, specd_suffix_cache_stats *out);
/* specd_suffix_tree_check on the trie, and the byte and request bounds (tests, the fuzz target). */
int specd_suffix_cache_check(specd_suffix_cache *c);

#endif
