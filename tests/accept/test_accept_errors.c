/* Bad input gives a status and a message naming the problem, and leaves every output untouched. */
#include "test_main.h"

#include <math.h>
#include <string.h>

#include "specd/specd.h"

#define V 16
#define K 4
#define SENTINEL 0x5a5a5a5a

typedef struct fixture {
    float logits[(K + 1) * V];
    float q[K * V];
    int32_t draft[K];
    int32_t tokens[K + 1];
    float prob[K];
    specd_chain_input in;
    specd_chain_result out;
} fixture;

static void fill(fixture *f) {
    for (int i = 0; i < (K + 1) * V; i++) f->logits[i] = (float)((i * 7) % 11) * 0.25f;
    for (int i = 0; i < K * V; i++) f->q[i] = 1.0f / V;
    for (int i = 0; i < K; i++) f->draft[i] = i + 1;
    for (int i = 0; i < K + 1; i++) f->tokens[i] = SENTINEL;
    for (int i = 0; i < K; i++) f->prob[i] = 123.0f;
    memset(&f->in, 0, sizeof f->in);
    f->in.k = K;
    f->in.draft = f->draft;
    f->in.draft_probs = f->q;
    f->in.q_vocab = V;
    f->in.target_logits = f->logits;
    f->in.n_vocab = V;
    f->in.key = (specd_sample_key){.seed = 42, .sequence = 1, .position = 10};
    f->out = (specd_chain_result){.tokens = f->tokens,
                                  .accept_prob = f->prob,
                                  .n_accepted = SENTINEL,
                                  .n_emitted = SENTINEL,
                                  .lossy = true};
}

static void assert_untouched(const fixture *f) {
    for (int i = 0; i < K + 1; i++) assert_int_equal(f->tokens[i], SENTINEL);
    for (int i = 0; i < K; i++) assert_true(f->prob[i] == 123.0f);
    assert_int_equal(f->out.n_accepted, SENTINEL);
    assert_int_equal(f->out.n_emitted, SENTINEL);
}

static specd_accept *make(specd_accept_rule rule, int max_k) {
    specd_accept_params p = specd_accept_default_params();
    p.rule = rule;
    p.max_k = max_k;
    p.max_vocab = 64;
    specd_accept *a = NULL;
    specd_error err;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_OK);
    return a;
}

/* Runs the chain call under every rule and expects the same status and a message fragment. */
static void expect_chain_error(fixture *f, specd_status want, const char *fragment) {
    for (int rule = 0; rule < 3; rule++) {
        specd_accept *a = make((specd_accept_rule)rule, K);
        specd_error err;
        specd_error_clear(&err);
        specd_status st = specd_accept_chain(a, &f->in, &f->out, &err);
        assert_int_equal(st, want);
        assert_int_equal(err.status, want);
        if (!strstr(err.message, fragment)) fail_msg("message '%s' lacks '%s'", err.message, fragment);
        assert_untouched(f);
        specd_accept_destroy(a);
    }
}

static void test_valid_input_succeeds(void **state) {
    (void)state;
    fixture f;
    fill(&f);
    specd_accept *a = make(SPECD_ACCEPT_REJECTION, K);
    specd_error err;
    assert_int_equal(specd_accept_chain(a, &f.in, &f.out, &err), SPECD_OK);
    assert_int_equal(f.out.n_emitted, f.out.n_accepted + 1);
    assert_false(f.out.lossy);
    specd_accept_destroy(a);
}

static void test_nan_and_inf_logits(void **state) {
    (void)state;
    fixture f;
    fill(&f);
    f.logits[3 * V + 5] = NAN;
    expect_chain_error(&f, SPECD_E_NUMERIC, "row 3 token 5");
    fill(&f);
    f.logits[4 * V + 15] = INFINITY; /* the bonus row too: validated before anything is emitted */
    expect_chain_error(&f, SPECD_E_NUMERIC, "row 4 token 15");
    /* -inf masks a token (tests/accept/test_accept_masks.c); a row masked throughout has no
     * distribution left */
    fill(&f);
    for (int x = 0; x < V; x++) f.logits[2 * V + x] = -INFINITY;
    expect_chain_error(&f, SPECD_E_NUMERIC, "row 2: every token is masked");
}

static void test_vocab_mismatch(void **state) {
    (void)state;
    fixture f;
    fill(&f);
    f.in.q_vocab = V - 1;
    expect_chain_error(&f, SPECD_E_MISMATCH, "draft_probs have 15 tokens");
    fill(&f);
    f.in.n_vocab = 65; /* above max_vocab */
    expect_chain_error(&f, SPECD_E_INVALID_ARG, "n_vocab 65");
}

static void test_k_out_of_range(void **state) {
    (void)state;
    fixture f;
    fill(&f);
    f.in.k = 0;
    expect_chain_error(&f, SPECD_E_INVALID_ARG, "k 0 outside");
    fill(&f);
    f.in.k = K + 1;
    expect_chain_error(&f, SPECD_E_INVALID_ARG, "k 5 outside [1, max_k 4]");
    fill(&f);
    f.in.k = -3;
    expect_chain_error(&f, SPECD_E_INVALID_ARG, "k -3");
}

static void test_token_out_of_range(void **state) {
    (void)state;
    fixture f;
    fill(&f);
    f.draft[2] = V;
    expect_chain_error(&f, SPECD_E_INVALID_ARG, "draft 2: token 16 outside [0, 16)");
    fill(&f);
    f.draft[0] = -1;
    expect_chain_error(&f, SPECD_E_INVALID_ARG, "draft 0: token -1");
}

static void test_bad_q(void **state) {
    (void)state;
    fixture f;
    fill(&f);
    f.q[V + 3] = -0.01f;
    expect_chain_error(&f, SPECD_E_NUMERIC, "draft_probs row 1 token 3");
    fill(&f);
    f.q[2 * V + 7] = NAN;
    expect_chain_error(&f, SPECD_E_NUMERIC, "draft_probs row 2 token 7");
    fill(&f);
    f.q[3 * V] += 0.5f;
    expect_chain_error(&f, SPECD_E_NUMERIC, "draft_probs row 3 sums to");
    fill(&f);
    f.q[f.draft[1] + V] = 0.0f;
    f.q[V] += 1.0f / V; /* keep the sum at 1 */
    expect_chain_error(&f, SPECD_E_INVALID_ARG, "has q = 0");
}

static void test_null_arguments(void **state) {
    (void)state;
    fixture f;
    fill(&f);
    f.in.draft = NULL;
    expect_chain_error(&f, SPECD_E_INVALID_ARG, "NULL");
    fill(&f);
    specd_accept *a = make(SPECD_ACCEPT_COUPLED, K);
    specd_error err;
    assert_int_equal(specd_accept_chain(a, NULL, &f.out, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_accept_chain(NULL, &f.in, &f.out, &err), SPECD_E_INVALID_ARG);
    specd_accept_destroy(a);
    specd_accept_destroy(NULL);
}

/* Every token banned by the bias: the distribution is empty. */
static void test_empty_distribution(void **state) {
    (void)state;
    specd_logit_bias ban[V];
    for (int i = 0; i < V; i++)
        ban[i] = (specd_logit_bias){.token = i, .bias = -INFINITY};
    for (int rule = 0; rule < 3; rule++) {
        specd_accept_params p = specd_accept_default_params();
        p.rule = (specd_accept_rule)rule;
        p.max_k = K;
        p.max_vocab = V;
        p.sampling.bias = ban;
        p.sampling.n_bias = V;
        p.sampling.top_k = 3;
        p.sampling.top_p = 0.5f;
        specd_accept *a = NULL;
        specd_error err;
        assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_OK);
        fixture f;
        fill(&f);
        assert_int_equal(specd_accept_chain(a, &f.in, &f.out, &err), SPECD_E_NUMERIC);
        assert_non_null(strstr(err.message, "banned"));
        assert_untouched(&f);
        specd_accept_destroy(a);
    }
    specd_sampling_params sp = specd_sampling_default_params();
    sp.bias = ban;
    sp.n_bias = V;
    specd_sampler *s = NULL;
    specd_error err;
    assert_int_equal(specd_sampler_create(&sp, V, &s, &err), SPECD_OK);
    float logits[V] = {0};
    int32_t tok = SENTINEL;
    assert_int_equal(
        specd_sampler_sample(
            s, logits, V, (specd_sample_key){.seed = 1, .sequence = 2, .position = 3}, &tok, &err),
        SPECD_E_NUMERIC);
    assert_int_equal(tok, SENTINEL);
    specd_sampler_destroy(s);
}

static void test_bad_params(void **state) {
    (void)state;
    specd_error err;
    specd_accept *a = NULL;
    specd_accept_params p = specd_accept_default_params();
    p.max_vocab = 0;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "max_vocab"));
    p = specd_accept_default_params();
    p.max_vocab = 10;
    p.max_k = 0;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    p.max_k = SPECD_ACCEPT_MAX_K + 1;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    p = specd_accept_default_params();
    p.max_vocab = 10;
    p.relaxed_tau = 0.5f; /* COUPLED: tau has no meaning there */
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    p.rule = SPECD_ACCEPT_REJECTION;
    p.relaxed_tau = -0.1f;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    p.relaxed_tau = NAN;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    p.relaxed_tau = 0.0f;
    p.rule = (specd_accept_rule)7;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    p.rule = SPECD_ACCEPT_COUPLED;
    p.sampling.temperature = -1.0f;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    p.sampling.temperature = NAN;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    p.sampling = specd_sampling_default_params();
    p.sampling.top_p = 0.0f;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    p.sampling = specd_sampling_default_params();
    p.sampling.min_p = 1.0f;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    p.sampling = specd_sampling_default_params();
    p.sampling.top_k = -2;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    specd_logit_bias dup[2] = {{.token = 3, .bias = 1.0f}, {.token = 3, .bias = 2.0f}};
    p.sampling = specd_sampling_default_params();
    p.sampling.bias = dup;
    p.sampling.n_bias = 2;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "twice"));
    specd_logit_bias nanb = {.token = 1, .bias = NAN};
    p.sampling.bias = &nanb;
    p.sampling.n_bias = 1;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    specd_logit_bias far = {.token = 10, .bias = 1.0f};
    p.sampling.bias = &far;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_E_INVALID_ARG);
    assert_null(a);
}

/* Bias token inside max_vocab but outside this call's vocabulary. */
static void test_bias_outside_call_vocab(void **state) {
    (void)state;
    specd_logit_bias b = {.token = 40, .bias = 1.0f};
    specd_accept_params p = specd_accept_default_params();
    p.max_k = K;
    p.max_vocab = 64;
    p.sampling.bias = &b;
    p.sampling.n_bias = 1;
    specd_accept *a = NULL;
    specd_error err;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_OK);
    fixture f;
    fill(&f);
    assert_int_equal(specd_accept_chain(a, &f.in, &f.out, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "bias token 40"));
    assert_untouched(&f);
    specd_accept_destroy(a);
}

static void test_temperature_overflow(void **state) {
    (void)state;
    specd_accept_params p = specd_accept_default_params();
    p.max_k = K;
    p.max_vocab = V;
    p.sampling.temperature = 1e-30f;
    specd_accept *a = NULL;
    specd_error err;
    assert_int_equal(specd_accept_create(&p, &a, &err), SPECD_OK);
    fixture f;
    fill(&f);
    f.logits[7] = 1e20f;
    assert_int_equal(specd_accept_chain(a, &f.in, &f.out, &err), SPECD_E_NUMERIC);
    assert_non_null(strstr(err.message, "overflow"));
    assert_untouched(&f);
    specd_accept_destroy(a);
}

static void test_malformed_tree(void **state) {
    (void)state;
    float logits[5 * V] = {0};
    int32_t tok[4] = {1, 2, 3, 4}, path[4] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};
    int32_t out_tok[5] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL, SENTINEL};
    const int32_t bad_parents[][4] = {{-1, 0, 2, 0}, {-1, 5, 0, 1}, {0, -1, 0, 1}, {-1, -2, 0, 1}};
    const char *frag[] = {"node 2: parent 2", "node 1: parent 5", "node 0: parent 0",
                          "node 1: parent -2"};
    for (int rule = 0; rule < 3; rule++) {
        specd_accept *a = make((specd_accept_rule)rule, 4);
        for (int c = 0; c < 4; c++) {
            specd_tree_input in = {.n_nodes = 4,
                                   .parent = bad_parents[c],
                                   .token = tok,
                                   .draft_probs = NULL,
                                   .q_vocab = 0,
                                   .target_logits = logits,
                                   .n_vocab = V,
                                   .key =
                                       (specd_sample_key){.seed = 1, .sequence = 2, .position = 3}};
            specd_tree_result out = {.path = path,
                                     .tokens = out_tok,
                                     .n_accepted = SENTINEL,
                                     .n_emitted = SENTINEL,
                                     .lossy = true};
            specd_error err;
            assert_int_equal(specd_accept_tree(a, &in, &out, &err), SPECD_E_INVALID_ARG);
            if (!strstr(err.message, frag[c])) fail_msg("'%s' lacks '%s'", err.message, frag[c]);
            assert_int_equal(out.n_accepted, SENTINEL);
            for (int i = 0; i < 4; i++) assert_int_equal(path[i], SENTINEL);
            for (int i = 0; i < 5; i++) assert_int_equal(out_tok[i], SENTINEL);
        }
        const int32_t ok[4] = {-1, 0, 1, 2};
        specd_tree_input in = {.n_nodes = 5,
                               .parent = ok,
                               .token = tok,
                               .draft_probs = NULL,
                               .q_vocab = 0,
                               .target_logits = logits,
                               .n_vocab = V,
                               .key = (specd_sample_key){.seed = 1, .sequence = 2, .position = 3}};
        specd_tree_result out = {.path = path,
                                 .tokens = out_tok,
                                 .n_accepted = SENTINEL,
                                 .n_emitted = SENTINEL,
                                 .lossy = true};
        specd_error err;
        assert_int_equal(specd_accept_tree(a, &in, &out, &err), SPECD_E_INVALID_ARG); /* > max */
        in.n_nodes = 0;
        assert_int_equal(specd_accept_tree(a, &in, &out, &err), SPECD_E_INVALID_ARG);
        specd_accept_destroy(a);
    }
}

static void test_positionwise_errors(void **state) {
    (void)state;
    float logits[K * V] = {0};
    int32_t draft[K] = {0, 1, 2, 3};
    uint8_t acc_mask[K];
    memset(acc_mask, 0xee, sizeof acc_mask);
    specd_accept *a = make(SPECD_ACCEPT_COUPLED, K);
    specd_positionwise_input in = {.n = K,
                                   .draft = draft,
                                   .target_logits = logits,
                                   .n_vocab = V,
                                   .positions = NULL,
                                   .key = {.seed = 1, .sequence = 2, .position = 3}};
    specd_positionwise_result out = {.accept = acc_mask, .target = NULL, .n_accepted = SENTINEL};
    specd_error err;
    logits[2 * V + 1] = NAN;
    assert_int_equal(specd_accept_positionwise(a, &in, &out, &err), SPECD_E_NUMERIC);
    logits[2 * V + 1] = 0.0f;
    draft[3] = V;
    assert_int_equal(specd_accept_positionwise(a, &in, &out, &err), SPECD_E_INVALID_ARG);
    draft[3] = 3;
    in.n = 0;
    assert_int_equal(specd_accept_positionwise(a, &in, &out, &err), SPECD_E_INVALID_ARG);
    for (int i = 0; i < K; i++) assert_int_equal(acc_mask[i], 0xee);
    assert_int_equal(out.n_accepted, SENTINEL);
    in.n = K;
    assert_int_equal(specd_accept_positionwise(a, &in, &out, &err), SPECD_OK);
    specd_accept_destroy(a);
}

static void test_sampler_errors(void **state) {
    (void)state;
    specd_sampling_params sp = specd_sampling_default_params();
    specd_sampler *s = NULL;
    specd_error err;
    assert_int_equal(specd_sampler_create(&sp, 0, &s, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_sampler_create(&sp, V, &s, &err), SPECD_OK);
    float logits[V] = {0}, probs[V];
    for (int i = 0; i < V; i++) probs[i] = -7.0f;
    int32_t tok = SENTINEL;
    specd_sample_key key = {.seed = 1, .sequence = 2, .position = 3};
    assert_int_equal(specd_sampler_sample(s, logits, V + 1, key, &tok, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_sampler_sample(s, logits, 0, key, &tok, &err), SPECD_E_INVALID_ARG);
    logits[4] = NAN;
    assert_int_equal(specd_sampler_sample(s, logits, V, key, &tok, &err), SPECD_E_NUMERIC);
    assert_int_equal(specd_sampler_probs(s, logits, V, probs, &err), SPECD_E_NUMERIC);
    assert_int_equal(tok, SENTINEL);
    for (int i = 0; i < V; i++) assert_true(probs[i] == -7.0f);
    assert_int_equal(specd_sampler_sample(s, NULL, V, key, &tok, &err), SPECD_E_INVALID_ARG);
    specd_sampler_destroy(s);
    specd_sampler_destroy(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_input_succeeds),
        cmocka_unit_test(test_nan_and_inf_logits),
        cmocka_unit_test(test_vocab_mismatch),
        cmocka_unit_test(test_k_out_of_range),
        cmocka_unit_test(test_token_out_of_range),
        cmocka_unit_test(test_bad_q),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_empty_distribution),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_bias_outside_call_vocab),
        cmocka_unit_test(test_temperature_overflow),
        cmocka_unit_test(test_malformed_tree),
        cmocka_unit_test(test_positionwise_errors),
        cmocka_unit_test(test_sampler_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
