/* Policy `suffix` on hand-made histories (its own tokens, the global cache of ended requests, a
 * history that changed or was rolled back, bad options), and the global cache's bounds over
 * 10,000 random requests. */
#include "test_main.h"

#include "policy/ar/suffix_cache.h"
#include "specd/policy.h"

#include <string.h>

static const specd_policy_ops *ops;

static void *make(const char *options, void *shared) {
    specd_policy_env env = {.n_vocab = 100, .max_draft = 8, .shared = shared};
    void *state = NULL;
    specd_error err;
    if (ops->create(&env, options, &state, &err) != SPECD_OK) fail_msg("%s", err.message);
    return state;
}

static void *make_shared(const char *options) {
    specd_policy_env env = {.n_vocab = 100, .max_draft = 8};
    void *shared = NULL;
    specd_error err;
    if (ops->shared_create(&env, options, &shared, &err) != SPECD_OK) fail_msg("%s", err.message);
    return shared;
}

/* propose_tree with room for 16 nodes of depth 8 */
static int32_t tree(void *state, const int32_t *h, int64_t n, int32_t *parent, int32_t *token) {
    int32_t n_nodes = -1;
    int has_q = 1;
    assert_int_equal(ops->propose_tree(state, h, n, 16, 8, parent, token, &n_nodes, NULL, &has_q,
                                       NULL),
                     SPECD_OK);
    assert_int_equal(has_q, 0);
    for (int32_t i = 0; i < n_nodes; i++) assert_true(parent[i] >= -1 && parent[i] < i);
    return n_nodes;
}

static int32_t chain(void *state, const int32_t *h, int64_t n, int32_t *draft) {
    int32_t n_draft = -1;
    int has_q = 1;
    assert_int_equal(ops->propose(state, h, n, 8, draft, &n_draft, NULL, &has_q, NULL), SPECD_OK);
    return n_draft;
}

/* "1 2 3 4 5 1 2 3": "1 2 3" occurred before (and now, at the end: count 2), followed by 4 5 1;
 * three tokens, as long as the match, each at probability 1/2. */
static void test_proposes_its_own_continuation(void **s) {
    (void)s;
    void *state = make("", NULL);
    const int32_t h[] = {1, 2, 3, 4, 5, 1, 2, 3};
    int32_t parent[16], token[16];
    assert_int_equal(tree(state, h, 8, parent, token), 3);
    const int32_t want[] = {4, 5, 1}, want_parent[] = {-1, 0, 1};
    assert_memory_equal(token, want, sizeof want);
    assert_memory_equal(parent, want_parent, sizeof want_parent);
    int32_t draft[8];
    assert_int_equal(chain(state, h, 8, draft), 3);
    assert_memory_equal(draft, want, sizeof want);
    ops->destroy(state);
    /* paths below min_token_prob are not proposed; max_spec_offset adds tokens */
    state = make("min_token_prob=0.6", NULL);
    assert_int_equal(tree(state, h, 8, parent, token), 0);
    ops->destroy(state);
    state = make("max_spec_offset=1", NULL);
    assert_int_equal(tree(state, h, 8, parent, token), 4);
    ops->destroy(state);
    /* nothing repeats: nothing to propose */
    state = make("", NULL);
    const int32_t plain[] = {1, 2, 3, 4, 5, 6};
    assert_int_equal(tree(state, plain, 6, parent, token), 0);
    ops->destroy(state);
}

/* "7 1 2 | 7 1 2 | 7 1 3 | 7 1": after "7 1", 2 (2 of 4) and 3 (1 of 4); a tree has both
 * children of the pending token, a chain (use_tree=0) only the likelier. */
static void test_tree_branches_by_frequency(void **s) {
    (void)s;
    const int32_t h[] = {7, 1, 2, 7, 1, 2, 7, 1, 3, 7, 1};
    int32_t parent[16], token[16];
    void *state = make("max_spec_offset=4", NULL);
    int32_t n = tree(state, h, 11, parent, token);
    int roots = 0;
    assert_true(n >= 2);
    assert_int_equal(token[0], 2); /* the likelier first */
    for (int32_t i = 0; i < n; i++)
        if (parent[i] == -1) roots |= token[i] == 2 ? 1 : token[i] == 3 ? 2 : 4;
    assert_int_equal(roots, 3);
    ops->destroy(state);
    state = make("max_spec_offset=4,use_tree=0", NULL);
    n = tree(state, h, 11, parent, token);
    assert_true(n >= 1);
    assert_int_equal(token[0], 2);
    for (int32_t i = 0; i < n; i++) assert_int_equal(parent[i], i - 1);
    ops->destroy(state);
}

/* use_tree=auto: trees until the guard's measured row cost says a branch does not pay (0.1 of a
 * plain step or more), chains then, trees again when rows turn cheap; use_tree=1 keeps trees. */
static void test_tree_or_chain_by_observed_cost(void **s) {
    (void)s;
    const int32_t h[] = {7, 1, 2, 7, 1, 2, 7, 1, 3, 7, 1};
    int32_t parent[16], token[16];
    const char *opts[] = {"max_spec_offset=4", "max_spec_offset=4,use_tree=1"};
    for (int forced = 0; forced < 2; forced++) {
        void *state = make(opts[forced], NULL);
        const double costs[] = {-1.0, 0.3, 0.01};
        for (int c = 0; c < 3; c++) {
            if (costs[c] >= 0) ops->observe_cost(state, costs[c]);
            int32_t n = tree(state, h, 11, parent, token), roots = 0;
            assert_true(n >= 1);
            for (int32_t i = 0; i < n; i++) roots += parent[i] == -1;
            /* before a measurement and at 0.01: both children of the pending token */
            assert_int_equal(roots, forced || costs[c] < 0.1 ? 2 : 1);
        }
        ops->destroy(state);
    }
}

/* A request that ended feeds the next one's drafts through the shared cache, and only through
 * it: without one (max_cached_requests=0, or no shared state) the new request has nothing. Only
 * its answer is cached (from the token before the first history the policy saw), not its prompt. */
static void test_global_cache_feeds_later_requests(void **s) {
    (void)s;
    /* prompt 20 21 22 23 24, then the answer 5 6 7 8 9 10 11 12 */
    const int32_t first[] = {20, 21, 22, 23, 24, 5, 6, 7, 8, 9, 10, 11, 12};
    const int32_t second[] = {1, 2, 5, 6, 7};
    const int32_t asks_prompt[] = {1, 21, 22};
    int32_t parent[16], token[16];
    void *shared = make_shared("");
    assert_non_null(shared);
    void *a = make("", shared);
    ops->advance(a, first, 5);
    ops->advance(a, first, 13);
    ops->destroy(a); /* ended: its answer cached, with the prompt's last token before it */
    specd_suffix_cache_stats st;
    specd_suffix_cache_stats_get(shared, &st);
    assert_int_equal(st.n_requests, 1);
    assert_int_equal(st.n_tokens, 9);
    void *b = make("", shared);
    /* "5 6 7" went on 8 9 10 in the ended request's answer; as long as the match */
    assert_int_equal(tree(b, second, 5, parent, token), 3);
    const int32_t want[] = {8, 9, 10};
    assert_memory_equal(token, want, sizeof want);
    ops->destroy(b);
    /* "21 22" went on 23 in the ended request's prompt, which is not cached */
    void *c = make("", shared);
    assert_int_equal(tree(c, asks_prompt, 3, parent, token), 0);
    ops->destroy(c);
    specd_suffix_cache_stats_get(shared, &st);
    assert_int_equal(st.n_requests, 3);
    assert_true(st.n_hits >= 1);
    ops->shared_destroy(shared);

    void *none = make_shared("max_cached_requests=0");
    assert_null(none);
    ops->shared_destroy(none);
    void *alone = make("", NULL);
    assert_int_equal(tree(alone, second, 5, parent, token), 0);
    ops->destroy(alone);
}

/* The sequence's own draft wins where it matched more of the history than the global cache's,
 * though the cache's counts (a phrase in many answers) promise more: "4 5" went on 7 8 in every
 * cached answer, but this request's own "3 4 5" went on 9. */
static void test_own_longer_match_beats_the_cache(void **s) {
    (void)s;
    const int32_t answer[] = {30, 4, 5, 7, 8, 4, 5, 7, 8, 4, 5, 7, 8};
    const int32_t h[] = {3, 4, 5, 9, 1, 3, 4, 5};
    int32_t parent[16], token[16];
    void *shared = make_shared("");
    void *a = make("", shared);
    ops->advance(a, answer, 1);
    ops->advance(a, answer, 13);
    ops->destroy(a);
    void *b = make("", shared);
    assert_true(tree(b, h, 8, parent, token) >= 1);
    assert_int_equal(token[0], 9);
    ops->destroy(b);
    /* where the request has no match of its own, the cache's draft */
    void *c = make("", shared);
    const int32_t only_cache[] = {1, 2, 4, 5};
    assert_true(tree(c, only_cache, 4, parent, token) >= 1);
    assert_int_equal(token[0], 7);
    ops->destroy(c);
    ops->shared_destroy(shared);
}

/* The history handed in is authoritative: after a rollback, or a history that changed under the
 * policy, it proposes what a fresh policy proposes on that history. */
static void test_changed_history_is_followed(void **s) {
    (void)s;
    int32_t h1[64], h2[64];
    uint32_t x = 12345;
    for (int i = 0; i < 64; i++) {
        x = x * 1103515245u + 12345u;
        h1[i] = (int32_t)((x >> 16) % 6);
        h2[i] = i < 30 ? h1[i] : (int32_t)((x >> 20) % 6);
    }
    int32_t p1[16], t1[16], p2[16], t2[16];
    const int64_t cuts[] = {64, 63, 40, 31, 5, 1};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        void *moved = make("", NULL);
        ops->advance(moved, h1, 64);
        tree(moved, h1, 64, p1, t1); /* indexed */
        /* a rollback to cuts[c], then the other history's tokens */
        ops->rollback(moved, cuts[c]);
        int32_t n_m = tree(moved, h2, 50, p1, t1);
        void *fresh = make("", NULL);
        int32_t n_f = tree(fresh, h2, 50, p2, t2);
        assert_int_equal(n_m, n_f);
        assert_memory_equal(t1, t2, (size_t)n_m * sizeof *t1);
        assert_memory_equal(p1, p2, (size_t)n_m * sizeof *p1);
        /* and without a rollback: a history that changed at token 30 */
        assert_int_equal(tree(moved, h1, 64, p1, t1), tree(fresh, h1, 64, p2, t2));
        ops->destroy(moved);
        ops->destroy(fresh);
    }
}

static void test_bad_options_are_refused(void **s) {
    (void)s;
    const char *bad[] = {"max_tree_depth=0",   "max_tree_depth=65",   "min_token_prob=1.5",
                         "max_cache_bytes=10", "max_cached_requests=-1", "use_tree=2",
                         "bogus=1",            "max_spec_factor=x"};
    specd_policy_env env = {.n_vocab = 100, .max_draft = 8};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *state = NULL;
        specd_error err;
        assert_int_equal(ops->create(&env, bad[i], &state, &err), SPECD_E_INVALID_ARG);
        assert_null(state);
        assert_int_equal(ops->shared_create(&env, bad[i], &state, &err), SPECD_E_INVALID_ARG);
    }
}

/* 10,000 random requests through the cache: never over its byte bound nor its request bound,
 * its counts always those of the requests it holds. Two bounds, each the one that binds. */
static void run_bounded(int32_t max_requests, size_t max_bytes, int32_t vocab) {
    specd_suffix_cache *c = NULL;
    assert_int_equal(specd_suffix_cache_create(8, max_requests, max_bytes, &c, NULL), SPECD_OK);
    int32_t req[400];
    uint64_t r = 88172645463325252ull;
    int64_t held_max = 0;
    for (int i = 0; i < 10000; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int64_t n = 1 + (int64_t)(r % 48);
        if (i % 1000 == 999) n = 400; /* a long one now and then */
        for (int64_t j = 0; j < n; j++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            req[j] = (int32_t)(r % (uint64_t)vocab);
        }
        assert_int_equal(specd_suffix_cache_insert(c, req, n, NULL), SPECD_OK);
        specd_suffix_cache_stats st;
        specd_suffix_cache_stats_get(c, &st);
        assert_true(st.bytes <= max_bytes);
        assert_true(st.n_requests <= max_requests);
        assert_true(st.n_requests >= 1); /* the newest always fits */
        held_max = st.n_requests > held_max ? st.n_requests : held_max;
        if (i % 2500 == 0) assert_true(specd_suffix_cache_check(c));
    }
    assert_true(specd_suffix_cache_check(c));
    specd_suffix_cache_stats st;
    specd_suffix_cache_stats_get(c, &st);
    assert_true(st.n_evicted > 0);
    fprintf(stderr, "cache %d requests, %zu bytes: held up to %lld, now %lld requests, %lld "
            "nodes, %zu bytes\n", max_requests, max_bytes, (long long)held_max,
            (long long)st.n_requests, (long long)st.n_nodes, st.bytes);
    while (specd_suffix_cache_evict_oldest(c)) {
    }
    assert_true(specd_suffix_cache_check(c));
    specd_suffix_cache_stats_get(c, &st);
    assert_int_equal(st.n_nodes, 1);
    specd_suffix_cache_destroy(c);
}

static void test_cache_stays_within_bounds(void **s) {
    (void)s;
    run_bounded(500, (size_t)64 << 20, 50);  /* the request bound binds */
    run_bounded(10000, (size_t)2 << 20, 5000); /* the byte bound binds */
}

int main(void) {
    ops = specd_policy_find("suffix");
    if (!ops) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proposes_its_own_continuation),
        cmocka_unit_test(test_tree_branches_by_frequency),
        cmocka_unit_test(test_tree_or_chain_by_observed_cost),
        cmocka_unit_test(test_global_cache_feeds_later_requests),
        cmocka_unit_test(test_own_longer_match_beats_the_cache),
        cmocka_unit_test(test_changed_history_is_followed),
        cmocka_unit_test(test_bad_options_are_refused),
        cmocka_unit_test(test_cache_stays_within_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
