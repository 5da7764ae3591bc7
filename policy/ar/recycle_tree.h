/* Token Recycling's draft tree: a static template of rank paths, expanded breadth-first over the
 * adjacency table (recycle_table.h) from the pending token. */
#ifndef SPECD_POLICY_AR_RECYCLE_TREE_H
#define SPECD_POLICY_AR_RECYCLE_TREE_H

#include <stdint.h>

#include "policy/ar/recycle_table.h"

enum { SPECD_RECYCLE_MAX_NODES = 256 };

/* Node i drafts the rank[i]-th successor (0 = best) of its parent's token: parent[i] is an
 * earlier node or -1 (the pending token). Breadth-first order: depth[] never decreases, and
 * siblings come in rank order. */
typedef struct specd_recycle_template {
    int32_t n;
    int32_t parent[SPECD_RECYCLE_MAX_NODES];
    uint8_t rank[SPECD_RECYCLE_MAX_NODES];
    uint8_t depth[SPECD_RECYCLE_MAX_NODES];
} specd_recycle_template;

/* The n_nodes-node template (n_nodes <= SPECD_RECYCLE_MAX_NODES) no deeper than max_depth whose
 * paths are the likeliest under a fixed model: the successor of rank r is the target's next
 * token with a probability that falls with r (about 0.55 for the best, 0.15 for the second, 0.03
 * for the eighth) at every depth, independently; a path's chance is the product along it, and
 * the nodes are taken best first (a child is never likelier than its parent, so every prefix is
 * a tree). With k = 8, 80 nodes and depth 6 this gives the paper's shape: 8 children at the root,
 * most branching on the best paths, depth counts about 8, 20, 25, 14, 6, 7. Nodes use ranks
 * below k only. Returns out->n (fewer than n_nodes only when k and max_depth allow no more). */
int32_t specd_recycle_template_build(int32_t n_nodes, int32_t max_depth, int32_t k,
                                     specd_recycle_template *out);

/* The tree size a verified row's cost calls for: the N <= max_nodes (at least 1) that maximises
 * the expected tokens per step over its cost, (1 + the N likeliest paths' chances) /
 * (1 + row_cost N), in the same model; row_cost is one more row's cost relative to a one-row
 * (plain) step. */
int32_t specd_recycle_nodes_for_cost(double row_cost, int32_t max_nodes, int32_t max_depth,
                                     int32_t k);

/* Expands tpl from `pending` over t: a node whose parent was dropped, or whose parent token's
 * entry has no successor of its rank (an empty entry, or one already a sibling's), is dropped
 * with its subtree. Writes the kept nodes (at most max_nodes, none deeper than max_depth) in
 * template order as parent[] (indices into the output, -1 = the pending token) and token[];
 * returns their count. */
int32_t specd_recycle_expand(const specd_recycle_template *tpl, const specd_recycle_table *t,
                             int32_t pending, int32_t max_nodes, int32_t max_depth,
                             int32_t *parent, int32_t *token);

#endif
