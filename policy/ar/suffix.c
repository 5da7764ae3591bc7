/* Suffix decoding (SuffixDecoding, Oliaro et al.; vLLM's `suffix` method from Arctic Inference):
 * model-free drafting from suffix tries. Each sequence indexes its own tokens (prompt and output
 * so far) in a trie of its own; the answers of the requests that ended are indexed in one global
 * cache shared by every sequence of a spec (policy ABI 2 shared state: one per spec, or per
 * specd-drafter process, per options string). At each step the longest suffix of the history (at
 * most max_tree_depth tokens) is matched in both tries and a speculation tree is grown from each
 * match by the children's frequencies (suffix_tree.h); the sequence's own is proposed unless the
 * cache's matched more of the history (speculate()).
 * It pays on repetitive and agentic work: code edits, quoted input, the same task asked again.
 *
 * Tree or chain. A tree's side branches are its less likely continuations (the template model of
 * recycle_tree.h gives a second-ranked successor about 0.15), so a branch pays only where a
 * verified row costs less than about a tenth of a plain step. use_tree=auto (the default) reads
 * that cost from the adaptive guard (policy ABI 4 observe_cost): trees below TREE_MAX_COST,
 * chains above, trees until the guard has measured it (with --no-adaptive: always). On the 2-core
 * test CPU the guard measured 0.21-0.47 on a 769-token prompt, and chains read 1.21x against the
 * trees' 1.14x on Spec-Bench at T 0 (docs/benchmarks.md). */
#include "policy/builtin.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "policy/ar/suffix_cache.h"
#include "policy/ar/suffix_tree.h"
#include "policy/options.h"

#include <stddef.h>
#include <string.h>

enum { USE_CHAIN, USE_TREE, USE_AUTO }; /* use_tree's choices, in order */
#define TREE_MAX_COST 0.1                  /* use_tree=auto: trees while a row costs less */

typedef struct suffix_opts {
    int32_t max_tree_depth;
    float max_spec_factor, max_spec_offset, min_token_prob;
    int32_t max_cached_requests, max_cache_bytes, use_tree, min_match;
} suffix_opts;

static const specd_policy_option option_rows[] = {
    {.key = "max_tree_depth", .kind = SPECD_OPTION_INT,
     .offset = offsetof(suffix_opts, max_tree_depth), .dflt = "24", .min = 1,
     .max = SPECD_SUFFIX_MAX_DEPTH, .help = "longest suffix matched (and the tries' depth)"},
    {.key = "max_spec_factor", .kind = SPECD_OPTION_FLOAT,
     .offset = offsetof(suffix_opts, max_spec_factor), .dflt = "1", .min = 0, .max = 64,
     .help = "at most factor x match length (+ offset) tokens proposed"},
    {.key = "max_spec_offset", .kind = SPECD_OPTION_FLOAT,
     .offset = offsetof(suffix_opts, max_spec_offset), .dflt = "0", .min = -64, .max = 64,
     .help = "added to factor x match length"},
    {.key = "min_token_prob", .kind = SPECD_OPTION_FLOAT,
     .offset = offsetof(suffix_opts, min_token_prob), .dflt = "0.2", .min = 0, .max = 1,
     .help = "keep a token whose path probability (child count / parent count, multiplied) is at "
             "least this"},
    {.key = "max_cached_requests", .kind = SPECD_OPTION_INT,
     .offset = offsetof(suffix_opts, max_cached_requests), .dflt = "10000", .min = 0,
     .max = 1000000, .help = "requests that ended kept in the global cache (oldest evicted); 0: "
                             "no global cache"},
    {.key = "max_cache_bytes", .kind = SPECD_OPTION_INT,
     .offset = offsetof(suffix_opts, max_cache_bytes), .dflt = "268435456", .min = 1 << 20,
     .max = 2147483647, .help = "the global cache's memory bound (oldest requests evicted)"},
    {.key = "use_tree", .kind = SPECD_OPTION_ENUM, .offset = offsetof(suffix_opts, use_tree),
     .dflt = "auto", .choices = "0|1|auto",
     .help = "1: tree proposals (best-first by path probability); 0: chains only; auto: trees "
             "while the guard measures a verified row below 0.1 of a plain step, chains above"},
    {.key = "min_match", .kind = SPECD_OPTION_INT, .offset = offsetof(suffix_opts, min_match),
     .dflt = "2", .min = 1, .max = SPECD_SUFFIX_MAX_DEPTH,
     .help = "propose only from a match of at least this many tokens (one token seen once is "
             "counted as certain, and on a CPU such guesses cost more rows than they win)"},
};
const specd_option_table specd_suffix_options = SPECD_OPTION_TABLE(option_rows);

static specd_status parse(const char *options, suffix_opts *o, specd_error *err) {
    const specd_option_bounds bounds = {0};
    return specd_options_parse_table("suffix", &specd_suffix_options, &bounds, options, o, err);
}

/* The global cache, one per spec and options (NULL with max_cached_requests=0). */
static specd_status suffix_shared_create(const specd_policy_env *env, const char *options,
                                         void **shared, specd_error *err) {
    (void)env;
    suffix_opts o;
    SPECD_TRY(parse(options, &o, err));
    *shared = NULL;
    if (o.max_cached_requests == 0) return SPECD_OK;
    specd_suffix_cache *c = NULL;
    specd_error e;
    if (specd_suffix_cache_create(o.max_tree_depth, o.max_cached_requests,
                                  (size_t)o.max_cache_bytes, &c, &e) != SPECD_OK)
        return specd_fail(err, e.status, "policy suffix: %s", e.message);
    *shared = c;
    return SPECD_OK;
}

static void suffix_shared_destroy(void *shared) { specd_suffix_cache_destroy(shared); }

typedef struct suffix_state {
    suffix_opts o;
    int32_t *hist;            /* the sequence's tokens hist[0..n_hist) (advance records them) */
    int64_t n_hist, cap_hist;
    int64_t n_first;          /* the length of the first history handed in (the prompt), or -1 */
    specd_suffix_tree *local; /* hist[0..n_indexed) */
    int64_t n_indexed;
    specd_suffix_cache *cache; /* borrowed (env.shared), or NULL: no global cache */
    int32_t parent[2][SPECD_SUFFIX_MAX_NODES], token[2][SPECD_SUFFIX_MAX_NODES];
    float prob[2][SPECD_SUFFIX_MAX_NODES];
    double row_cost; /* the guard's measured cost of a row (observe_cost), or -1 */
} suffix_state;

static void suffix_destroy(void *state) {
    suffix_state *s = state;
    if (!s) return;
    /* the request ended: its answer feeds later requests' drafts (a failure only loses it). Only
     * the answer, as in Arctic Inference: other requests' prompts proposed their text into
     * unrelated answers (Spec-Bench at T 0, 21 turns: the guard kept 834 of 1,700 steps plain
     * with whole requests cached, 494 of 1,641 with answers only). The answer starts at the first
     * history handed in or one token after it (the session may have sampled a token before it
     * first asks): from one token before, so that nothing of it is lost. */
    const int64_t from = s->n_first > 0 ? s->n_first - 1 : 0;
    if (s->cache && s->n_hist > from) /* nothing when no answer was generated */
        specd_suffix_cache_insert(s->cache, s->hist + from, s->n_hist - from, NULL);
    specd_suffix_tree_destroy(s->local);
    specd_free(s->hist);
    specd_free(s);
}

static specd_status suffix_create(const specd_policy_env *env, const char *options, void **state,
                                  specd_error *err) {
    suffix_opts o;
    SPECD_TRY(parse(options, &o, err));
    suffix_state *s = specd_alloc_array(1, sizeof *s);
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "policy suffix: out of memory");
    s->o = o;
    s->row_cost = -1.0;
    s->n_first = -1;
    /* without a spec's shared state (a caller creating the policy on its own) there is no one to
     * share a cache with: the sequence drafts from its own tokens only */
    s->cache = o.max_cached_requests > 0 ? env->shared : NULL;
    specd_status st = specd_suffix_tree_create(o.max_tree_depth, &s->local, err);
    if (st != SPECD_OK) {
        specd_free(s);
        return st;
    }
    *state = s;
    return SPECD_OK;
}

static specd_status hist_reserve(suffix_state *s, int64_t n, specd_error *err) {
    if (n <= s->cap_hist) return SPECD_OK;
    int64_t cap = s->cap_hist ? s->cap_hist * 2 : 256;
    if (cap < n) cap = n;
    int32_t *h = specd_alloc_array((size_t)cap, sizeof *h);
    if (!h) return specd_fail(err, SPECD_E_NOMEM, "policy suffix: out of memory");
    if (s->n_hist) memcpy(h, s->hist, (size_t)s->n_hist * sizeof *h);
    specd_free(s->hist);
    s->hist = h;
    s->cap_hist = cap;
    return SPECD_OK;
}

/* The trie back to hist[0..n) (n < n_indexed): popping costs O(depth) a token, so a long way back
 * starts over. hist[0..n_indexed) must still be what was indexed. */
static specd_status unindex_to(suffix_state *s, int64_t n, specd_error *err) {
    if (s->n_indexed - n <= 2 * (int64_t)s->o.max_tree_depth) {
        while (s->n_indexed > n) specd_suffix_tree_pop(s->local, s->hist, s->n_indexed--);
        return SPECD_OK;
    }
    specd_suffix_tree *t = NULL;
    SPECD_TRY(specd_suffix_tree_create(s->o.max_tree_depth, &t, err));
    specd_suffix_tree_destroy(s->local);
    s->local = t;
    s->n_indexed = 0;
    return SPECD_OK; /* index() appends hist[0..n) again */
}

static specd_status truncate_to(suffix_state *s, int64_t n, specd_error *err) {
    if (n < s->n_indexed) SPECD_TRY(unindex_to(s, n, err));
    if (n < s->n_hist) s->n_hist = n;
    return SPECD_OK;
}

/* Records the history handed in, which is authoritative: what was recorded and the history share
 * a prefix (checked over its last max_tree_depth tokens, all that proposals read, and in full when
 * those differ); the rest is replaced. Copying only: the trie catches up in index(), inside
 * propose, so the session's measure of the policy's time covers the indexing too. */
static specd_status record(suffix_state *s, const int32_t *history, int64_t n, specd_error *err) {
    if (s->n_first < 0) s->n_first = n;
    int64_t p = s->n_hist < n ? s->n_hist : n;
    int64_t w = p < s->o.max_tree_depth ? p : s->o.max_tree_depth;
    if (w > 0 && memcmp(s->hist + p - w, history + p - w, (size_t)w * sizeof *history) != 0) {
        int64_t same = 0;
        while (same < p && s->hist[same] == history[same]) same++;
        p = same;
    }
    SPECD_TRY(truncate_to(s, p, err));
    SPECD_TRY(hist_reserve(s, n, err));
    if (n > p) memcpy(s->hist + p, history + p, (size_t)(n - p) * sizeof *history);
    s->n_hist = n;
    return SPECD_OK;
}

static specd_status index_all(suffix_state *s, specd_error *err) {
    for (; s->n_indexed < s->n_hist; s->n_indexed++)
        SPECD_TRY(specd_suffix_tree_append(s->local, s->hist[s->n_indexed], err));
    return SPECD_OK;
}

static void suffix_advance(void *state, const int32_t *history, int64_t n_history) {
    /* a failure leaves a prefix recorded: the next propose records again and says */
    (void)record(state, history, n_history, NULL);
}

static void suffix_rollback(void *state, int64_t n_history) {
    (void)truncate_to(state, n_history, NULL);
}

/* The better of the sequence's own speculation (draft 0) and the global cache's (draft 1). */
static specd_status speculate(suffix_state *s, const int32_t *history, int64_t n,
                              int32_t max_nodes, int32_t max_depth, int use_tree,
                              specd_suffix_draft *best, specd_error *err) {
    SPECD_TRY(record(s, history, n, err));
    SPECD_TRY(index_all(s, err));
    const specd_suffix_spec_params p = {.max_nodes = max_nodes,
                                        .max_depth = max_depth,
                                        .spec_factor = s->o.max_spec_factor,
                                        .spec_offset = s->o.max_spec_offset,
                                        .min_prob = s->o.min_token_prob,
                                        .use_tree = use_tree};
    specd_suffix_draft d[2];
    for (int i = 0; i < 2; i++)
        d[i] = (specd_suffix_draft){.parent = s->parent[i], .token = s->token[i],
                                    .prob = s->prob[i]};
    specd_suffix_tree_speculate(s->local, history, n, &p, &d[0]);
    if (s->cache) specd_suffix_cache_speculate(s->cache, history, n, &p, &d[1]);
    for (int i = 0; i < 2; i++)
        if (d[i].match_len < s->o.min_match) d[i].n = 0, d[i].score = 0.0f;
    /* The global cache's draft only where it matched more of the history than the sequence's own
     * (or as much, and expects more): its counts come from other requests, and a phrase common
     * to many answers outscored the request's own continuation and was rejected. Same setting,
     * steps the guard kept plain: 494 of 1,641 choosing by score alone, 262 of 1,554 with this
     * rule, 220 of 1,548 without a cache. */
    const int longer = d[1].match_len > d[0].match_len,
              level = d[1].match_len == d[0].match_len;
    const int global = d[1].n > 0 && (d[0].n == 0 || longer || (level && d[1].score > d[0].score));
    *best = global ? d[1] : d[0];
    return SPECD_OK;
}

static specd_status suffix_propose_tree(void *state, const int32_t *history, int64_t n_history,
                                        int32_t max_nodes, int32_t max_depth, int32_t *parent,
                                        int32_t *token, int32_t *n_nodes, float *q, int *has_q,
                                        specd_error *err) {
    (void)q;
    suffix_state *s = state;
    *n_nodes = 0;
    *has_q = 0;
    const int use_tree = s->o.use_tree == USE_AUTO ? s->row_cost < TREE_MAX_COST
                                                   : s->o.use_tree == USE_TREE;
    specd_suffix_draft d;
    SPECD_TRY(speculate(s, history, n_history, max_nodes, max_depth, use_tree, &d, err));
    memcpy(parent, d.parent, (size_t)d.n * sizeof *parent);
    memcpy(token, d.token, (size_t)d.n * sizeof *token);
    *n_nodes = d.n;
    return SPECD_OK;
}

static void suffix_observe_cost(void *state, double row_cost) {
    ((suffix_state *)state)->row_cost = row_cost;
}

/* A chain (what specd-drafter asks for): the most frequent continuation. */
static specd_status suffix_propose(void *state, const int32_t *history, int64_t n_history,
                                   int32_t max_draft, int32_t *draft, int32_t *n_draft, float *q,
                                   int *has_q, specd_error *err) {
    (void)q;
    *n_draft = 0;
    *has_q = 0;
    specd_suffix_draft d;
    SPECD_TRY(speculate(state, history, n_history, max_draft, max_draft, 0, &d, err));
    memcpy(draft, d.token, (size_t)d.n * sizeof *draft);
    *n_draft = d.n;
    return SPECD_OK;
}

const specd_policy_ops specd_policy_suffix = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .name = "suffix",
    .flags = SPECD_POLICY_SHADOW_DRAFTS, /* microseconds a proposal, from the history alone */
    .options_help = "max_tree_depth=24, max_spec_factor=1, max_spec_offset=0, min_token_prob=0.2, "
                    "max_cached_requests=10000 (0: no global cache), max_cache_bytes=256 MiB, "
                    "use_tree=auto (0|1|auto), min_match=2",
    .create = suffix_create,
    .destroy = suffix_destroy,
    .propose = suffix_propose,
    .advance = suffix_advance,
    .rollback = suffix_rollback,
    .shared_create = suffix_shared_create,
    .shared_destroy = suffix_shared_destroy,
    .propose_tree = suffix_propose_tree,
    .observe_cost = suffix_observe_cost,
};
