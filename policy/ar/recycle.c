/* Token Recycling (Luo et al. 2024): drafts a tree from an adjacency table of each token's top-k
 * successors, which the target's own verified rows fill (policy ABI 3 observe_rows: every scored
 * row's top-k replaces its input token's entry), so drafting costs no forward. The tree is a
 * static template of rank paths (recycle_tree.h) expanded breadth-first from the pending token.
 * The table is the spec's shared state: every sequence of a model reads and fills one table.
 *
 * Tree size. What a verified row costs decides it. With tree=auto (the default) the size is the
 * N that maximises the template model's expected tokens per step over the step's cost,
 * (1 + E(N)) / (1 + row_cost N) (recycle_tree.h), where row_cost is one more row's cost relative
 * to a plain one-row step: the adaptive guard's measurement for the sequence (policy ABI 4
 * observe_cost: its marginal cost of one proposal over a plain step's), and until it has one a
 * fixed rule: on a CPU each row adds about a tenth of a plain step (0.08: 4 nodes), on a CUDA
 * device a step of 80 rows costs about what one row does (0.002: about 90, the paper's size). On
 * the 2-core test CPU the guard measured 0.21-0.47 (median 0.28) on a 769-token prompt, which
 * calls for one node. tree=small and
 * tree=large are fixed templates (12 nodes at depth 4; 80 at depth 6, the paper's shape). The
 * session's step bounds every tree (max_step_rows - 1 nodes, the guard's draft length as depth):
 * a CUDA host that wants the large tree sets specd_spec_params.max_step_rows >= 81 (the CLI:
 * --draft-max 40). row_cost= fixes the cost, whatever the guard measures.
 *
 * Where the rows are not on the host the table does not learn: a CUDA target's steps verified on
 * the device (observe_rows is not called; SPECD_CUDA_VERIFY=host takes the copy path, which
 * calls it) and a drafter daemon's proposals (it never sees the target's logits). Drafts then
 * come from the prompt's bigrams only.
 */
#include "policy/builtin.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "policy/ar/recycle_table.h"
#include "policy/ar/recycle_tree.h"
#include "policy/options.h"
#include "policy/policy_device.h"

#include <stddef.h>

enum { TREE_AUTO, TREE_SMALL, TREE_LARGE };
enum { SMALL_NODES = 12, SMALL_DEPTH = 4, LARGE_NODES = 80, LARGE_DEPTH = 6 };
#define ROW_COST_CPU 0.08f
#define ROW_COST_CUDA 0.002f

typedef struct recycle_opts {
    int32_t k;     /* successors kept per token */
    int32_t tree;  /* TREE_* */
    int32_t nodes; /* 0: the tree's */
    int32_t depth; /* 0: the tree's */
    int32_t seed;  /* prompt bigrams fill entries the target has not */
    float row_cost; /* tree=auto: one more row's cost relative to a plain step */
} recycle_opts;

static const specd_policy_option option_rows[] = {
    {.key = "k", .kind = SPECD_OPTION_INT, .offset = offsetof(recycle_opts, k), .dflt = "8",
     .min = 1, .max = SPECD_RECYCLE_MAX_K,
     .help = "successors kept per token (the table is n_vocab x k ids)"},
    {.key = "tree", .kind = SPECD_OPTION_ENUM, .offset = offsetof(recycle_opts, tree),
     .dflt = "auto", .choices = "auto|small|large",
     .help = "template: auto (the size row_cost calls for, depth 6), small (12 nodes, depth "
             "4), large (80, depth 6: the paper's)"},
    {.key = "nodes", .kind = SPECD_OPTION_INT, .offset = offsetof(recycle_opts, nodes),
     .dflt = "0", .min = 0, .max = SPECD_RECYCLE_MAX_NODES,
     .help = "tree nodes, overriding the template's (0: the template's); at most the step's "
             "rows - 1"},
    {.key = "depth", .kind = SPECD_OPTION_INT, .offset = offsetof(recycle_opts, depth),
     .dflt = "0", .min = 0, .max = 64,
     .help = "deepest tree level, overriding the template's (0: the template's); capped by "
             "the step's draft length"},
    {.key = "seed", .kind = SPECD_OPTION_BOOL, .offset = offsetof(recycle_opts, seed),
     .dflt = "1",
     .help = "fill entries the target has not ranked yet from the prompt's bigrams"},
    {.key = "row_cost", .kind = SPECD_OPTION_FLOAT, .offset = offsetof(recycle_opts, row_cost),
     .dflt = "what the adaptive guard measures; 0.08 on a CPU, 0.002 on CUDA until it has",
     .min = 0.0, .max = 10.0, .flags = SPECD_OPTION_DEFAULT_DERIVED,
     .help = "tree=auto: one more verified row's cost relative to a plain one-row step (given: "
             "fixed, whatever the guard measures)"},
};
const specd_option_table specd_recycle_options = SPECD_OPTION_TABLE(option_rows);

typedef struct recycle_state {
    specd_recycle_table *table; /* the spec's (env.shared), or own */
    specd_recycle_table *own;   /* made when the policy runs outside a spec */
    int32_t nodes, depth;       /* the tree the options ask for (nodes 0: by row_cost) */
    double row_cost;
    int row_cost_fixed;         /* row_cost= was given: the guard's measurement is not taken */
    /* tree=auto's size for (sized_cap, sized_depth, sized_cost), computed when one moves */
    int32_t sized_nodes, sized_cap, sized_depth;
    double sized_cost;
    int32_t seed, seeded;
    specd_recycle_template tpl; /* built for (tpl_nodes, tpl_depth) */
    int32_t tpl_nodes, tpl_depth;
} recycle_state;

static specd_status parse(const specd_policy_env *env, const char *options, recycle_opts *o,
                          specd_error *err) {
    const specd_option_bounds bounds = {.max_draft = env->max_draft};
    o->row_cost = -1.0f; /* not given */
    return specd_options_parse_table("recycle", &specd_recycle_options, &bounds, options, o, err);
}

static specd_status recycle_shared_create(const specd_policy_env *env, const char *options,
                                          void **shared, specd_error *err) {
    recycle_opts o;
    SPECD_TRY(parse(env, options, &o, err));
    specd_recycle_table *t = NULL;
    SPECD_TRY(specd_recycle_table_create(env->n_vocab, o.k, &t, err));
    *shared = t;
    return SPECD_OK;
}

static void recycle_shared_destroy(void *shared) { specd_recycle_table_destroy(shared); }

static specd_status recycle_create(const specd_policy_env *env, const char *options, void **state,
                                   specd_error *err) {
    recycle_opts o;
    SPECD_TRY(parse(env, options, &o, err));
    recycle_state *s = specd_alloc_array(1, sizeof *s);
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "policy recycle: out of memory");
    s->nodes = o.nodes ? o.nodes
               : o.tree == TREE_SMALL ? SMALL_NODES
               : o.tree == TREE_LARGE ? LARGE_NODES
                                      : 0;
    s->depth = o.depth ? o.depth : o.tree == TREE_SMALL ? SMALL_DEPTH : LARGE_DEPTH;
    const int cuda = specd_policy_context_params(env).device == SPECD_DEVICE_CUDA;
    s->row_cost_fixed = o.row_cost >= 0.0f;
    s->row_cost = s->row_cost_fixed ? o.row_cost : cuda ? ROW_COST_CUDA : ROW_COST_CPU;
    s->seed = o.seed;
    s->table = env->shared;
    if (!s->table) {
        specd_status st = specd_recycle_table_create(env->n_vocab, o.k, &s->own, err);
        if (st != SPECD_OK) {
            specd_free(s);
            return st;
        }
        s->table = s->own;
    }
    *state = s;
    return SPECD_OK;
}

static void recycle_destroy(void *state) {
    recycle_state *s = state;
    if (!s) return;
    specd_recycle_table_destroy(s->own);
    specd_free(s);
}

/* The prompt's bigrams go in once, before the sequence's first proposal. */
static void seed_once(recycle_state *s, const int32_t *history, int64_t n_history) {
    if (s->seeded) return;
    s->seeded = 1;
    if (s->seed) specd_recycle_table_seed(s->table, history, n_history);
}

/* tree=auto's node count under cap at this depth and row cost. The guard's measurement moves a
 * little every step; the size is recomputed when it moved by more than 5%. */
static int32_t auto_size(recycle_state *s, int32_t cap, int32_t depth) {
    const double c = s->row_cost, was = s->sized_cost;
    if (cap != s->sized_cap || depth != s->sized_depth || c > was * 1.05 || c < was / 1.05) {
        s->sized_nodes = specd_recycle_nodes_for_cost(c, cap, depth, s->table->k);
        s->sized_cap = cap;
        s->sized_depth = depth;
        s->sized_cost = c;
    }
    return s->sized_nodes;
}

/* The guard's measured cost of a row (policy ABI 4) sizes tree=auto, unless row_cost= fixed it. */
static void recycle_observe_cost(void *state, double row_cost) {
    recycle_state *s = state;
    if (!s->row_cost_fixed) s->row_cost = row_cost;
}

static specd_status recycle_propose_tree(void *state, const int32_t *history, int64_t n_history,
                                         int32_t max_nodes, int32_t max_depth, int32_t *parent,
                                         int32_t *token, int32_t *n_nodes, float *q, int *has_q,
                                         specd_error *err) {
    (void)q, (void)err;
    recycle_state *s = state;
    *n_nodes = 0;
    *has_q = 0;
    seed_once(s, history, n_history);
    if (max_nodes > SPECD_RECYCLE_MAX_NODES) max_nodes = SPECD_RECYCLE_MAX_NODES;
    int32_t nodes = s->nodes && s->nodes < max_nodes ? s->nodes : max_nodes;
    int32_t depth = s->depth < max_depth ? s->depth : max_depth;
    if (nodes < 1 || depth < 1 || n_history < 1) return SPECD_OK;
    if (!s->nodes) nodes = auto_size(s, nodes, depth);
    if (nodes != s->tpl_nodes || depth != s->tpl_depth) { /* the guard moved the depth or cost */
        s->tpl_nodes = nodes;
        s->tpl_depth = depth;
        specd_recycle_template_build(nodes, depth, s->table->k, &s->tpl);
    }
    *n_nodes = specd_recycle_expand(&s->tpl, s->table, history[n_history - 1], max_nodes,
                                    max_depth, parent, token);
    return SPECD_OK;
}

/* A chain, for callers that take one (a drafter daemon): the best successor of each token. */
static specd_status recycle_propose(void *state, const int32_t *history, int64_t n_history,
                                    int32_t max_draft, int32_t *draft, int32_t *n_draft, float *q,
                                    int *has_q, specd_error *err) {
    (void)q, (void)err;
    recycle_state *s = state;
    *n_draft = 0;
    *has_q = 0;
    seed_once(s, history, n_history);
    int32_t k = s->depth < max_draft ? s->depth : max_draft;
    int32_t tok = n_history > 0 ? history[n_history - 1] : -1;
    while (*n_draft < k) {
        const int32_t *entry = specd_recycle_table_entry(s->table, tok);
        if (!entry || entry[0] < 0) break;
        tok = draft[(*n_draft)++] = entry[0];
    }
    return SPECD_OK;
}

static void recycle_observe_rows(void *state, const int32_t *tokens, int32_t n_rows,
                                 const float *logits, int64_t row_stride, int32_t n_vocab) {
    recycle_state *s = state;
    specd_recycle_table_observe(s->table, tokens, n_rows, logits, row_stride, n_vocab);
}

const specd_policy_ops specd_policy_recycle = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .name = "recycle",
    .flags = SPECD_POLICY_SHADOW_DRAFTS, /* microseconds a proposal, from the history alone */
    .options_help = "k=8 (successors per token), tree=auto|small|large, nodes=0 (tree's), "
                    "depth=0 (tree's), seed=1 (prompt bigrams), row_cost (tree=auto)",
    .create = recycle_create,
    .destroy = recycle_destroy,
    .propose = recycle_propose,
    .shared_create = recycle_shared_create,
    .shared_destroy = recycle_shared_destroy,
    .propose_tree = recycle_propose_tree,
    .observe_rows = recycle_observe_rows,
    .observe_cost = recycle_observe_cost,
};
