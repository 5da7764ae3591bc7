/* Token Recycling's draft tree (recycle_tree.h). */
#include "policy/ar/recycle_tree.h"

/* The chance the rank-r successor is the target's next token, in the template's model. The
 * values give the paper's 80-node tree its shape (recycle_tree.h); past rank 7 they keep
 * falling as 1 / (r + 1). */
static double rank_weight(int32_t r) {
    static const double w[8] = {0.55, 0.15, 0.08, 0.06, 0.045, 0.035, 0.03, 0.025};
    return r < 8 ? w[r] : 0.2 / (double)(r + 1);
}

typedef struct candidate {
    int32_t parent; /* index into the chosen nodes, or -1 */
    int32_t rank, depth;
    double score;   /* the path's chance */
} candidate;

/* The n_nodes likeliest paths no deeper than max_depth, best first, into chosen[]; returns how
 * many there are (fewer when k and max_depth allow no more). */
static int32_t best_first(int32_t n_nodes, int32_t max_depth, int32_t k, candidate *chosen) {
    enum { N = SPECD_RECYCLE_MAX_NODES };
    if (n_nodes > N) n_nodes = N;
    if (max_depth > 255) max_depth = 255;
    if (n_nodes < 1 || max_depth < 1 || k < 1) return 0;
    /* every chosen node offers its next sibling and its first child */
    candidate front[2 * N + 1];
    int32_t n_front = 1, n = 0;
    front[0] = (candidate){.parent = -1, .rank = 0, .depth = 1, .score = rank_weight(0)};
    while (n < n_nodes && n_front > 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < n_front; i++)
            if (front[i].score > front[best].score) best = i;
        candidate c = front[best];
        front[best] = front[--n_front];
        chosen[n++] = c;
        double above = c.parent < 0 ? 1.0 : chosen[c.parent].score;
        if (c.rank + 1 < k)
            front[n_front++] = (candidate){.parent = c.parent, .rank = c.rank + 1,
                                           .depth = c.depth,
                                           .score = above * rank_weight(c.rank + 1)};
        if (c.depth < max_depth)
            front[n_front++] = (candidate){.parent = n - 1, .rank = 0, .depth = c.depth + 1,
                                           .score = c.score * rank_weight(0)};
    }
    return n;
}

int32_t specd_recycle_nodes_for_cost(double row_cost, int32_t max_nodes, int32_t max_depth,
                                     int32_t k) {
    candidate chosen[SPECD_RECYCLE_MAX_NODES];
    int32_t n = best_first(max_nodes, max_depth, k, chosen), best = n > 0 ? 1 : 0;
    double expect = 1.0, best_rate = 0.0; /* tokens a step emits: the bonus plus the drafts */
    for (int32_t i = 0; i < n; i++) {
        expect += chosen[i].score;
        double rate = expect / (1.0 + row_cost * (double)(i + 1));
        if (rate > best_rate) {
            best_rate = rate;
            best = i + 1;
        }
    }
    return best;
}

int32_t specd_recycle_template_build(int32_t n_nodes, int32_t max_depth, int32_t k,
                                     specd_recycle_template *out) {
    enum { N = SPECD_RECYCLE_MAX_NODES };
    candidate chosen[N];
    int32_t n = best_first(n_nodes, max_depth, k, chosen);
    /* breadth first: the root's children, then each node's children in turn. Siblings were
     * chosen in rank order (a sibling is offered only after the one before it), so keeping the
     * choice order among them keeps ranks ascending. */
    int32_t order[N], new_index[N];
    int32_t n_out = 0;
    for (int32_t q = -1, head = 0; q < n; q = head < n_out ? order[head++] : n) {
        for (int32_t i = 0; i < n; i++)
            if (chosen[i].parent == q) {
                new_index[i] = n_out;
                order[n_out++] = i;
            }
    }
    for (int32_t j = 0; j < n_out; j++) {
        const candidate *c = &chosen[order[j]];
        out->parent[j] = c->parent < 0 ? -1 : new_index[c->parent];
        out->rank[j] = (uint8_t)c->rank;
        out->depth[j] = (uint8_t)c->depth;
    }
    out->n = n_out;
    return n_out;
}

int32_t specd_recycle_expand(const specd_recycle_template *tpl, const specd_recycle_table *t,
                             int32_t pending, int32_t max_nodes, int32_t max_depth,
                             int32_t *parent, int32_t *token) {
    int32_t at[SPECD_RECYCLE_MAX_NODES]; /* template node -> output node, or -1 (dropped) */
    int32_t n = 0;
    for (int32_t i = 0; i < tpl->n && n < max_nodes; i++) {
        at[i] = -1;
        int32_t p = tpl->parent[i];
        if (tpl->depth[i] > max_depth || (p >= 0 && at[p] < 0)) continue;
        int32_t out_parent = p < 0 ? -1 : at[p];
        const int32_t *entry =
            specd_recycle_table_entry(t, out_parent < 0 ? pending : token[out_parent]);
        if (!entry || tpl->rank[i] >= t->k) continue;
        int32_t tok = entry[tpl->rank[i]];
        if (tok < 0) continue;
        /* siblings are contiguous in breadth-first order: a repeated id would verify twice */
        int32_t s = n - 1;
        while (s >= 0 && parent[s] == out_parent && token[s] != tok) s--;
        if (s >= 0 && parent[s] == out_parent) continue;
        at[i] = n;
        parent[n] = out_parent;
        token[n++] = tok;
    }
    return n;
}
