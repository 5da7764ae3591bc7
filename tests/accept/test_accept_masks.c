/* Masked logits inside the acceptance engine itself (not only at the session's intake): a token
 * whose logit is -inf, or -FLT_MAX (PyTorch's mask value, which overflows logits / T below
 * T = 1), is banned exactly as a -inf logit bias bans it. For every rule and temperatures below
 * and above 1, chains verified on rows masked either way decide bit for bit what a handle with
 * the bias ban decides on the unmasked rows (tokens, accepted length, acceptance probabilities),
 * the keyed sampler agrees too, a positive bias does not revive a masked token, and no masked
 * token is ever emitted. */
#include "test_main.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "specd/specd.h"

#define V 40
#define K 3
#define N_MASK 6

static const int32_t mask_ids[N_MASK] = {0, 3, 7, 19, 20, 39};

static int is_masked(int32_t x) {
    for (int i = 0; i < N_MASK; i++)
        if (mask_ids[i] == x) return 1;
    return 0;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}
static float unif(uint64_t *s) {
    return (float)(((double)lcg(s) + 0.5) / 2147483648.0);
}

/* A handle with the rule and temperature; ban = 1 adds a -inf bias on the masked ids, and every
 * handle biases token 3 (masked) by +50 and token 5 by +0.5. */
static specd_accept *make(specd_accept_rule rule, float t, int ban) {
    specd_logit_bias b[N_MASK + 2];
    size_t n = 0;
    b[n++] = (specd_logit_bias){.token = 5, .bias = 0.5f};
    for (int i = 0; i < N_MASK; i++)
        b[n++] = (specd_logit_bias){.token = mask_ids[i],
                                    .bias = ban ? -INFINITY : (mask_ids[i] == 3 ? 50.0f : 0.0f)};
    specd_accept_params p = specd_accept_default_params();
    p.rule = rule;
    p.sampling.temperature = t;
    p.sampling.bias = b;
    p.sampling.n_bias = n;
    p.max_k = K;
    p.max_vocab = V;
    specd_accept *a = NULL;
    specd_error err;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_OK);
    return a;
}

static void run(specd_accept_rule rule, float t) {
    specd_accept *banned = make(rule, t, 1), *masked = make(rule, t, 0);
    uint64_t s = 99 + (uint64_t)rule * 7 + (uint64_t)(t * 100.0f);
    int emitted = 0;
    for (int trial = 0; trial < 300; trial++) {
        float plain[(K + 1) * V], inf_rows[(K + 1) * V], fmax_rows[(K + 1) * V];
        for (int i = 0; i < (K + 1) * V; i++) {
            /* masked ids get the largest logits, so a leak would show at once */
            plain[i] = is_masked(i % V) ? 8.0f : unif(&s) * 4.0f - 2.0f;
            inf_rows[i] = is_masked(i % V) ? -INFINITY : plain[i];
            fmax_rows[i] = is_masked(i % V) ? -FLT_MAX : plain[i];
        }
        int32_t draft[K];
        float q[K * V];
        for (int i = 0; i < K; i++) {
            draft[i] = (int32_t)(lcg(&s) % V); /* masked drafts too: they must be rejected */
            for (int x = 0; x < V; x++)
                q[i * V + x] = 1.0f / V;
        }
        specd_chain_input in = {.k = K,
                                .draft = draft,
                                .draft_probs = rule == SPECD_ACCEPT_REJECTION ? q : NULL,
                                .q_vocab = V,
                                .target_logits = plain,
                                .n_vocab = V,
                                .key = {.seed = 5, .sequence = (uint32_t)trial, .position = 11}};
        int32_t tb[K + 1], tm[K + 1];
        float pb[K], pm[K];
        specd_chain_result rb = {.tokens = tb, .accept_prob = pb};
        specd_error err;
        assert_int_equal(specd_accept_chain(banned, &in, &rb, &err), SPECD_OK);
        for (int i = 0; i < rb.n_emitted; i++)
            assert_false(is_masked(tb[i]));
        emitted += rb.n_emitted;
        for (int v = 0; v < 2; v++) {
            specd_chain_input mi = in;
            mi.target_logits = v ? fmax_rows : inf_rows;
            specd_chain_result rm = {.tokens = tm, .accept_prob = pm};
            if (specd_accept_chain(masked, &mi, &rm, &err) != SPECD_OK)
                fail_msg("T=%g %s mask: %s", (double)t, v ? "-FLT_MAX" : "-inf", err.message);
            assert_int_equal(rm.n_accepted, rb.n_accepted);
            assert_int_equal(rm.n_emitted, rb.n_emitted);
            assert_memory_equal(tm, tb, (size_t)rb.n_emitted * sizeof(int32_t));
            assert_memory_equal(pm, pb, sizeof pb);
        }
    }
    assert_true(emitted > 300);
    specd_accept_destroy(banned);
    specd_accept_destroy(masked);
}

static void test_greedy(void **st) {
    (void)st;
    run(SPECD_ACCEPT_GREEDY, 0.0f);
}
static void test_coupled(void **st) {
    (void)st;
    run(SPECD_ACCEPT_COUPLED, 0.3f);
    run(SPECD_ACCEPT_COUPLED, 1.5f);
}
static void test_rejection(void **st) {
    (void)st;
    run(SPECD_ACCEPT_REJECTION, 0.3f);
    run(SPECD_ACCEPT_REJECTION, 1.0f);
}

/* The public sampler shares the transform: the same tokens. */
static void test_sampler(void **st) {
    (void)st;
    specd_sampling_params sp = specd_sampling_default_params();
    sp.temperature = 0.5f;
    specd_logit_bias ban[N_MASK];
    for (int i = 0; i < N_MASK; i++)
        ban[i] = (specd_logit_bias){.token = mask_ids[i], .bias = -INFINITY};
    specd_sampler *plain = NULL, *banned = NULL;
    specd_error err;
    assert_int_equal(specd_sampler_create(&sp, V, &plain, &err), SPECD_OK);
    sp.bias = ban;
    sp.n_bias = N_MASK;
    assert_int_equal(specd_sampler_create(&sp, V, &banned, &err), SPECD_OK);
    uint64_t s = 3;
    for (int trial = 0; trial < 300; trial++) {
        float l[V], lm[V];
        for (int x = 0; x < V; x++) {
            l[x] = is_masked(x) ? 9.0f : unif(&s) * 3.0f;
            lm[x] = is_masked(x) ? (trial & 1 ? -FLT_MAX : -INFINITY) : l[x];
        }
        specd_sample_key key = {.seed = 1, .sequence = 2, .position = (uint32_t)trial};
        int32_t a, b;
        assert_int_equal(specd_sampler_sample(banned, l, V, key, &a, &err), SPECD_OK);
        assert_int_equal(specd_sampler_sample(plain, lm, V, key, &b, &err), SPECD_OK);
        assert_int_equal(a, b);
        assert_false(is_masked(b));
    }
    /* a row masked throughout has nothing to sample; NaN stays an error */
    float all[V];
    for (int x = 0; x < V; x++)
        all[x] = -FLT_MAX;
    int32_t tok = -5;
    assert_int_equal(
        specd_sampler_sample(
            plain, all, V, (specd_sample_key){.seed = 1, .sequence = 2, .position = 3}, &tok, &err),
        SPECD_E_NUMERIC);
    assert_non_null(strstr(err.message, "masked"));
    all[4] = NAN;
    assert_int_equal(
        specd_sampler_sample(
            plain, all, V, (specd_sample_key){.seed = 1, .sequence = 2, .position = 3}, &tok, &err),
        SPECD_E_NUMERIC);
    assert_int_equal(tok, -5);
    specd_sampler_destroy(plain);
    specd_sampler_destroy(banned);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_coupled),
        cmocka_unit_test(test_rejection),
        cmocka_unit_test(test_sampler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
