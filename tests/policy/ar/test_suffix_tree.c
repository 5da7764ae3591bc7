/* The suffix trie of policy `suffix` against a brute-force oracle: on random sequences over small
 * vocabularies every substring's count is its number of occurrences found by a direct scan, every
 * node's children are the tokens that follow it with their counts, the longest suffix match is
 * the longest suffix that occurs; removing a sequence or popping tokens gives what a trie of the
 * rest holds; speculation follows the counts. */
#include "test_main.h"

#include "policy/ar/suffix_tree.h"

#include <string.h>

enum { MAX_SEQS = 4, MAX_LEN = 48 };

typedef struct corpus {
    int32_t tok[MAX_SEQS][MAX_LEN];
    int64_t len[MAX_SEQS];
    int alive[MAX_SEQS];
} corpus;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* occurrences of s[0..n) inside the live sequences, never across two */
static int64_t occurrences(const corpus *c, const int32_t *s, int64_t n) {
    int64_t k = 0;
    for (int q = 0; q < MAX_SEQS; q++)
        for (int64_t i = 0; c->alive[q] && i + n <= c->len[q]; i++)
            k += !memcmp(c->tok[q] + i, s, (size_t)n * sizeof *s);
    return k;
}

static int64_t total_tokens(const corpus *c) {
    int64_t n = 0;
    for (int q = 0; q < MAX_SEQS; q++) n += c->alive[q] ? c->len[q] : 0;
    return n;
}

/* Every string over the vocabulary up to the trie's depth (the vocabulary and depth are small):
 * its count and its children equal the oracle's; absent strings are not found. */
static void check_all(const specd_suffix_tree *t, const corpus *c, int32_t vocab, int32_t depth) {
    assert_true(specd_suffix_tree_check(t));
    assert_int_equal(specd_suffix_tree_count(t, SPECD_SUFFIX_ROOT), total_tokens(c));
    int32_t s[8];
    int64_t distinct = 1; /* the root */
    for (int32_t len = 1; len <= depth; len++) {
        int64_t combos = 1;
        for (int32_t i = 0; i < len; i++) combos *= vocab;
        for (int64_t code = 0; code < combos; code++) {
            int64_t v = code;
            for (int32_t i = 0; i < len; i++, v /= vocab) s[i] = (int32_t)(v % vocab);
            int64_t want = occurrences(c, s, len);
            int32_t x = specd_suffix_tree_find(t, s, len);
            if (want == 0) {
                assert_int_equal(x, -1);
                continue;
            }
            distinct++;
            assert_true(x > 0);
            assert_int_equal(specd_suffix_tree_count(t, x), want);
            assert_int_equal(specd_suffix_tree_token(t, x), s[len - 1]);
            /* children: exactly the following tokens, each with its count */
            int64_t n_kids = 0;
            for (int32_t k = specd_suffix_tree_first_child(t, x); k >= 0;
                 k = specd_suffix_tree_next_sibling(t, k), n_kids++) {
                s[len] = specd_suffix_tree_token(t, k);
                assert_true(len < depth);
                assert_int_equal(specd_suffix_tree_count(t, k), occurrences(c, s, len + 1));
            }
            int64_t want_kids = 0;
            for (int32_t tok = 0; len < depth && tok < vocab; tok++) {
                s[len] = tok;
                want_kids += occurrences(c, s, len + 1) > 0;
            }
            assert_int_equal(n_kids, want_kids);
        }
    }
    assert_int_equal(specd_suffix_tree_nodes(t), distinct);
}

/* The longest suffix of ctx that occurs, at most depth long, by scanning. */
static int32_t oracle_match(const corpus *c, const int32_t *ctx, int64_t n, int32_t depth) {
    int32_t m = 0;
    for (int32_t len = 1; len <= depth && len <= n; len++)
        if (occurrences(c, ctx + n - len, len) > 0) m = len;
        else break;
    return m;
}

static void check_matches(const specd_suffix_tree *t, const corpus *c, int32_t vocab,
                          int32_t depth) {
    for (int trial = 0; trial < 40; trial++) {
        int32_t ctx[16];
        int64_t n = 1 + next_u32() % 16;
        for (int64_t i = 0; i < n; i++) ctx[i] = (int32_t)(next_u32() % (uint32_t)vocab);
        int32_t nodes[SPECD_SUFFIX_MAX_DEPTH + 1];
        int32_t m = specd_suffix_tree_match(t, ctx, n, nodes);
        assert_int_equal(m, oracle_match(c, ctx, n, depth));
        for (int32_t len = 1; len <= m; len++)
            assert_int_equal(nodes[len], specd_suffix_tree_find(t, ctx + n - len, len));
    }
}

static void append_seq(specd_suffix_tree *t, corpus *c, int q, int64_t len, int32_t vocab) {
    c->len[q] = len;
    c->alive[q] = 1;
    for (int64_t i = 0; i < len; i++) {
        c->tok[q][i] = (int32_t)(next_u32() % (uint32_t)vocab);
        assert_int_equal(specd_suffix_tree_append(t, c->tok[q][i], NULL), SPECD_OK);
    }
}

static void test_counts_children_and_matches_equal_the_oracle(void **st) {
    (void)st;
    const int32_t vocabs[] = {2, 3, 5}, depths[] = {1, 3, 5};
    for (int v = 0; v < 3; v++)
        for (int d = 0; d < 3; d++)
            for (int round = 0; round < 3; round++) {
                int32_t vocab = vocabs[v], depth = depths[d];
                specd_suffix_tree *t = NULL;
                assert_int_equal(specd_suffix_tree_create(depth, &t, NULL), SPECD_OK);
                corpus c = {0};
                for (int q = 0; q < MAX_SEQS; q++) {
                    append_seq(t, &c, q, 1 + next_u32() % MAX_LEN, vocab);
                    specd_suffix_tree_end_sequence(t);
                }
                check_all(t, &c, vocab, depth);
                check_matches(t, &c, vocab, depth);
                /* removal: what is left is what the other sequences alone make */
                for (int q = 0; q < MAX_SEQS; q++) {
                    int victim = (q * 3 + round) % MAX_SEQS;
                    specd_suffix_tree_remove(t, c.tok[victim], c.len[victim]);
                    c.alive[victim] = 0;
                    check_all(t, &c, vocab, depth);
                    check_matches(t, &c, vocab, depth);
                }
                assert_int_equal(specd_suffix_tree_nodes(t), 1);
                specd_suffix_tree_destroy(t);
            }
}

static void test_pop_gives_the_shorter_sequence(void **st) {
    (void)st;
    for (int round = 0; round < 12; round++) {
        int32_t vocab = 2 + round % 3, depth = 1 + round % 5;
        specd_suffix_tree *t = NULL;
        assert_int_equal(specd_suffix_tree_create(depth, &t, NULL), SPECD_OK);
        corpus c = {0};
        append_seq(t, &c, 0, 1 + next_u32() % MAX_LEN, vocab); /* a closed sequence beside */
        specd_suffix_tree_end_sequence(t);
        append_seq(t, &c, 1, 1 + next_u32() % MAX_LEN, vocab); /* the open one, popped */
        int64_t keep = (int64_t)(next_u32() % (uint32_t)c.len[1]);
        while (c.len[1] > keep) {
            specd_suffix_tree_pop(t, c.tok[1], c.len[1]);
            c.len[1]--;
            check_all(t, &c, vocab, depth);
        }
        /* appending goes on from the shorter sequence: as if the popped tokens never came */
        int64_t more = 1 + next_u32() % (MAX_LEN - keep);
        for (int64_t i = 0; i < more; i++) {
            c.tok[1][c.len[1]] = (int32_t)(next_u32() % (uint32_t)vocab);
            assert_int_equal(specd_suffix_tree_append(t, c.tok[1][c.len[1]++], NULL), SPECD_OK);
        }
        check_all(t, &c, vocab, depth);
        specd_suffix_tree_destroy(t);
    }
}

/* A byte limit stops growth with SPECD_E_NOMEM and leaves the trie as it was. */
static void test_byte_limit_refuses_growth(void **st) {
    (void)st;
    specd_suffix_tree *t = NULL;
    assert_int_equal(specd_suffix_tree_create(8, &t, NULL), SPECD_OK);
    size_t first = specd_suffix_tree_bytes(t);
    specd_suffix_tree_set_max_bytes(t, first);
    specd_status s = SPECD_OK;
    int64_t n = 0;
    while ((s = specd_suffix_tree_append(t, (int32_t)next_u32() % 1000, NULL)) == SPECD_OK) n++;
    assert_int_equal(s, SPECD_E_NOMEM);
    assert_true(n > 0);
    assert_int_equal(specd_suffix_tree_count(t, SPECD_SUFFIX_ROOT), n);
    assert_true(specd_suffix_tree_bytes(t) <= first);
    assert_true(specd_suffix_tree_check(t));
    specd_suffix_tree_destroy(t);
}

/* Speculation from "1 2 3" in "1 2 3 4 | 1 2 3 4 | 1 2 3 5 | 1 2 3": 4 follows with 2/4, 5 with
 * 1/4; the chain takes 4, the tree also 5 when min_prob allows, after 4's own children. */
static void test_speculation_follows_counts(void **st) {
    (void)st;
    const int32_t text[] = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3};
    specd_suffix_tree *t = NULL;
    assert_int_equal(specd_suffix_tree_create(8, &t, NULL), SPECD_OK);
    for (size_t i = 0; i < sizeof text / sizeof text[0]; i++)
        assert_int_equal(specd_suffix_tree_append(t, text[i], NULL), SPECD_OK);
    int32_t parent[16], token[16];
    float prob[16];
    specd_suffix_draft d = {.parent = parent, .token = token, .prob = prob};
    specd_suffix_spec_params p = {.max_nodes = 16, .max_depth = 8, .spec_factor = 1.0f,
                                  .min_prob = 0.2f, .use_tree = 0};
    const int64_t n = sizeof text / sizeof text[0];
    specd_suffix_tree_speculate(t, text, n, &p, &d);
    /* "5 1 2 3" and longer suffixes occur only at the end; "1 2 3" (4 times) is the longest with
     * a continuation: 4 (2 of 4), then "1 2 3 4" always goes on 1 2 */
    assert_int_equal(d.match_len, 3);
    assert_int_equal(d.n, 3);
    const int32_t want[] = {4, 1, 2};
    assert_memory_equal(token, want, sizeof want);
    assert_int_equal(parent[0], -1);
    for (int32_t i = 1; i < d.n; i++) assert_int_equal(parent[i], i - 1);
    float score = 0;
    for (int32_t i = 0; i < d.n; i++) {
        assert_true(prob[i] >= p.min_prob);
        assert_true(i == 0 || prob[i] <= prob[i - 1]);
        score += prob[i];
    }
    assert_float_equal(d.score, score, 1e-5);
    assert_true(d.n <= d.match_len);
    /* a tree from the match "1 2 3" (count 4) has both 4 (0.5) and 5 (0.25) at depth 1 */
    p.use_tree = 1;
    p.spec_offset = 8;
    specd_suffix_tree_speculate(t, text, n, &p, &d);
    int has4 = 0, has5 = 0;
    for (int32_t i = 0; i < d.n; i++) {
        assert_true(parent[i] < i);
        if (parent[i] == -1) {
            has4 |= token[i] == 4;
            has5 |= token[i] == 5;
        }
    }
    assert_true(has4 && has5);
    /* min_prob above every path: nothing */
    p.min_prob = 0.9f;
    specd_suffix_tree_speculate(t, text, n, &p, &d);
    assert_int_equal(d.n, 0);
    /* depth 1 only: only children of the pending token */
    p.min_prob = 0.0f;
    p.max_depth = 1;
    specd_suffix_tree_speculate(t, text, n, &p, &d);
    for (int32_t i = 0; i < d.n; i++) assert_int_equal(parent[i], -1);
    specd_suffix_tree_destroy(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_children_and_matches_equal_the_oracle),
        cmocka_unit_test(test_pop_gives_the_shorter_sequence),
        cmocka_unit_test(test_byte_limit_refuses_growth),
        cmocka_unit_test(test_speculation_follows_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
