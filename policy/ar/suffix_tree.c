/* The depth-bounded suffix trie of suffix decoding (suffix_tree.h). */
#include "policy/ar/suffix_tree.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <string.h>

#define NONE (-1)
#define FREED (-2) /* the parent of a node on the free list */

typedef struct tnode {
    int32_t token, count, parent;
    int32_t first_child, next_sibling, prev_sibling; /* next_sibling also links the free list */
} tnode;

struct specd_suffix_tree {
    int32_t max_depth;
    tnode *nodes;
    int32_t cap, used; /* allocated nodes; ids below used have been handed out */
    int32_t free_head;
    int64_t live;
    int32_t *slots; /* open addressing over (parent, token), NONE = empty; mask + 1 slots */
    uint32_t mask;
    size_t max_bytes;
    /* open[d]: the node of the current sequence's suffix of length d (d < n_open <= max_depth):
     * the nodes the next token extends */
    int32_t open[SPECD_SUFFIX_MAX_DEPTH];
    int32_t n_open;
};

static uint32_t slot_of(const specd_suffix_tree *t, int32_t parent, int32_t token) {
    uint64_t x = ((uint64_t)(uint32_t)parent << 32) | (uint32_t)token;
    x ^= x >> 33; /* murmur3's finalizer: parents and tokens are small, dense integers */
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x & t->mask;
}

static int32_t child_of(const specd_suffix_tree *t, int32_t parent, int32_t token) {
    for (uint32_t i = slot_of(t, parent, token);; i = (i + 1) & t->mask) {
        int32_t x = t->slots[i];
        if (x == NONE) return NONE;
        if (t->nodes[x].parent == parent && t->nodes[x].token == token) return x;
    }
}

static void slot_insert(specd_suffix_tree *t, int32_t x) {
    uint32_t i = slot_of(t, t->nodes[x].parent, t->nodes[x].token);
    while (t->slots[i] != NONE) i = (i + 1) & t->mask;
    t->slots[i] = x;
}

/* Deletion by backward shift (linear probing without tombstones): an entry after the hole moves
 * into it unless its home slot lies cyclically in (hole, entry]. */
static void slot_delete(specd_suffix_tree *t, int32_t x) {
    uint32_t i = slot_of(t, t->nodes[x].parent, t->nodes[x].token);
    while (t->slots[i] != x) i = (i + 1) & t->mask;
    for (uint32_t j = (i + 1) & t->mask; t->slots[j] != NONE; j = (j + 1) & t->mask) {
        const tnode *e = &t->nodes[t->slots[j]];
        uint32_t home = slot_of(t, e->parent, e->token);
        int stays = i < j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    t->slots[i] = NONE;
}

static uint32_t slots_for(int32_t cap) {
    uint32_t n = 16;
    while (n < 2u * (uint32_t)cap) n *= 2; /* load factor <= 1/2 */
    return n;
}

static size_t bytes_for(int32_t cap) {
    return sizeof(specd_suffix_tree) + (size_t)cap * sizeof(tnode) +
           (size_t)slots_for(cap) * sizeof(int32_t);
}

/* Makes room for need more nodes, within max_bytes. */
static specd_status reserve(specd_suffix_tree *t, int32_t need) {
    if (t->live + need <= t->cap) return SPECD_OK;
    if (t->live + need > INT32_MAX / 4) return SPECD_E_NOMEM;
    int32_t least = (int32_t)(t->live + need), want = t->cap * 2 > least ? t->cap * 2 : least;
    if (t->max_bytes) {
        if (bytes_for(least) > t->max_bytes) return SPECD_E_NOMEM;
        /* the largest capacity in [least, want] that fits */
        int32_t lo = least, hi = want;
        while (lo < hi) {
            int32_t mid = lo + (hi - lo + 1) / 2;
            if (bytes_for(mid) <= t->max_bytes) lo = mid;
            else hi = mid - 1;
        }
        want = lo;
    }
    tnode *nodes = specd_alloc_array((size_t)want, sizeof *nodes);
    uint32_t n_slots = slots_for(want);
    int32_t *slots = n_slots != t->mask + 1 ? specd_alloc_array(n_slots, sizeof *slots) : NULL;
    if (!nodes || (n_slots != t->mask + 1 && !slots)) {
        specd_free(nodes);
        specd_free(slots);
        return SPECD_E_NOMEM;
    }
    memcpy(nodes, t->nodes, (size_t)t->used * sizeof *nodes);
    specd_free(t->nodes);
    t->nodes = nodes;
    t->cap = want;
    if (slots) {
        specd_free(t->slots);
        t->slots = slots;
        t->mask = n_slots - 1;
        memset(slots, 0xff, (size_t)n_slots * sizeof *slots); /* NONE */
        for (int32_t x = 1; x < t->used; x++)
            if (t->nodes[x].parent != FREED) slot_insert(t, x);
    }
    return SPECD_OK;
}

static int32_t node_new(specd_suffix_tree *t, int32_t parent, int32_t token) {
    int32_t x = t->free_head;
    if (x != NONE) t->free_head = t->nodes[x].next_sibling;
    else x = t->used++;
    tnode *p = &t->nodes[parent];
    t->nodes[x] = (tnode){.token = token, .parent = parent, .first_child = NONE,
                          .next_sibling = p->first_child, .prev_sibling = NONE};
    if (p->first_child != NONE) t->nodes[p->first_child].prev_sibling = x;
    p->first_child = x;
    slot_insert(t, x);
    t->live++;
    return x;
}

static void node_free(specd_suffix_tree *t, int32_t x) {
    tnode *n = &t->nodes[x];
    if (n->prev_sibling != NONE) t->nodes[n->prev_sibling].next_sibling = n->next_sibling;
    else t->nodes[n->parent].first_child = n->next_sibling;
    if (n->next_sibling != NONE) t->nodes[n->next_sibling].prev_sibling = n->prev_sibling;
    slot_delete(t, x);
    n->parent = FREED;
    n->count = 0;
    n->next_sibling = t->free_head;
    t->free_head = x;
    t->live--;
}

/* Frees x and everything below it, deepest first. */
static void subtree_free(specd_suffix_tree *t, int32_t x) {
    int32_t top = x;
    for (;;) {
        while (t->nodes[x].first_child != NONE) x = t->nodes[x].first_child;
        int32_t up = t->nodes[x].parent;
        node_free(t, x);
        if (x == top) return;
        x = up;
    }
}

specd_status specd_suffix_tree_create(int32_t max_depth, specd_suffix_tree **out,
                                      specd_error *err) {
    if (max_depth < 1 || max_depth > SPECD_SUFFIX_MAX_DEPTH)
        return specd_fail(err, SPECD_E_INVALID_ARG, "suffix tree: depth %d (want 1..%d)",
                          max_depth, SPECD_SUFFIX_MAX_DEPTH);
    specd_suffix_tree *t = specd_alloc_array(1, sizeof *t);
    if (!t) return specd_fail(err, SPECD_E_NOMEM, "suffix tree: out of memory");
    t->max_depth = max_depth;
    t->free_head = NONE;
    t->cap = 64;
    t->nodes = specd_alloc_array((size_t)t->cap, sizeof *t->nodes);
    t->mask = slots_for(t->cap) - 1;
    t->slots = specd_alloc_array((size_t)t->mask + 1, sizeof *t->slots);
    if (!t->nodes || !t->slots) {
        specd_suffix_tree_destroy(t);
        return specd_fail(err, SPECD_E_NOMEM, "suffix tree: out of memory");
    }
    memset(t->slots, 0xff, ((size_t)t->mask + 1) * sizeof *t->slots);
    t->nodes[0] = (tnode){.token = NONE, .parent = NONE, .first_child = NONE,
                          .next_sibling = NONE, .prev_sibling = NONE};
    t->used = 1;
    t->live = 1;
    t->n_open = 1; /* open[0] = the root */
    *out = t;
    return SPECD_OK;
}

void specd_suffix_tree_destroy(specd_suffix_tree *t) {
    if (!t) return;
    specd_free(t->nodes);
    specd_free(t->slots);
    specd_free(t);
}

void specd_suffix_tree_set_max_bytes(specd_suffix_tree *t, size_t max_bytes) {
    t->max_bytes = max_bytes;
}

specd_status specd_suffix_tree_append(specd_suffix_tree *t, int32_t token, specd_error *err) {
    if (reserve(t, t->n_open) != SPECD_OK)
        return specd_fail(err, SPECD_E_NOMEM, "suffix tree: out of memory at %lld nodes",
                          (long long)t->live);
    /* deepest first: open[d + 1] is replaced only after it was extended */
    for (int32_t d = t->n_open - 1; d >= 0; d--) {
        int32_t c = child_of(t, t->open[d], token);
        if (c == NONE) c = node_new(t, t->open[d], token);
        t->nodes[c].count++;
        if (d + 1 < t->max_depth) t->open[d + 1] = c;
    }
    t->nodes[SPECD_SUFFIX_ROOT].count++;
    if (t->n_open < t->max_depth) t->n_open++;
    return SPECD_OK;
}

void specd_suffix_tree_end_sequence(specd_suffix_tree *t) { t->n_open = 1; }

void specd_suffix_tree_pop(specd_suffix_tree *t, const int32_t *tokens, int64_t n) {
    if (n < 1) return;
    /* ends[d]: the node of the suffix of length d ending at the popped token; the parent of
     * ends[d + 1] is the suffix of length d ending one token earlier: the open node after it */
    int32_t ends[SPECD_SUFFIX_MAX_DEPTH + 1];
    int32_t m = n < t->max_depth ? (int32_t)n : t->max_depth;
    for (int32_t d = 1; d <= m; d++) {
        ends[d] = d < t->n_open ? t->open[d] : specd_suffix_tree_find(t, tokens + n - d, d);
        if (ends[d] == NONE) return; /* not the sequence appended: leave the trie as it is */
    }
    for (int32_t d = 0; d < m; d++) t->open[d] = t->nodes[ends[d + 1]].parent;
    t->n_open = m;
    t->nodes[SPECD_SUFFIX_ROOT].count--;
    /* a node left without occurrences occurred only at the end: it has no children */
    for (int32_t d = 1; d <= m; d++)
        if (--t->nodes[ends[d]].count == 0) node_free(t, ends[d]);
}

void specd_suffix_tree_remove(specd_suffix_tree *t, const int32_t *tokens, int64_t n) {
    for (int64_t s = 0; s < n; s++) {
        t->nodes[SPECD_SUFFIX_ROOT].count--;
        int32_t x = SPECD_SUFFIX_ROOT;
        for (int64_t j = s; j < n && j - s < t->max_depth; j++) {
            int32_t c = child_of(t, x, tokens[j]);
            if (c == NONE) break; /* not appended as given: nothing more to take */
            if (--t->nodes[c].count == 0) {
                /* what is below it came from this suffix alone */
                subtree_free(t, c);
                break;
            }
            x = c;
        }
    }
}

int32_t specd_suffix_tree_find(const specd_suffix_tree *t, const int32_t *s, int64_t n) {
    if (n > t->max_depth) return NONE;
    int32_t x = SPECD_SUFFIX_ROOT;
    for (int64_t i = 0; i < n && x != NONE; i++) x = child_of(t, x, s[i]);
    return x;
}

int32_t specd_suffix_tree_match(const specd_suffix_tree *t, const int32_t *ctx, int64_t n,
                                int32_t *nodes) {
    int32_t m = 0;
    if (nodes) nodes[0] = SPECD_SUFFIX_ROOT;
    int64_t most = n < t->max_depth ? n : t->max_depth;
    for (int32_t len = 1; len <= most; len++) {
        int32_t x = specd_suffix_tree_find(t, ctx + n - len, len);
        if (x == NONE) break; /* a longer suffix contains this one: it cannot occur either */
        if (nodes) nodes[len] = x;
        m = len;
    }
    return m;
}

int32_t specd_suffix_tree_count(const specd_suffix_tree *t, int32_t node) {
    return t->nodes[node].count;
}
int32_t specd_suffix_tree_token(const specd_suffix_tree *t, int32_t node) {
    return t->nodes[node].token;
}
int32_t specd_suffix_tree_first_child(const specd_suffix_tree *t, int32_t node) {
    return t->nodes[node].first_child;
}
int32_t specd_suffix_tree_next_sibling(const specd_suffix_tree *t, int32_t node) {
    return t->nodes[node].next_sibling;
}
int32_t specd_suffix_tree_max_depth(const specd_suffix_tree *t) { return t->max_depth; }
int64_t specd_suffix_tree_nodes(const specd_suffix_tree *t) { return t->live; }
size_t specd_suffix_tree_bytes(const specd_suffix_tree *t) { return bytes_for(t->cap); }

int specd_suffix_tree_check(const specd_suffix_tree *t) {
    if (t->nodes[SPECD_SUFFIX_ROOT].count < 0 || t->n_open < 1 || t->n_open > t->max_depth)
        return 0;
    int64_t live = 1;
    for (int32_t x = 0; x < t->used; x++) {
        const tnode *n = &t->nodes[x];
        if (n->parent == FREED) continue;
        int64_t below = 0;
        for (int32_t c = n->first_child; c != NONE; c = t->nodes[c].next_sibling) {
            if (t->nodes[c].parent != x) return 0;
            below += t->nodes[c].count;
        }
        if (below > n->count) return 0;
        if (x == SPECD_SUFFIX_ROOT) continue;
        live++;
        if (n->count <= 0 || child_of(t, n->parent, n->token) != x) return 0;
        int32_t depth = 0;
        for (int32_t a = x; a != SPECD_SUFFIX_ROOT; a = t->nodes[a].parent)
            if (++depth > t->max_depth) return 0;
    }
    return live == t->live;
}

/* --- speculation --------------------------------------------------------------------------- */

typedef struct cand {
    float prob;
    int32_t node, parent, depth;
} cand;

typedef struct grown {
    int32_t parent[SPECD_SUFFIX_MAX_NODES], token[SPECD_SUFFIX_MAX_NODES];
    float prob[SPECD_SUFFIX_MAX_NODES];
    int32_t n;
    float score;
} grown;

static void emit(grown *g, int32_t parent, int32_t token, float prob) {
    g->parent[g->n] = parent;
    g->token[g->n] = token;
    g->prob[g->n] = prob;
    g->score += prob;
    g->n++;
}

/* Keeps at most room candidates, the most probable: one below room others cannot be emitted. */
static void cand_push(cand *c, int32_t *n_cand, int32_t room, cand x) {
    if (*n_cand < room) {
        c[(*n_cand)++] = x;
        return;
    }
    int32_t worst = 0;
    for (int32_t i = 1; i < *n_cand; i++)
        if (c[i].prob < c[worst].prob) worst = i;
    if (*n_cand > 0 && x.prob > c[worst].prob) c[worst] = x;
}

/* Best-first: the most probable open node next, its children becoming candidates. Parents are
 * emitted before their children (a child is never more probable than its parent). */
static void grow_tree(const specd_suffix_tree *t, int32_t start, int32_t limit, int32_t max_depth,
                      float min_prob, grown *g) {
    cand c[SPECD_SUFFIX_MAX_NODES];
    int32_t n_cand = 0;
    cand top = {.prob = 1.0f, .node = start, .parent = NONE, .depth = 0};
    for (;;) {
        if (top.depth < max_depth) {
            float parent_count = (float)t->nodes[top.node].count;
            for (int32_t x = t->nodes[top.node].first_child; x != NONE;
                 x = t->nodes[x].next_sibling) {
                /* the ratio first: it is <= 1 after rounding, so a path never gains */
                float p = top.prob * ((float)t->nodes[x].count / parent_count);
                if (p >= min_prob)
                    cand_push(c, &n_cand, limit - g->n,
                              (cand){.prob = p, .node = x, .parent = top.parent,
                                     .depth = top.depth + 1});
            }
        }
        if (g->n >= limit || n_cand == 0) return;
        int32_t best = 0; /* ties: the first in the array (deterministic) */
        for (int32_t i = 1; i < n_cand; i++)
            if (c[i].prob > c[best].prob) best = i;
        top = c[best];
        c[best] = c[--n_cand];
        emit(g, top.parent, t->nodes[top.node].token, top.prob);
        top.parent = g->n - 1;
    }
}

/* The most frequent child each time (the first on a tie): a chain. */
static void grow_chain(const specd_suffix_tree *t, int32_t x, int32_t limit, int32_t max_depth,
                       float min_prob, grown *g) {
    float prob = 1.0f;
    while (g->n < limit && g->n < max_depth) {
        int32_t best = NONE;
        for (int32_t c = t->nodes[x].first_child; c != NONE; c = t->nodes[c].next_sibling)
            if (best == NONE || t->nodes[c].count > t->nodes[best].count) best = c;
        if (best == NONE) return;
        float p = prob * ((float)t->nodes[best].count / (float)t->nodes[x].count);
        if (p < min_prob) return;
        emit(g, g->n - 1, t->nodes[best].token, p);
        prob = p;
        x = best;
    }
}

void specd_suffix_tree_speculate(const specd_suffix_tree *t, const int32_t *ctx, int64_t n,
                                 const specd_suffix_spec_params *p, specd_suffix_draft *out) {
    out->n = 0;
    out->match_len = 0;
    out->score = 0.0f;
    int32_t nodes[SPECD_SUFFIX_MAX_DEPTH + 1];
    int32_t m = specd_suffix_tree_match(t, ctx, n, nodes);
    int32_t cap = p->max_nodes < SPECD_SUFFIX_MAX_NODES ? p->max_nodes : SPECD_SUFFIX_MAX_NODES;
    grown g;
    for (int32_t len = 1; len <= m; len++) {
        double most = (double)len * p->spec_factor + p->spec_offset + 1e-6;
        int32_t limit = most < (double)cap ? (int32_t)most : cap;
        if (limit <= 0) continue;
        g.n = 0;
        g.score = 0.0f;
        if (p->use_tree) grow_tree(t, nodes[len], limit, p->max_depth, p->min_prob, &g);
        else grow_chain(t, nodes[len], limit, p->max_depth, p->min_prob, &g);
        /* the longer match on a tie: its statistics are the more specific */
        if (g.n == 0 || g.score < out->score) continue;
        memcpy(out->parent, g.parent, (size_t)g.n * sizeof *g.parent);
        memcpy(out->token, g.token, (size_t)g.n * sizeof *g.token);
        memcpy(out->prob, g.prob, (size_t)g.n * sizeof *g.prob);
        out->n = g.n;
        out->score = g.score;
        out->match_len = len;
    }
}
