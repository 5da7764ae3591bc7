/* A depth-bounded suffix trie with occurrence counts, the structure of suffix decoding (policy
 * `suffix`, policy/ar/suffix.c).
 *
 * The trie holds every substring of length <= max_depth of the sequences appended to it. A node
 * stands for one substring s; its count is the number of occurrences of s across those sequences
 * (the root's is the number of tokens, the empty string's positions). A child t of s therefore has
 * the empirical probability count(s t) / count(s) of following s; the occurrence at a sequence's
 * end, which has no continuation, is counted too, as suffix decoding does.
 *
 * Sequences are appended token by token: the trie keeps the nodes of the current sequence's
 * suffixes (its "open" nodes) so a token costs O(max_depth) child look-ups. A whole sequence can
 * later be removed (the global cache's eviction), and the current sequence's last token popped
 * (a rollback). Children are found through one open-addressing hash table keyed by (parent,
 * token) and enumerated through sibling lists.
 *
 * Memory: up to max_depth nodes per token on text that never repeats, far fewer on text that
 * does; 24 bytes per node plus 8..16 bytes of hash table. Every byte comes from specd_alloc and
 * specd_suffix_tree_bytes reports them; a byte limit (set_max_bytes) makes growth fail instead of
 * exceeding it.
 *
 * Not thread-safe: its owner serializes calls (suffix_cache.h holds a mutex). */
#ifndef SPECD_POLICY_AR_SUFFIX_TREE_H
#define SPECD_POLICY_AR_SUFFIX_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "specd/status.h"

/* the deepest trie the option tables allow */
#define SPECD_SUFFIX_MAX_DEPTH 64

typedef struct specd_suffix_tree specd_suffix_tree;

/* max_depth: 1..SPECD_SUFFIX_MAX_DEPTH. Caller owns *out (specd_suffix_tree_destroy). */
specd_status specd_suffix_tree_create(int32_t max_depth, specd_suffix_tree **out,
                                      specd_error *err);
void specd_suffix_tree_destroy(specd_suffix_tree *t);

/* Growth past max_bytes (total, as specd_suffix_tree_bytes counts) fails with SPECD_E_NOMEM;
 * 0 = unbounded (the default). Lowering it below the current size frees nothing. */
void specd_suffix_tree_set_max_bytes(specd_suffix_tree *t, size_t max_bytes);

/* Appends token to the current sequence (a new one after create or end_sequence). On failure
 * (SPECD_E_NOMEM: no memory, or the byte limit) the trie is unchanged. */
specd_status specd_suffix_tree_append(specd_suffix_tree *t, int32_t token, specd_error *err);
/* Closes the current sequence: the next append starts another, sharing no suffix with it. */
void specd_suffix_tree_end_sequence(specd_suffix_tree *t);
/* Removes the current sequence's last token; tokens[0..n) is that sequence as appended (n >= 1;
 * the trie reads its last max_depth tokens). */
void specd_suffix_tree_pop(specd_suffix_tree *t, const int32_t *tokens, int64_t n);
/* Removes a closed sequence tokens[0..n), appended earlier exactly so, with all its counts. */
void specd_suffix_tree_remove(specd_suffix_tree *t, const int32_t *tokens, int64_t n);

/* Nodes are ids >= 0; the root is 0. */
#define SPECD_SUFFIX_ROOT 0
/* The node of s[0..n), or -1 when s does not occur (or n > max_depth). */
int32_t specd_suffix_tree_find(const specd_suffix_tree *t, const int32_t *s, int64_t n);
/* The longest suffix of ctx[0..n) that occurs, at most max_depth long: its length m; nodes[L]
 * (when nodes is not NULL, max_depth + 1 entries) receives the node of ctx's suffix of length L
 * for L = 0..m (every shorter suffix of an occurring string occurs too). */
int32_t specd_suffix_tree_match(const specd_suffix_tree *t, const int32_t *ctx, int64_t n,
                                int32_t *nodes);
int32_t specd_suffix_tree_count(const specd_suffix_tree *t, int32_t node);
int32_t specd_suffix_tree_token(const specd_suffix_tree *t, int32_t node);
/* Children: first, then next sibling, -1 at the end (in no particular order). */
int32_t specd_suffix_tree_first_child(const specd_suffix_tree *t, int32_t node);
int32_t specd_suffix_tree_next_sibling(const specd_suffix_tree *t, int32_t node);

int32_t specd_suffix_tree_max_depth(const specd_suffix_tree *t);
int64_t specd_suffix_tree_nodes(const specd_suffix_tree *t); /* live nodes, the root included */
size_t specd_suffix_tree_bytes(const specd_suffix_tree *t);  /* every byte it holds */

/* Checks the trie's invariants (tests and the fuzz target): every live node but the root has a
 * positive count, at least the sum of its children's and at most its parent's, is found by its
 * (parent, token) and lies within max_depth; the live count is right. 1 when they hold. */
int specd_suffix_tree_check(const specd_suffix_tree *t);

/* the most nodes one speculation proposes (a larger max_nodes is clamped to it) */
#define SPECD_SUFFIX_MAX_NODES 128

/* What a speculation may propose. */
typedef struct specd_suffix_spec_params {
    int32_t max_nodes;    /* most nodes in all (at most SPECD_SUFFIX_MAX_NODES) */
    int32_t max_depth;    /* deepest node below the pending token (children of it: depth 1) */
    float spec_factor;    /* at most floor(match_len * spec_factor + spec_offset) nodes */
    float spec_offset;
    float min_prob;       /* keep nodes whose path probability is >= this */
    int32_t use_tree;     /* 1: best-first tree; 0: the most frequent child each time (a chain) */
} specd_suffix_spec_params;

/* A speculation: nodes in topological order, caller-owned arrays of params.max_nodes entries. */
typedef struct specd_suffix_draft {
    int32_t *parent; /* -1: a child of the pending token */
    int32_t *token;
    float *prob;     /* each node's path probability */
    int32_t n;
    int32_t match_len; /* the context suffix it continues */
    float score;       /* sum of prob: the expected number of accepted tokens */
} specd_suffix_draft;

/* Continues the longest-scoring suffix of ctx[0..n): for every match length L with a node, grows
 * the draft from that node (children by count, path probability >= min_prob, at most
 * min(max_nodes, L * spec_factor + spec_offset) nodes) and keeps the one of highest score (the
 * longer match on a tie). out->n = 0 when nothing qualifies. */
void specd_suffix_tree_speculate(const specd_suffix_tree *t, const int32_t *ctx, int64_t n,
                                 const specd_suffix_spec_params *p, specd_suffix_draft *out);

#endif
