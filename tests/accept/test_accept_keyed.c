/* Keyed chains (specd_accept_chain_keyed): explicit key rows, key positions and an
 * optional bonus row.
 *
 *  - Identity: key rows that point at a permuted, duplicated copy of the ordinary chain's rows
 *    (padded with unread rows) decide exactly what specd_accept_chain decides on the ordinary
 *    rows, under every rule, for many keys; explicit positions equal to the implied ones change
 *    nothing.
 *  - No bonus row: the same decisions, but a fully accepted chain emits its k drafts and nothing
 *    more.
 *  - Positions: a correction is keyed on the position given for its slot.
 *  - Statistics (REJECTION, no bonus, permuted rows): the first emitted token follows p0, the
 *    second (when the first draft was accepted) p1, and the accepted length 0..k follows
 *    alpha0 / alpha1, by G-tests; the same harness rejects an engine that resamples from p
 *    instead of the residual, so the check can fail.
 *  - Bad keys are refused and leave the result untouched. */
#include "test_main.h"

#include <math.h>
#include <string.h>

#include "common/philox.h"
#include "gof.h"
#include "specd/specd.h"
#include "verifier/accept/accept_internal.h"

#define V 24
#define K 4
#define PAD 3 /* unread rows in the keyed block */
#define ROWS (2 * (K + 1) + PAD)

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}
static double unif(uint64_t *s) {
    return ((double)lcg(s) + 0.5) / 2147483648.0;
}

static specd_accept *make(specd_accept_rule rule, float temperature) {
    specd_accept_params p = specd_accept_default_params();
    p.rule = rule;
    p.sampling.temperature = temperature;
    p.max_k = K;
    p.max_vocab = V;
    specd_accept *a = NULL;
    specd_error err;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_OK);
    return a;
}

/* The ordinary rows 0..K, and a keyed block of ROWS rows holding each of them twice at shuffled
 * slots among noise rows. */
typedef struct layout {
    float plain[(K + 1) * V];
    float keyed[ROWS * V];
    int32_t key_row[K];
    int32_t bonus_row;
    uint32_t pos[K + 1];
} layout;

/* Row r of the ordinary chain is written to two slots of the keyed block; the key rows name one
 * of them (alternating), the other is a duplicate nobody reads. */
static void make_layout(layout *l, uint64_t *s, int peaked) {
    for (int i = 0; i < (K + 1) * V; i++)
        l->plain[i] = (float)(unif(s) * (peaked ? 14.0 : 2.0) - 1.0);
    for (int i = 0; i < ROWS * V; i++)
        l->keyed[i] = (float)(unif(s) * 30.0 - 15.0);
    int32_t slot[ROWS];
    for (int i = 0; i < ROWS; i++)
        slot[i] = i;
    for (int i = ROWS - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(lcg(s) % (uint64_t)(i + 1)), t = slot[i];
        slot[i] = slot[j];
        slot[j] = t;
    }
    for (int r = 0; r <= K; r++) {
        int32_t a = slot[2 * r], b = slot[2 * r + 1];
        memcpy(l->keyed + (size_t)a * V, l->plain + (size_t)r * V, V * sizeof(float));
        memcpy(l->keyed + (size_t)b * V, l->plain + (size_t)r * V, V * sizeof(float));
        int32_t use = (r & 1) ? a : b;
        if (r < K)
            l->key_row[r] = use;
        else
            l->bonus_row = use;
    }
}

/* Drafts: mostly the row's argmax (so chains get accepted), sometimes another token. */
static void make_drafts(const layout *l, uint64_t *s, int32_t *draft, float *q) {
    for (int i = 0; i < K; i++) {
        const float *row = l->plain + (size_t)i * V;
        int32_t best = 0;
        for (int x = 1; x < V; x++)
            if (row[x] > row[best]) best = x;
        draft[i] = (lcg(s) % 4) ? best : (int32_t)(lcg(s) % V);
        double sum = 0.0;
        for (int x = 0; x < V; x++)
            sum += q[i * V + x] = (float)(0.05 + unif(s));
        for (int x = 0; x < V; x++)
            q[i * V + x] = (float)(q[i * V + x] / sum);
    }
}

static void run_identity(specd_accept_rule rule, float temperature, int with_q) {
    specd_accept *a = make(rule, temperature);
    uint64_t s = 0x9e3779b97f4a7c15ULL ^ (uint64_t)rule ^ ((uint64_t)with_q << 8);
    int n_full = 0, n_reject = 0;
    for (int t = 0; t < 400; t++) {
        layout l;
        make_layout(&l, &s, t & 1);
        int32_t draft[K];
        float q[K * V];
        make_drafts(&l, &s, draft, q);
        int32_t k = 1 + (int32_t)(lcg(&s) % K);
        specd_chain_input in = {
            .k = k,
            .draft = draft,
            .draft_probs = with_q ? q : NULL,
            .q_vocab = V,
            .target_logits = l.plain,
            .n_vocab = V,
            .key = {.seed = 77 + (uint64_t)t, .sequence = 3, .position = 100 + (uint32_t)t}};
        int32_t tok_a[K + 1], tok_b[K + 1], tok_c[K + 1];
        float pr_a[K], pr_b[K];
        specd_chain_result ra = {.tokens = tok_a, .accept_prob = pr_a};
        specd_chain_result rb = {.tokens = tok_b, .accept_prob = pr_b};
        specd_chain_result rc = {.tokens = tok_c};
        specd_error err;
        assert_int_equal(specd_accept_chain(a, &in, &ra, &err), SPECD_OK);

        /* the keyed block, bonus row named, positions implied or explicit */
        if (k < K) l.bonus_row = l.key_row[k]; /* the row after draft k - 1 is row k */
        for (int i = 0; i <= k; i++)
            l.pos[i] = in.key.position + (uint32_t)i;
        specd_chain_input kin = in;
        kin.target_logits = l.keyed;
        specd_chain_keys keys = {.n_rows = ROWS,
                                 .key_row = l.key_row,
                                 .bonus_row = l.bonus_row,
                                 .positions = (t & 2) ? l.pos : NULL};
        assert_int_equal(specd_accept_chain_keyed(a, &kin, &keys, &rb, &err), SPECD_OK);
        assert_int_equal(rb.n_accepted, ra.n_accepted);
        assert_int_equal(rb.n_emitted, ra.n_emitted);
        assert_memory_equal(tok_b, tok_a, (size_t)ra.n_emitted * sizeof(int32_t));
        assert_memory_equal(pr_b, pr_a, (size_t)k * sizeof(float));
        assert_true(rb.lossy == ra.lossy);

        /* no bonus row: the same decisions; a full chain emits its drafts only */
        keys.bonus_row = SPECD_CHAIN_NO_BONUS;
        assert_int_equal(specd_accept_chain_keyed(a, &kin, &keys, &rc, &err), SPECD_OK);
        assert_int_equal(rc.n_accepted, ra.n_accepted);
        if (ra.n_accepted == k) {
            n_full++;
            assert_int_equal(rc.n_emitted, k);
            assert_memory_equal(tok_c, draft, (size_t)k * sizeof(int32_t));
        } else {
            n_reject++;
            assert_int_equal(rc.n_emitted, ra.n_emitted);
            assert_memory_equal(tok_c, tok_a, (size_t)ra.n_emitted * sizeof(int32_t));
        }
    }
    /* both endings were exercised */
    assert_true(n_full > 20 && n_reject > 20);
    specd_accept_destroy(a);
}

static void test_identity_greedy(void **st) {
    (void)st;
    run_identity(SPECD_ACCEPT_GREEDY, 0.0f, 0);
}
static void test_identity_coupled(void **st) {
    (void)st;
    run_identity(SPECD_ACCEPT_COUPLED, 0.7f, 0);
}
static void test_identity_rejection(void **st) {
    (void)st;
    run_identity(SPECD_ACCEPT_REJECTION, 1.0f, 0);
    run_identity(SPECD_ACCEPT_REJECTION, 0.8f, 1);
}

/* A correction is the keyed sample at the position its slot names, not at key.position + i. */
static void test_positions(void **st) {
    (void)st;
    specd_accept *a = make(SPECD_ACCEPT_COUPLED, 0.9f);
    specd_sampling_params sp = specd_sampling_default_params();
    sp.temperature = 0.9f;
    specd_sampler *smp = NULL;
    specd_error err;
    assert_int_equal(specd_sampler_create(&sp, V, &smp, &err), SPECD_OK);
    uint64_t s = 5;
    int moved = 0;
    for (int t = 0; t < 200; t++) {
        float logits[V];
        for (int x = 0; x < V; x++)
            logits[x] = (float)unif(&s);
        specd_sample_key key = {.seed = 9, .sequence = 1, .position = 50};
        uint32_t pos[2] = {1000 + (uint32_t)t * 7, 0};
        int32_t at_pos, at_implied;
        specd_sample_key kp = key;
        kp.position = pos[0];
        assert_int_equal(specd_sampler_sample(smp, logits, V, kp, &at_pos, &err), SPECD_OK);
        assert_int_equal(specd_sampler_sample(smp, logits, V, key, &at_implied, &err), SPECD_OK);
        int32_t draft = (at_pos + 1) % V; /* rejected: the correction is the keyed sample */
        specd_chain_input in = {.k = 1,
                                .draft = &draft,
                                .q_vocab = V,
                                .target_logits = logits,
                                .n_vocab = V,
                                .key = key};
        int32_t key_row = 0, tok[2];
        specd_chain_keys keys = {
            .n_rows = 1, .key_row = &key_row, .bonus_row = SPECD_CHAIN_NO_BONUS, .positions = pos};
        specd_chain_result r = {.tokens = tok};
        assert_int_equal(specd_accept_chain_keyed(a, &in, &keys, &r, &err), SPECD_OK);
        assert_int_equal(r.n_accepted, 0);
        assert_int_equal(r.n_emitted, 1);
        assert_int_equal(tok[0], at_pos);
        moved += at_pos != at_implied;
    }
    assert_true(moved > 20); /* the position really changes the sample */
    specd_sampler_destroy(smp);
    specd_accept_destroy(a);
}

static void test_bad_keys(void **st) {
    (void)st;
    specd_accept *a = make(SPECD_ACCEPT_REJECTION, 1.0f);
    float logits[3 * V];
    for (int i = 0; i < 3 * V; i++)
        logits[i] = (float)(i % 5);
    int32_t draft[2] = {1, 2}, tok[3] = {-7, -7, -7};
    specd_chain_input in = {.k = 2,
                            .draft = draft,
                            .q_vocab = V,
                            .target_logits = logits,
                            .n_vocab = V,
                            .key = {1, 2, 3}};
    specd_chain_result r = {.tokens = tok, .n_accepted = -7, .n_emitted = -7};
    specd_error err;
    struct {
        int32_t key[2];
        int32_t bonus;
        int32_t n_rows;
        const char *fragment;
    } bad[] = {
        {{0, 3}, 2, 3, "key row 3"},
        {{-1, 1}, 2, 3, "key row -1"},
        {{0, 1}, 3, 3, "bonus row 3"},
        {{0, 1}, -2, 3, "bonus row -2"},
        {{0, 0}, SPECD_CHAIN_NO_BONUS, 0, "n_rows 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        specd_chain_keys keys = {
            .n_rows = bad[i].n_rows, .key_row = bad[i].key, .bonus_row = bad[i].bonus};
        assert_int_equal(specd_accept_chain_keyed(a, &in, &keys, &r, &err), SPECD_E_INVALID_ARG);
        if (!strstr(err.message, bad[i].fragment))
            fail_msg("case %zu: '%s' lacks '%s'", i, err.message, bad[i].fragment);
        assert_int_equal(r.n_emitted, -7);
        assert_int_equal(tok[0], -7);
    }
    /* key_row NULL reads rows 0..k-1, so it needs k rows */
    specd_chain_keys keys = {.n_rows = 1, .bonus_row = SPECD_CHAIN_NO_BONUS};
    assert_int_equal(specd_accept_chain_keyed(a, &in, &keys, &r, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_accept_chain_keyed(a, &in, NULL, &r, &err), SPECD_E_INVALID_ARG);
    specd_accept_destroy(a);
}

/* ---- statistics ------------------------------------------------------------------------------ */

enum { SV = 8, SK = 2 };

typedef struct stat_counts {
    uint64_t first[SV], second[SV], len[SK + 1];
    uint64_t n, n_second;
} stat_counts;

/* A position-only target p_i and drafter q_i over SV tokens; the keyed block holds row i at slot
 * 2 - i (reversed) and no bonus row. Drafts come from q by the test's own Philox stream, the
 * engine's uniforms from its keyed streams, one key per draw. */
static void stat_run(specd_accept_mutant mutant, const float p_logits[SK][SV],
                     const double q[SK][SV], uint64_t n, stat_counts *c) {
    specd_accept *a = make(SPECD_ACCEPT_REJECTION, 1.0f);
    specd_accept_debug_mutate(a, mutant);
    float block[(SK + 1) * SV];
    for (int x = 0; x < SV; x++)
        block[SK * SV + x] = -3.0f; /* never read */
    for (int i = 0; i < SK; i++)
        memcpy(block + (size_t)(SK - 1 - i) * SV, p_logits[i], sizeof p_logits[i]);
    int32_t key_row[SK];
    for (int i = 0; i < SK; i++)
        key_row[i] = SK - 1 - i;
    float qf[SK * SV];
    for (int i = 0; i < SK; i++)
        for (int x = 0; x < SV; x++)
            qf[i * SV + x] = (float)q[i][x];
    memset(c, 0, sizeof *c);
    uint32_t ctr[4] = {0}, key[2] = {0x6b657965u, 0x64636861u}, out[4];
    for (uint64_t d = 0; d < n; d++) {
        ctr[0] = (uint32_t)d;
        ctr[1] = (uint32_t)(d >> 32);
        specd_philox4x32_10_block(ctr, key, out);
        int32_t draft[SK];
        for (int i = 0; i < SK; i++) {
            double u = ((double)out[i] + 0.5) / 4294967296.0, acc = 0.0;
            int32_t x = SV - 1;
            for (int y = 0; y < SV; y++)
                if (u < (acc += q[i][y])) {
                    x = y;
                    break;
                }
            draft[i] = x;
        }
        specd_chain_input in = {
            .k = SK,
            .draft = draft,
            .draft_probs = qf,
            .q_vocab = SV,
            .target_logits = block,
            .n_vocab = SV,
            .key = {.seed = 1234, .sequence = (uint32_t)d, .position = (uint32_t)(d >> 32)}};
        specd_chain_keys keys = {
            .n_rows = SK + 1, .key_row = key_row, .bonus_row = SPECD_CHAIN_NO_BONUS};
        int32_t tok[SK];
        specd_chain_result r = {.tokens = tok};
        specd_error err;
        if (specd_accept_chain_keyed(a, &in, &keys, &r, &err) != SPECD_OK)
            fail_msg("draw %llu: %s", (unsigned long long)d, err.message);
        c->first[tok[0]]++;
        c->len[r.n_accepted]++;
        if (r.n_accepted >= 1) {
            assert_int_equal(r.n_emitted, 2);
            c->second[tok[1]]++;
            c->n_second++;
        } else {
            assert_int_equal(r.n_emitted, 1);
        }
    }
    c->n = n;
    specd_accept_destroy(a);
}

/* The smallest of the three G-test p-values. */
static double stat_pmin(const stat_counts *c, const double p[SK][SV], double alpha0,
                        double alpha1) {
    double len_p[SK + 1] = {1.0 - alpha0, alpha0 * (1.0 - alpha1), alpha0 * alpha1};
    double p1 = gof_pvalue(c->first, p[0], SV, c->n);
    double p2 = gof_pvalue(c->second, p[1], SV, c->n_second);
    double p3 = gof_pvalue(c->len, len_p, SK + 1, c->n);
    double m = p1 < p2 ? p1 : p2;
    return m < p3 ? m : p3;
}

static void test_rejection_statistics(void **st) {
    (void)st;
    float lp[SK][SV];
    double p[SK][SV], q[SK][SV], alpha[SK];
    uint64_t s = 2024;
    for (int i = 0; i < SK; i++) {
        double zs = 0.0, qs = 0.0;
        for (int x = 0; x < SV; x++) {
            lp[i][x] = (float)(unif(&s) * 3.0 - 1.5);
            zs += exp((double)lp[i][x]);
            qs += q[i][x] = 0.1 + unif(&s);
        }
        alpha[i] = 0.0;
        for (int x = 0; x < SV; x++) {
            p[i][x] = exp((double)lp[i][x]) / zs;
            q[i][x] /= qs;
            alpha[i] += p[i][x] < q[i][x] ? p[i][x] : q[i][x];
        }
    }
    const uint64_t n = 200000;
    stat_counts c;
    stat_run(SPECD_MUTANT_NONE, lp, q, n, &c);
    double pmin = stat_pmin(&c, p, alpha[0], alpha[1]);
    /* three tests at a family-wise level of 1e-3 */
    if (!(pmin > 1e-3 / 3.0)) fail_msg("keyed chain output does not follow p: p-value %g", pmin);
    /* power: resampling from p instead of the residual skews the first token */
    stat_run(SPECD_MUTANT_RESIDUAL_IS_P, lp, q, n, &c);
    pmin = stat_pmin(&c, p, alpha[0], alpha[1]);
    if (!(pmin < 1e-6)) fail_msg("the wrong rule passed: p-value %g", pmin);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_greedy),    cmocka_unit_test(test_identity_coupled),
        cmocka_unit_test(test_identity_rejection), cmocka_unit_test(test_positions),
        cmocka_unit_test(test_bad_keys),           cmocka_unit_test(test_rejection_statistics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
