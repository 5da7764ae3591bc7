/* Deterministic properties of the acceptance rules and the sampling transform: coupled verification
 * is token-identical to direct keyed sampling, greedy matches argmax, the per-position
 * probabilities are the transform's, tau marks results lossy, filters keep what they promise. */
#include "test_main.h"

#include <math.h>
#include <string.h>

#include "common/fastmath.h"
#include "common/philox.h"
#include "gof.h"
#include "specd/specd.h"
#include "verifier/accept/xform.h"

#define MAXV 300
#define GOLDEN_HASH 0xc083dab95f2be8f9ull
#define MAXK 8

/* Test-side randomness: its own Philox stream, unrelated to the engine's keys. */
typedef struct trng {
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t buf[4];
    int left;
} trng;

static void trng_init(trng *r, uint64_t seed) {
    memset(r, 0, sizeof *r);
    r->key[0] = (uint32_t)seed ^ 0x7e57u;
    r->key[1] = (uint32_t)(seed >> 32) ^ 0xab1eu;
}
static uint32_t trng_u32(trng *r) {
    if (r->left == 0) {
        r->ctr[0]++;
        specd_philox4x32_10_block(r->ctr, r->key, r->buf);
        r->left = 4;
    }
    return r->buf[--r->left];
}
static int32_t trng_int(trng *r, int32_t n) { return (int32_t)(trng_u32(r) % (uint32_t)n); }
static double trng_unif(trng *r) { return ((double)trng_u32(r) + 0.5) / 4294967296.0; }
static float trng_normal(trng *r) {
    return (float)(sqrt(-2.0 * log(trng_unif(r))) * cos(6.283185307179586 * trng_unif(r)));
}

typedef struct rcase {
    specd_sampling_params sp;
    specd_logit_bias bias[4];
    int32_t v, k;
} rcase;

static void random_params(trng *r, rcase *c) {
    c->sp = specd_sampling_default_params();
    const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.0f, 1.5f};
    c->sp.temperature = temps[trng_int(r, 6)];
    if (trng_int(r, 3) == 0) c->sp.top_k = 1 + trng_int(r, 20);
    if (trng_int(r, 3) == 0) c->sp.top_p = 0.5f + 0.5f * (float)trng_unif(r);
    if (trng_int(r, 4) == 0) c->sp.min_p = 0.2f * (float)trng_unif(r);
    c->v = 2 + trng_int(r, MAXV - 1);
    c->k = 1 + trng_int(r, MAXK);
    if (trng_int(r, 4) == 0) {
        int nb = 1 + trng_int(r, 4);
        for (int i = 0; i < nb; i++) {
            c->bias[i].token = (i * 37 + trng_int(r, 7)) % c->v;
            c->bias[i].bias = trng_int(r, 5) == 0 ? -INFINITY : 3.0f * trng_normal(r);
        }
        /* tokens must be unique: keep the first of any repeat */
        int m = 0;
        for (int i = 0; i < nb; i++) {
            int dup = 0;
            for (int j = 0; j < m; j++) dup |= c->bias[j].token == c->bias[i].token;
            if (!dup) c->bias[m++] = c->bias[i];
        }
        c->sp.bias = c->bias;
        c->sp.n_bias = (size_t)m;
    }
}

static void random_logits(trng *r, float *l, int32_t n) {
    float scale = 0.5f + 4.0f * (float)trng_unif(r);
    for (int32_t i = 0; i < n; i++) l[i] = scale * trng_normal(r);
    if (trng_int(r, 4) == 0) l[trng_int(r, n)] = l[trng_int(r, n)]; /* an exact tie */
}

/* 10,000 random cases: the coupled chain emits exactly the direct keyed samples of its rows, up to
 * and including the first row whose draft differs. Same for a random tree walk and position-wise. */
static void test_coupled_is_token_identical(void **state) {
    (void)state;
    trng r;
    trng_init(&r, 1);
    static float logits[(MAXK + 1) * MAXV];
    int32_t draft[MAXK], tokens[MAXK + 1], direct[MAXK + 1], path[MAXK];
    int32_t accepted_total = 0, mismatches_total = 0;
    for (int it = 0; it < 10000; it++) {
        rcase c;
        random_params(&r, &c);
        specd_accept_params ap = specd_accept_default_params();
        ap.rule = SPECD_ACCEPT_COUPLED;
        ap.sampling = c.sp;
        ap.max_k = MAXK;
        ap.max_vocab = MAXV;
        specd_accept *acc = NULL;
        specd_sampler *smp = NULL;
        specd_error err;
        assert_int_equal(specd_accept_create(&ap, &acc, &err), SPECD_OK);
        assert_int_equal(specd_sampler_create(&c.sp, MAXV, &smp, &err), SPECD_OK);
        specd_sample_key key = {.seed = trng_u32(&r) | ((uint64_t)trng_u32(&r) << 32),
                                .sequence = trng_u32(&r),
                                .position = trng_u32(&r) >> 8};
        for (int i = 0; i <= c.k; i++) {
            random_logits(&r, logits + i * c.v, c.v);
            specd_sample_key ki = key;
            ki.position += (uint32_t)i;
            specd_status st = specd_sampler_sample(smp, logits + i * c.v, c.v, ki, &direct[i], &err);
            if (st != SPECD_OK) { /* the bias banned the whole (tiny) vocabulary: a valid error */
                assert_int_equal(st, SPECD_E_NUMERIC);
                goto next;
            }
        }
        for (int i = 0; i < c.k; i++)
            draft[i] = trng_int(&r, 10) < 8 ? direct[i] : trng_int(&r, c.v);
        specd_chain_input in = {.k = c.k,
                                .draft = draft,
                                .draft_probs = NULL,
                                .q_vocab = 0,
                                .target_logits = logits,
                                .n_vocab = c.v,
                                .key = key};
        specd_chain_result out = {
            .tokens = tokens, .accept_prob = NULL, .n_accepted = 0, .n_emitted = 0, .lossy = false};
        assert_int_equal(specd_accept_chain(acc, &in, &out, &err), SPECD_OK);
        int want = 0;
        while (want < c.k && draft[want] == direct[want]) want++;
        assert_int_equal(out.n_accepted, want);
        for (int i = 0; i <= want; i++) assert_int_equal(tokens[i], direct[i]);
        accepted_total += want;
        mismatches_total += want < c.k;

        /* the same rows as a position-wise block */
        uint8_t mask[MAXK];
        int32_t target[MAXK];
        specd_positionwise_input pin = {.n = c.k,
                                        .draft = draft,
                                        .target_logits = logits,
                                        .n_vocab = c.v,
                                        .positions = NULL,
                                        .key = key};
        specd_positionwise_result pout = {.accept = mask, .target = target, .n_accepted = 0};
        assert_int_equal(specd_accept_positionwise(acc, &pin, &pout, &err), SPECD_OK);
        for (int i = 0; i < c.k; i++) {
            assert_int_equal(target[i], direct[i]);
            assert_int_equal(mask[i], draft[i] == direct[i]);
        }

        /* a tree whose node i has parent (i - 1) / 2 reuses row i + 1 as "after node i"; its walk
         * must follow the children equal to each row's keyed sample at that depth */
        int32_t parent[MAXK], depth[MAXK];
        for (int i = 0; i < c.k; i++) {
            parent[i] = i == 0 ? -1 : (i - 1) / 2;
            depth[i] = i == 0 ? 0 : depth[parent[i]] + 1;
            draft[i] = trng_int(&r, c.v);
        }
        specd_tree_input tin = {.n_nodes = c.k,
                                .parent = parent,
                                .token = draft,
                                .draft_probs = NULL,
                                .q_vocab = 0,
                                .target_logits = logits,
                                .n_vocab = c.v,
                                .key = key};
        specd_tree_result tout = {
            .path = path, .tokens = tokens, .n_accepted = 0, .n_emitted = 0, .lossy = false};
        assert_int_equal(specd_accept_tree(acc, &tin, &tout, &err), SPECD_OK);
        int v = -1, d = 0;
        for (;;) {
            specd_sample_key kd = key;
            kd.position += (uint32_t)d;
            int32_t want_tok;
            assert_int_equal(specd_sampler_sample(smp, logits + (v + 1) * c.v, c.v, kd, &want_tok,
                                                  &err),
                             SPECD_OK);
            assert_int_equal(tokens[d], want_tok);
            int next = -1;
            for (int i = 0; i < c.k && next < 0; i++)
                if (parent[i] == v && draft[i] == want_tok) next = i;
            if (next < 0) break;
            assert_int_equal(path[d], next);
            v = next;
            d++;
        }
        assert_int_equal(tout.n_accepted, d);
    next:
        specd_accept_destroy(acc);
        specd_sampler_destroy(smp);
    }
    print_message("coupled: %d drafts accepted, %d chains with a correction\n", accepted_total,
                  mismatches_total);
    assert_true(accepted_total > 10000 && mismatches_total > 1000); /* both paths exercised */
}

/* A toy target whose logits depend on the whole prefix: plain keyed decoding and speculative
 * decoding with a sometimes-wrong drafter produce the same text. */
static void toy_logits(const int32_t *prefix, int32_t len, float *l, int32_t v) {
    uint32_t h = 2166136261u;
    for (int32_t i = 0; i < len; i++) h = (h ^ (uint32_t)prefix[i]) * 16777619u;
    uint32_t key[2] = {h, 99}, ctr[4] = {0, 0, 0, 0}, w[4];
    for (int32_t x = 0; x < v; x++) {
        if ((x & 3) == 0) {
            ctr[0] = (uint32_t)x;
            specd_philox4x32_10_block(ctr, key, w);
        }
        l[x] = (float)(w[x & 3] >> 8) * 0x1p-24f * 6.0f;
    }
}

static void test_speculative_equals_plain_decoding(void **state) {
    (void)state;
    enum { V = 50, L = 200, K = 4 };
    for (int ti = 0; ti < 3; ti++) {
        specd_sampling_params sp = specd_sampling_default_params();
        sp.temperature = (float[]){0.0f, 0.8f, 1.3f}[ti];
        specd_sampler *smp = NULL;
        specd_accept *acc = NULL;
        specd_error err;
        assert_int_equal(specd_sampler_create(&sp, V, &smp, &err), SPECD_OK);
        specd_accept_params ap = specd_accept_default_params();
        ap.sampling = sp;
        ap.max_k = K;
        ap.max_vocab = V;
        assert_int_equal(specd_accept_create(&ap, &acc, &err), SPECD_OK);
        int32_t plain[L + K + 1], spec[L + K + 1];
        float l[(K + 1) * V];
        for (int t = 0; t < L + K; t++) {
            toy_logits(plain, t, l, V);
            assert_int_equal(
                specd_sampler_sample(
                    smp, l, V,
                    (specd_sample_key){.seed = 7, .sequence = 3, .position = (uint32_t)t},
                    &plain[t], &err),
                SPECD_OK);
        }
        trng r;
        trng_init(&r, 5 + (uint64_t)ti);
        int t = 0, calls = 0;
        while (t < L) {
            int32_t draft[K];
            for (int i = 0; i < K; i++) /* a drafter right 3 times in 4 */
                draft[i] = trng_int(&r, 4) ? plain[t + i] : trng_int(&r, V);
            for (int i = 0; i <= K; i++) {
                memcpy(spec + t, draft, sizeof(int32_t) * (size_t)i);
                toy_logits(spec, t + i, l + i * V, V);
            }
            int32_t toks[K + 1];
            specd_chain_input in = {.k = K,
                                    .draft = draft,
                                    .draft_probs = NULL,
                                    .q_vocab = 0,
                                    .target_logits = l,
                                    .n_vocab = V,
                                    .key = {.seed = 7, .sequence = 3, .position = (uint32_t)t}};
            specd_chain_result out = {.tokens = toks,
                                      .accept_prob = NULL,
                                      .n_accepted = 0,
                                      .n_emitted = 0,
                                      .lossy = false};
            assert_int_equal(specd_accept_chain(acc, &in, &out, &err), SPECD_OK);
            memcpy(spec + t, toks, sizeof(int32_t) * (size_t)out.n_emitted);
            t += out.n_emitted;
            calls++;
        }
        for (int i = 0; i < L; i++) assert_int_equal(spec[i], plain[i]);
        assert_true(calls < L); /* speculation did advance more than one token per call */
        specd_accept_destroy(acc);
        specd_sampler_destroy(smp);
    }
}

static void test_greedy_and_ties(void **state) {
    (void)state;
    enum { V = 8 };
    float l[3 * V] = {0, 5, 1, 5, 0, 0, 0, 0, /* tie between 1 and 3: 1 wins */
                      2, 2, 2, 2, 2, 2, 2, 2, /* all tied: 0 */
                      0, 0, 0, 0, 0, 0, 0, 9};
    specd_accept_params ap = specd_accept_default_params();
    ap.rule = SPECD_ACCEPT_GREEDY;
    ap.sampling.temperature = 0.9f; /* ignored by GREEDY */
    ap.max_k = 2;
    ap.max_vocab = V;
    specd_accept *acc = NULL;
    specd_error err;
    assert_int_equal(specd_accept_create(&ap, &acc, &err), SPECD_OK);
    int32_t draft[2] = {1, 0}, toks[3];
    float prob[2];
    specd_chain_input in = {.k = 2,
                            .draft = draft,
                            .draft_probs = NULL,
                            .q_vocab = 0,
                            .target_logits = l,
                            .n_vocab = V,
                            .key = {.seed = 1, .sequence = 1, .position = 1}};
    specd_chain_result out = {
        .tokens = toks, .accept_prob = prob, .n_accepted = 0, .n_emitted = 0, .lossy = false};
    assert_int_equal(specd_accept_chain(acc, &in, &out, &err), SPECD_OK);
    assert_int_equal(out.n_accepted, 2);
    assert_int_equal(toks[2], 7);
    assert_true(prob[0] == 1.0f && prob[1] == 1.0f);
    draft[0] = 3;
    assert_int_equal(specd_accept_chain(acc, &in, &out, &err), SPECD_OK);
    assert_int_equal(out.n_accepted, 0);
    assert_int_equal(toks[0], 1);
    assert_true(prob[0] == 0.0f && prob[1] == -1.0f);
    specd_accept_destroy(acc);
}

/* REJECTION's per-position probability is min(1, (1+tau) p/q) with p from the same transform the
 * sampler exposes; tau > 0 marks the result lossy. */
static void test_rejection_probabilities_and_tau(void **state) {
    (void)state;
    enum { V = 40, K = 3 };
    trng r;
    trng_init(&r, 9);
    float l[(K + 1) * V], q[K * V], p[V];
    for (int tau_i = 0; tau_i < 2; tau_i++) {
        float tau = tau_i ? 0.5f : 0.0f;
        specd_accept_params ap = specd_accept_default_params();
        ap.rule = SPECD_ACCEPT_REJECTION;
        ap.sampling.temperature = 0.8f;
        ap.sampling.top_k = 30;
        ap.max_k = K;
        ap.max_vocab = V;
        ap.relaxed_tau = tau;
        specd_accept *acc = NULL;
        specd_sampler *smp = NULL;
        specd_error err;
        assert_int_equal(specd_accept_create(&ap, &acc, &err), SPECD_OK);
        assert_int_equal(specd_sampler_create(&ap.sampling, V, &smp, &err), SPECD_OK);
        for (int trial = 0; trial < 200; trial++) {
            random_logits(&r, l, (K + 1) * V);
            int32_t draft[K], toks[K + 1];
            float prob[K];
            for (int i = 0; i < K; i++) {
                double s = 0;
                for (int x = 0; x < V; x++) s += q[i * V + x] = (float)trng_unif(&r);
                for (int x = 0; x < V; x++) q[i * V + x] = (float)(q[i * V + x] / s);
                draft[i] = trng_int(&r, V);
            }
            specd_chain_input in = {.k = K,
                                    .draft = draft,
                                    .draft_probs = q,
                                    .q_vocab = V,
                                    .target_logits = l,
                                    .n_vocab = V,
                                    .key = {.seed = 3, .sequence = (uint32_t)trial, .position = 0}};
            specd_chain_result out = {.tokens = toks,
                                      .accept_prob = prob,
                                      .n_accepted = 0,
                                      .n_emitted = 0,
                                      .lossy = false};
            assert_int_equal(specd_accept_chain(acc, &in, &out, &err), SPECD_OK);
            assert_int_equal(out.lossy, tau > 0.0f);
            for (int i = 0; i < K; i++) {
                if (i > out.n_accepted) {
                    assert_true(prob[i] == -1.0f);
                    continue;
                }
                assert_int_equal(specd_sampler_probs(smp, l + i * V, V, p, &err), SPECD_OK);
                float num = tau > 0.0f ? p[draft[i]] * (1.0f + tau) : p[draft[i]];
                float ratio = num / q[i * V + draft[i]];
                assert_true(prob[i] == (ratio < 1.0f ? ratio : 1.0f));
                if (i < out.n_accepted) assert_int_equal(toks[i], draft[i]);
            }
        }
        specd_accept_destroy(acc);
        specd_sampler_destroy(smp);
    }
}

/* top-k keeps k tokens, top-p the shortest prefix reaching p, min-p those with e >= m, bias
 * shifts/bans; probabilities sum to 1 and keyed samples never leave the kept set. */
static void test_transform_filters(void **state) {
    (void)state;
    enum { V = 100 };
    trng r;
    trng_init(&r, 11);
    float l[V], p[V];
    for (int trial = 0; trial < 300; trial++) {
        random_logits(&r, l, V);
        specd_sampling_params sp = specd_sampling_default_params();
        sp.temperature = 0.5f + (float)trng_unif(&r);
        int mode = trial % 3;
        if (mode == 0) sp.top_k = 1 + trng_int(&r, 30);
        if (mode == 1) sp.top_p = 0.3f + 0.6f * (float)trng_unif(&r);
        if (mode == 2) sp.min_p = 0.3f * (float)trng_unif(&r);
        specd_sampler *s = NULL;
        specd_error err;
        assert_int_equal(specd_sampler_create(&sp, V, &s, &err), SPECD_OK);
        assert_int_equal(specd_sampler_probs(s, l, V, p, &err), SPECD_OK);
        double sum = 0;
        int kept = 0;
        for (int x = 0; x < V; x++) {
            sum += p[x];
            kept += p[x] > 0.0f;
        }
        assert_true(fabs(sum - 1.0) < 1e-5);
        if (mode == 0) assert_int_equal(kept, sp.top_k);
        /* kept tokens outrank dropped ones */
        for (int x = 0; x < V; x++)
            for (int y = 0; y < V; y++)
                if (p[x] > 0.0f && p[y] == 0.0f) assert_true(l[x] >= l[y]);
        if (mode == 1) { /* the kept set reaches top_p; without its weakest token it would not */
            specd_sampling_params full = sp;
            full.top_p = 1.0f;
            specd_sampler *sf = NULL;
            float pf[V];
            assert_int_equal(specd_sampler_create(&full, V, &sf, &err), SPECD_OK);
            assert_int_equal(specd_sampler_probs(sf, l, V, pf, &err), SPECD_OK);
            double mass = 0, weakest = 1;
            for (int x = 0; x < V; x++)
                if (p[x] > 0) {
                    mass += pf[x];
                    if (pf[x] < weakest) weakest = pf[x];
                }
            assert_true(mass >= (double)sp.top_p - 1e-5);
            assert_true(mass - weakest < (double)sp.top_p + 1e-5);
            specd_sampler_destroy(sf);
        }
        if (mode == 2) {
            float pmax = 0;
            for (int x = 0; x < V; x++) pmax = p[x] > pmax ? p[x] : pmax;
            for (int x = 0; x < V; x++)
                if (p[x] > 0) assert_true(p[x] >= sp.min_p * pmax * (1 - 1e-5f));
        }
        for (uint32_t pos = 0; pos < 20; pos++) {
            int32_t t;
            assert_int_equal(
                specd_sampler_sample(s, l, V,
                                     (specd_sample_key){.seed = 5, .sequence = 6, .position = pos},
                                     &t, &err),
                SPECD_OK);
            assert_true(p[t] > 0.0f);
        }
        specd_sampler_destroy(s);
    }
}

/* Gumbel-max with the keyed noise is distributed as P (including filters and bias). */
static void test_keyed_sampling_follows_p(void **state) {
    (void)state;
    enum { V = 12, N = 200000 };
    float l[V] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 2.5f, 0.0f, 1.5f, -0.5f, 2.2f, 0.7f, 1.1f};
    specd_logit_bias b[2] = {{.token = 4, .bias = -1.5f}, {.token = 8, .bias = -INFINITY}};
    for (int variant = 0; variant < 3; variant++) {
        specd_sampling_params sp = specd_sampling_default_params();
        sp.temperature = 0.9f;
        if (variant >= 1) {
            sp.bias = b;
            sp.n_bias = 2;
        }
        if (variant == 2) sp.top_k = 7;
        specd_sampler *s = NULL;
        specd_error err;
        assert_int_equal(specd_sampler_create(&sp, V, &s, &err), SPECD_OK);
        float p[V];
        double pd[V];
        assert_int_equal(specd_sampler_probs(s, l, V, p, &err), SPECD_OK);
        for (int x = 0; x < V; x++) pd[x] = p[x];
        uint64_t counts[V] = {0};
        for (uint32_t i = 0; i < N; i++) {
            int32_t t;
            assert_int_equal(
                specd_sampler_sample(s, l, V,
                                     (specd_sample_key){.seed = 17, .sequence = i, .position = 0},
                                     &t, &err),
                SPECD_OK);
            counts[t]++;
        }
        double pv = gof_pvalue(counts, pd, V, N);
        print_message("keyed sampling variant %d: p-value %.3g\n", variant, pv);
        assert_true(pv > 1e-4);
        specd_sampler_destroy(s);
    }
}

/* The pruned keyed sampler (block maxima, Gumbel bound, quick-reject table) returns exactly the
 * brute-force argmax of z + G over the kept tokens. */
static void test_keyed_matches_bruteforce(void **state) {
    (void)state;
    trng r;
    trng_init(&r, 77);
    enum { BIGV = 5000 };
    static float l[BIGV], p[BIGV];
    for (int it = 0; it < 3000; it++) {
        int32_t v = it % 10 == 0 ? BIGV : 2 + trng_int(&r, 400);
        specd_sampling_params sp = specd_sampling_default_params();
        sp.temperature = (float[]){0.2f, 0.7f, 1.0f, 1.0f, 2.5f}[trng_int(&r, 5)];
        if (trng_int(&r, 4) == 0) sp.top_k = 1 + trng_int(&r, 50);
        if (trng_int(&r, 4) == 0) sp.min_p = 0.1f * (float)trng_unif(&r);
        random_logits(&r, l, v);
        if (trng_int(&r, 3) == 0) /* a peaked head, as language models give */
            for (int j = 0; j < 5; j++) l[trng_int(&r, v)] += 10.0f + 5.0f * (float)trng_unif(&r);
        specd_sampler *s = NULL;
        specd_error err;
        assert_int_equal(specd_sampler_create(&sp, v, &s, &err), SPECD_OK);
        assert_int_equal(specd_sampler_probs(s, l, v, p, &err), SPECD_OK);
        specd_sample_key key = {
            .seed = trng_u32(&r), .sequence = trng_u32(&r), .position = trng_u32(&r)};
        int32_t got;
        assert_int_equal(specd_sampler_sample(s, l, v, key, &got, &err), SPECD_OK);
        int32_t want = -1;
        float best = -INFINITY;
        for (int32_t x = 0; x < v; x++) {
            if (!(p[x] > 0.0f)) continue;
            float sc = l[x] / sp.temperature + specd_sampling_gumbel(key, SPECD_RNG_SAMPLE, x);
            if (sc > best) {
                best = sc;
                want = x;
            }
        }
        assert_int_equal(got, want);
        specd_sampler_destroy(s);
    }
}

/* The blocked inverse CDF: never draws a zero weight, handles u at both ends, all-zero rows, tails
 * shorter than a block, and follows the weights (G-test). */
static void test_cdf_draw(void **state) {
    (void)state;
    enum { N = 150 };
    float w[N], bsum[(N + 63) / 64];
    for (int i = 0; i < N; i++) w[i] = 0.0f;
    assert_int_equal(specd_cdf_draw(w, N, 0.5f, bsum), -1);
    w[77] = 3.0f;
    assert_int_equal(specd_cdf_draw(w, N, 0x1p-24f, bsum), 77);
    assert_int_equal(specd_cdf_draw(w, N, 1.0f - 0x1p-24f, bsum), 77);
    w[3] = 1e-30f;
    w[149] = 2.0f;
    assert_int_equal(specd_cdf_draw(w, N, 1.0f - 0x1p-24f, bsum), 149);
    assert_int_equal(specd_cdf_draw(w, N, 0x1p-24f, bsum), 77); /* 1e-30 is below u * total */
    trng r;
    trng_init(&r, 31);
    double pd[N], tot = 0;
    for (int i = 0; i < N; i++) {
        w[i] = trng_int(&r, 4) == 0 ? 0.0f : (float)trng_unif(&r);
        tot += w[i];
    }
    for (int i = 0; i < N; i++) pd[i] = w[i] / tot;
    uint64_t counts[N] = {0};
    for (int i = 0; i < 300000; i++) {
        int32_t x = specd_cdf_draw(w, N, specd_u32_to_uniform(trng_u32(&r)), bsum);
        assert_true(x >= 0 && w[x] > 0.0f);
        counts[x]++;
    }
    double pv = gof_pvalue(counts, pd, N, 300000);
    print_message("inverse CDF draw: p-value %.3g\n", pv);
    assert_true(pv > 1e-4);
}

/* The vector kernels reproduce the scalar definition of sampling.h bit for bit: Z summed in 256
 * lanes then a pairwise tree, e by specd_fast_exp_neg, P = e / Z. */
static void test_probs_follow_the_fixed_definition(void **state) {
    (void)state;
    enum { BIGV = 20000 };
    static float l[BIGV], p[BIGV], acc[256];
    trng r;
    trng_init(&r, 123);
    const int32_t sizes[] = {1, 7, 64, 255, 256, 257, 1000, 4099, BIGV};
    for (int si = 0; si < 9; si++) {
        for (int ti = 0; ti < 2; ti++) {
            int32_t v = sizes[si];
            float t = ti ? 0.7f : 1.0f;
            random_logits(&r, l, v);
            specd_sampling_params sp = specd_sampling_default_params();
            sp.temperature = t;
            specd_sampler *s = NULL;
            specd_error err;
            assert_int_equal(specd_sampler_create(&sp, v, &s, &err), SPECD_OK);
            assert_int_equal(specd_sampler_probs(s, l, v, p, &err), SPECD_OK);
            float lmax = l[0];
            for (int32_t x = 1; x < v; x++) lmax = l[x] > lmax ? l[x] : lmax;
            float zmax = lmax / t;
            memset(acc, 0, sizeof acc);
            for (int32_t x = 0; x < v; x++) acc[x % 256] += specd_fast_exp_neg(l[x] / t - zmax);
            for (int w = 128; w > 0; w /= 2)
                for (int j = 0; j < w; j++) acc[j] += acc[j + w];
            for (int32_t x = 0; x < v; x++) {
                float want = specd_fast_exp_neg(l[x] / t - zmax) / acc[0];
                if (p[x] != want) fail_msg("V=%d T=%g token %d: %a != %a", v, t, x, p[x], want);
            }
            specd_sampler_destroy(s);
        }
    }
}

/* Known answers of this implementation, for the CUDA port and for other compilers: an FNV-1a
 * hash over keyed samples, probabilities and chain results of fixed inputs. Any change to the
 * definition of keyed sampling or the acceptance rules changes it (and must be deliberate). */
static void test_golden_hash(void **state) {
    (void)state;
    enum { V = 3000, K = 4 };
    static float l[(K + 1) * V], q[K * V], p[V];
    uint64_t h = 1469598103934665603ull;
#define MIX(x) (h = (h ^ (uint64_t)(uint32_t)(x)) * 1099511628211ull)
    trng r;
    trng_init(&r, 2026);
    for (int it = 0; it < 60; it++) {
        specd_sampling_params sp = specd_sampling_default_params();
        sp.temperature = (float[]){1.0f, 0.6f, 1.4f}[it % 3];
        if (it % 4 == 1) sp.top_k = 40;
        if (it % 5 == 2) sp.top_p = 0.9f;
        if (it % 7 == 3) sp.min_p = 0.05f;
        random_logits(&r, l, (K + 1) * V);
        specd_sampler *s = NULL;
        specd_error err;
        assert_int_equal(specd_sampler_create(&sp, V, &s, &err), SPECD_OK);
        for (uint32_t pos = 0; pos < 8; pos++) {
            int32_t t;
            assert_int_equal(
                specd_sampler_sample(
                    s, l, V,
                    (specd_sample_key){.seed = 99, .sequence = (uint32_t)it, .position = pos}, &t,
                    &err),
                SPECD_OK);
            MIX(t);
        }
        assert_int_equal(specd_sampler_probs(s, l, V, p, &err), SPECD_OK);
        for (int x = 0; x < V; x += 7) {
            uint32_t b;
            memcpy(&b, &p[x], 4);
            MIX(b);
        }
        for (int i = 0; i < K; i++) assert_int_equal(specd_sampler_probs(s, l + i * V, V, q + i * V, &err), SPECD_OK);
        specd_sampler_destroy(s);
        /* the order the golden hash was taken in (the enum's values have changed since) */
        static const specd_accept_rule rules[] = {SPECD_ACCEPT_GREEDY, SPECD_ACCEPT_REJECTION,
                                                  SPECD_ACCEPT_COUPLED};
        for (int ri = 0; ri < 3; ri++) {
            specd_accept_rule rule = rules[ri];
            specd_accept_params ap = specd_accept_default_params();
            ap.rule = rule;
            ap.sampling = sp;
            ap.max_k = K;
            ap.max_vocab = V;
            specd_accept *acc = NULL;
            assert_int_equal(specd_accept_create(&ap, &acc, &err), SPECD_OK);
            int32_t draft[K], toks[K + 1];
            for (int i = 0; i < K; i++) draft[i] = trng_int(&r, 3) ? (int32_t)(trng_u32(&r) % 50) : i;
            for (int i = 0; i < K; i++) /* keep q(draft) > 0 under the filters */
                if (!(q[i * V + draft[i]] > 0.0f)) draft[i] = -1;
            int ok = 1;
            for (int i = 0; i < K; i++) ok &= draft[i] >= 0;
            if (!ok)
                for (int i = 0; i < K; i++) {
                    int32_t best = 0;
                    for (int x = 1; x < V; x++) best = q[i * V + x] > q[i * V + best] ? x : best;
                    draft[i] = best;
                }
            specd_chain_input in = {.k = K,
                                    .draft = draft,
                                    .draft_probs = rule == SPECD_ACCEPT_REJECTION ? q : NULL,
                                    .q_vocab = V,
                                    .target_logits = l,
                                    .n_vocab = V,
                                    .key = {.seed = 7, .sequence = (uint32_t)it, .position = 50}};
            specd_chain_result out = {.tokens = toks,
                                      .accept_prob = NULL,
                                      .n_accepted = 0,
                                      .n_emitted = 0,
                                      .lossy = false};
            assert_int_equal(specd_accept_chain(acc, &in, &out, &err), SPECD_OK);
            MIX(out.n_accepted);
            for (int i = 0; i < out.n_emitted; i++) MIX(toks[i]);
            specd_accept_destroy(acc);
        }
    }
#undef MIX
    print_message("golden hash %016llx\n", (unsigned long long)h);
    assert_true(h == GOLDEN_HASH);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coupled_is_token_identical),
        cmocka_unit_test(test_keyed_matches_bruteforce),
        cmocka_unit_test(test_cdf_draw),
        cmocka_unit_test(test_probs_follow_the_fixed_definition),
        cmocka_unit_test(test_golden_hash),
        cmocka_unit_test(test_speculative_equals_plain_decoding),
        cmocka_unit_test(test_greedy_and_ties),
        cmocka_unit_test(test_rejection_probabilities_and_tau),
        cmocka_unit_test(test_transform_filters),
        cmocka_unit_test(test_keyed_sampling_follows_p),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
