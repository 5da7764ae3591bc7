/* Token Recycling's parts without a model: the one-pass top-k against a full sort, the table's
 * update from verified rows and its prompt seeding, the template's shape, its breadth-first
 * expansion over a hand-made table, and the policy through its ops (options, shared table,
 * observe_rows feeding propose_tree). */
#include "test_main.h"

#include "policy/ar/recycle_table.h"
#include "policy/ar/recycle_tree.h"
#include "specd/policy.h"

#include <string.h>

static uint64_t rng = 88172645463325252ULL;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* the reference: every index, sorted by value descending, ties by index ascending */
static const float *sort_vals;
static int by_value(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (sort_vals[i] != sort_vals[j]) return sort_vals[i] > sort_vals[j] ? -1 : 1;
    return i < j ? -1 : 1;
}

static void test_topk_matches_a_sort(void **s) {
    (void)s;
    enum { MAXN = 2000 };
    static float x[MAXN];
    static int32_t order[MAXN];
    const int32_t sizes[] = {1, 3, 8, 31, 32, 33, 100, 257, MAXN};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int32_t n = sizes[si];
        for (int trial = 0; trial < 20; trial++) {
            /* few distinct values: ties everywhere; or a rising ramp: the buffer turns over */
            for (int32_t i = 0; i < n; i++)
                x[i] = trial % 3 == 0   ? (float)(next_u32() % 5)
                       : trial % 3 == 1 ? (float)i * 0.5f
                                        : (float)(int32_t)(next_u32() % 20001) - 10000.0f;
            for (int32_t i = 0; i < n; i++) order[i] = i;
            sort_vals = x;
            qsort(order, (size_t)n, sizeof *order, by_value);
            for (int32_t k = 1; k <= SPECD_RECYCLE_MAX_K; k += (k < 8 ? 1 : 7)) {
                int32_t ids[SPECD_RECYCLE_MAX_K];
                int32_t m = specd_recycle_topk(x, n, k, ids);
                assert_int_equal(m, k < n ? k : n);
                assert_memory_equal(ids, order, (size_t)m * sizeof *ids);
            }
        }
    }
}

/* A row of V logits that ranks the given ids first, in that order. */
enum { V = 40 };
static void ranking_row(float *row, const int32_t *ids, int32_t n) {
    for (int32_t x = 0; x < V; x++) row[x] = -1.0f - 0.001f * (float)x;
    for (int32_t i = 0; i < n; i++) row[ids[i]] = 10.0f - (float)i;
}

static void test_observe_replaces_entries(void **s) {
    (void)s;
    specd_recycle_table *t = NULL;
    assert_int_equal(specd_recycle_table_create(V, 3, &t, NULL), SPECD_OK);
    for (int32_t tok = 0; tok < V; tok++)
        for (int32_t j = 0; j < 3; j++) assert_int_equal(specd_recycle_table_entry(t, tok)[j], -1);
    assert_null(specd_recycle_table_entry(t, V));
    assert_null(specd_recycle_table_entry(t, -1));
    /* two rows with stride V + 2 (padding never read as a candidate: it is past n_vocab) */
    float rows[2 * (V + 2)];
    const int32_t a[] = {7, 3, 9}, b[] = {1, 2, 5};
    ranking_row(rows, a, 3);
    ranking_row(rows + V + 2, b, 3);
    rows[V] = rows[V + 1] = 100.0f;
    const int32_t tokens[] = {4, 11};
    specd_recycle_table_observe(t, tokens, 2, rows, V + 2, V);
    assert_memory_equal(specd_recycle_table_entry(t, 4), a, sizeof a);
    assert_memory_equal(specd_recycle_table_entry(t, 11), b, sizeof b);
    assert_int_equal(specd_recycle_table_entry(t, 5)[0], -1);
    /* a later row replaces the entry; a token outside the vocabulary is skipped */
    const int32_t tokens2[] = {4, V + 5};
    specd_recycle_table_observe(t, tokens2, 2, rows + V + 2, V + 2, V);
    assert_memory_equal(specd_recycle_table_entry(t, 4), b, sizeof b);
    /* rows wider than the table: ids past its vocabulary are never entered */
    specd_recycle_table *narrow = NULL;
    assert_int_equal(specd_recycle_table_create(8, 2, &narrow, NULL), SPECD_OK);
    const int32_t c[] = {30, 6, 2};
    ranking_row(rows, c, 3);
    specd_recycle_table_observe(narrow, tokens, 1, rows, V, V);
    assert_int_equal(specd_recycle_table_entry(narrow, 4)[0], 6);
    assert_int_equal(specd_recycle_table_entry(narrow, 4)[1], 2);
    specd_recycle_table_destroy(narrow);
    specd_recycle_table_destroy(t);
    assert_int_equal(specd_recycle_table_create(V, 0, &t, NULL), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_recycle_table_create(V, SPECD_RECYCLE_MAX_K + 1, &t, NULL),
                     SPECD_E_INVALID_ARG);
}

static void test_seed_fills_only_unranked_entries(void **s) {
    (void)s;
    specd_recycle_table *t = NULL;
    assert_int_equal(specd_recycle_table_create(V, 3, &t, NULL), SPECD_OK);
    float row[V];
    const int32_t ranked[] = {20, 21, 22};
    ranking_row(row, ranked, 3);
    const int32_t five = 5;
    specd_recycle_table_observe(t, &five, 1, row, V, V);
    /* 1 is followed by 2, 3, 2, 4, 6 (latest last); 5 is ranked by the target already */
    const int32_t prompt[] = {1, 2, 1, 3, 1, 2, 1, 4, 5, 9, 1, 6};
    specd_recycle_table_seed(t, prompt, 12);
    const int32_t want1[] = {6, 4, 2}; /* latest first, distinct, k of them */
    assert_memory_equal(specd_recycle_table_entry(t, 1), want1, sizeof want1);
    assert_memory_equal(specd_recycle_table_entry(t, 5), ranked, sizeof ranked);
    assert_int_equal(specd_recycle_table_entry(t, 4)[0], 5);
    assert_int_equal(specd_recycle_table_entry(t, 4)[1], -1);
    assert_int_equal(specd_recycle_table_entry(t, 6)[0], -1); /* the last token: no successor */
    /* a later prompt's bigrams replace an earlier one's */
    const int32_t prompt2[] = {4, 8};
    specd_recycle_table_seed(t, prompt2, 2);
    assert_int_equal(specd_recycle_table_entry(t, 4)[0], 8);
    assert_int_equal(specd_recycle_table_entry(t, 4)[1], -1);
    /* ... and the target's row replaces both, after which seeding leaves it */
    const int32_t four = 4;
    specd_recycle_table_observe(t, &four, 1, row, V, V);
    specd_recycle_table_seed(t, prompt, 12);
    assert_memory_equal(specd_recycle_table_entry(t, 4), ranked, sizeof ranked);
    specd_recycle_table_destroy(t);
}

static void test_template_shape(void **s) {
    (void)s;
    specd_recycle_template tpl;
    assert_int_equal(specd_recycle_template_build(80, 6, 8, &tpl), 80);
    int32_t children[SPECD_RECYCLE_MAX_NODES + 1] = {0}; /* [0]: the root's */
    int32_t deepest = 0;
    for (int32_t i = 0; i < tpl.n; i++) {
        int32_t p = tpl.parent[i];
        assert_true(p >= -1 && p < i);
        assert_int_equal(tpl.depth[i], p < 0 ? 1 : tpl.depth[p] + 1);
        if (i > 0) assert_true(tpl.depth[i] >= tpl.depth[i - 1]); /* breadth first */
        assert_true(tpl.rank[i] < 8);
        /* siblings contiguous, ranks 0, 1, 2, ... */
        assert_int_equal(tpl.rank[i], children[p + 1]);
        if (tpl.rank[i] > 0) assert_int_equal(tpl.parent[i - 1], p);
        children[p + 1]++;
        deepest = tpl.depth[i] > deepest ? tpl.depth[i] : deepest;
    }
    assert_int_equal(children[0], 8); /* the paper's: every rank at the root */
    assert_int_equal(deepest, 6);
    /* the best path's node branches most */
    assert_true(children[1] >= children[2] && children[2] >= children[3]);
    /* caps: depth, k, nodes */
    assert_int_equal(specd_recycle_template_build(10, 1, 8, &tpl), 8);
    assert_int_equal(specd_recycle_template_build(10, 3, 1, &tpl), 3);
    assert_int_equal(specd_recycle_template_build(0, 3, 8, &tpl), 0);
    /* the cost rule: free rows take every node allowed, dear rows one; dearer never more */
    assert_int_equal(specd_recycle_nodes_for_cost(0.0, 50, 6, 8), 50);
    assert_int_equal(specd_recycle_nodes_for_cost(10.0, 50, 6, 8), 1);
    int32_t last = 1 << 30;
    for (double c = 0.001; c < 1.0; c *= 2) {
        int32_t n = specd_recycle_nodes_for_cost(c, 256, 6, 8);
        assert_true(n >= 1 && n <= last);
        last = n;
    }
}

/* Hand-made table: 1 -> {2, 3}, 2 -> {4, 5}, 3 -> {6}, 4 -> {2} (and 5, 6 empty). The 7-node
 * template [0] [1] [0,0] [0,1] [1,0] [1,1] [0,0,0] expands to 2, 3; 4, 5 under 2; 6 under 3
 * (3's rank 1 is empty: dropped); 2 under 4. */
static void test_expand_hand_made_table(void **s) {
    (void)s;
    specd_recycle_table *t = NULL;
    assert_int_equal(specd_recycle_table_create(V, 2, &t, NULL), SPECD_OK);
    const int32_t e1[] = {2, 3}, e2[] = {4, 5}, e3[] = {6, -1}, e4[] = {2, -1};
    memcpy(t->next + 1 * 2, e1, sizeof e1);
    memcpy(t->next + 2 * 2, e2, sizeof e2);
    memcpy(t->next + 3 * 2, e3, sizeof e3);
    memcpy(t->next + 4 * 2, e4, sizeof e4);
    specd_recycle_template tpl = {.n = 7,
                                  .parent = {-1, -1, 0, 0, 1, 1, 2},
                                  .rank = {0, 1, 0, 1, 0, 1, 0},
                                  .depth = {1, 1, 2, 2, 2, 2, 3}};
    int32_t parent[8], token[8];
    int32_t n = specd_recycle_expand(&tpl, t, 1, 8, 8, parent, token);
    const int32_t want_parent[] = {-1, -1, 0, 0, 1, 2}, want_token[] = {2, 3, 4, 5, 6, 2};
    assert_int_equal(n, 6);
    assert_memory_equal(parent, want_parent, sizeof want_parent);
    assert_memory_equal(token, want_token, sizeof want_token);
    /* depth and node caps */
    assert_int_equal(specd_recycle_expand(&tpl, t, 1, 8, 1, parent, token), 2);
    assert_int_equal(specd_recycle_expand(&tpl, t, 1, 3, 8, parent, token), 3);
    /* an empty root entry drafts nothing; so does a pending id outside the vocabulary */
    assert_int_equal(specd_recycle_expand(&tpl, t, 7, 8, 8, parent, token), 0);
    assert_int_equal(specd_recycle_expand(&tpl, t, V, 8, 8, parent, token), 0);
    /* a repeated id among siblings is verified once; its subtree goes with it */
    const int32_t dup[] = {4, 4};
    memcpy(t->next + 2 * 2, dup, sizeof dup);
    n = specd_recycle_expand(&tpl, t, 1, 8, 8, parent, token);
    const int32_t want_parent2[] = {-1, -1, 0, 1, 2}, want_token2[] = {2, 3, 4, 6, 2};
    assert_int_equal(n, 5);
    assert_memory_equal(parent, want_parent2, sizeof want_parent2);
    assert_memory_equal(token, want_token2, sizeof want_token2);
    specd_recycle_table_destroy(t);
}

/* The policy through its ops: rows it observes become the tree it proposes. */
static void test_policy_ops(void **s) {
    (void)s;
    const specd_policy_ops *ops = specd_policy_find("recycle");
    assert_non_null(ops);
    assert_int_equal(ops->abi_version, 4);
    assert_non_null(ops->observe_rows);
    assert_non_null(ops->observe_cost);
    specd_policy_env env = {.n_vocab = V, .max_draft = 4, .max_step_rows = 9};
    void *state = NULL;
    specd_error err;
    const char *bad[] = {"k=0", "k=33", "tree=huge", "nodes=257", "row_cost=-1", "bogus=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ops->create(&env, bad[i], &state, &err), SPECD_E_INVALID_ARG);
        assert_null(state);
    }
    void *shared = NULL;
    assert_int_equal(ops->shared_create(&env, "k=2,nodes=4,seed=0", &shared, &err), SPECD_OK);
    env.shared = shared;
    assert_int_equal(ops->create(&env, "k=2,nodes=4,seed=0", &state, &err), SPECD_OK);
    const int32_t h[] = {5, 1};
    int32_t parent[8], token[8], n = -1;
    int has_q = 1;
    assert_int_equal(ops->propose_tree(state, h, 2, 8, 4, parent, token, &n, NULL, &has_q, &err),
                     SPECD_OK);
    assert_int_equal(n, 0); /* nothing observed yet */
    assert_int_equal(has_q, 0);
    /* the step's rows: 1 ranks 2 then 3; 2 ranks 4 then 5 */
    float rows[2 * V];
    const int32_t r1[] = {2, 3}, r2[] = {4, 5}, tokens[] = {1, 2};
    ranking_row(rows, r1, 2);
    ranking_row(rows + V, r2, 2);
    ops->observe_rows(state, tokens, 2, rows, V, V);
    /* 4 nodes: [0] [1] [0,0] [0,0,0] -> 2, 3 under the root, 4 under 2; 4 has no entry */
    assert_int_equal(ops->propose_tree(state, h, 2, 8, 4, parent, token, &n, NULL, &has_q, &err),
                     SPECD_OK);
    const int32_t want_parent[] = {-1, -1, 0}, want_token[] = {2, 3, 4};
    assert_int_equal(n, 3);
    assert_memory_equal(parent, want_parent, sizeof want_parent);
    assert_memory_equal(token, want_token, sizeof want_token);
    /* the chain form follows the best successors */
    int32_t draft[4];
    assert_int_equal(ops->propose(state, h, 2, 4, draft, &n, NULL, &has_q, &err), SPECD_OK);
    assert_int_equal(n, 2); /* 2, 4, then 4 has no entry */
    ops->destroy(state);
    /* a second sequence shares the table */
    assert_int_equal(ops->create(&env, "k=2,nodes=4,seed=0", &state, &err), SPECD_OK);
    assert_int_equal(ops->propose_tree(state, h, 2, 8, 4, parent, token, &n, NULL, &has_q, &err),
                     SPECD_OK);
    assert_int_equal(n, 3);
    ops->destroy(state);
    ops->shared_destroy(shared);
    /* outside a spec: a table of its own; the prompt seeds it */
    env.shared = NULL;
    assert_int_equal(ops->create(&env, "", &state, &err), SPECD_OK);
    const int32_t prompt[] = {7, 8, 9, 7};
    assert_int_equal(
        ops->propose_tree(state, prompt, 4, 8, 4, parent, token, &n, NULL, &has_q, &err),
        SPECD_OK);
    assert_true(n >= 2);
    assert_int_equal(token[0], 8); /* 7 -> 8 -> 9 from the prompt's bigrams */
    assert_int_equal(parent[0], -1);
    ops->destroy(state);
}

/* tree=auto sized by the cost the guard hands it (ABI 4 observe_cost): a dear row makes the tree
 * one node, a free one as large as the step and the table allow; row_cost= fixes the size. */
static void test_tree_sized_by_observed_cost(void **s) {
    (void)s;
    const specd_policy_ops *ops = specd_policy_find("recycle");
    specd_policy_env env = {.n_vocab = V, .max_draft = 4, .max_step_rows = 9};
    specd_error err;
    void *state = NULL;
    /* a table where every token has two successors: t -> {t + 1, t + 2} */
    float rows[V * V];
    int32_t tokens[V - 2];
    for (int32_t t = 0; t < V - 2; t++) {
        const int32_t r[] = {t + 1, t + 2};
        ranking_row(rows + (size_t)t * V, r, 2);
        tokens[t] = t;
    }
    const int32_t h[] = {1, 3};
    int32_t parent[8], token[8], n = -1;
    int has_q = 0;
    const char *opts[] = {"k=2,seed=0", "k=2,seed=0,row_cost=0.01"};
    for (int fixed = 0; fixed < 2; fixed++) {
        assert_int_equal(ops->create(&env, opts[fixed], &state, &err), SPECD_OK);
        ops->observe_rows(state, tokens, V - 2, rows, V, V);
        /* before any measurement: the CPU rule (0.08), or the given 0.01 */
        assert_int_equal(ops->propose_tree(state, h, 2, 8, 4, parent, token, &n, NULL, &has_q,
                                           &err), SPECD_OK);
        const int32_t first = n;
        assert_int_equal(first, specd_recycle_nodes_for_cost(fixed ? 0.01 : 0.08, 8, 4, 2));
        ops->observe_cost(state, 0.5); /* a row costs half a step: one node pays at most */
        assert_int_equal(ops->propose_tree(state, h, 2, 8, 4, parent, token, &n, NULL, &has_q,
                                           &err), SPECD_OK);
        assert_int_equal(n, fixed ? first : 1);
        assert_int_equal(token[0], 4);
        ops->observe_cost(state, 0.0); /* free rows: the step's whole room */
        assert_int_equal(ops->propose_tree(state, h, 2, 8, 4, parent, token, &n, NULL, &has_q,
                                           &err), SPECD_OK);
        assert_int_equal(n, fixed ? first : 8);
        ops->destroy(state);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topk_matches_a_sort),
        cmocka_unit_test(test_observe_replaces_entries),
        cmocka_unit_test(test_seed_fills_only_unranked_entries),
        cmocka_unit_test(test_template_shape),
        cmocka_unit_test(test_expand_hand_made_table),
        cmocka_unit_test(test_policy_ops),
        cmocka_unit_test(test_tree_sized_by_observed_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
