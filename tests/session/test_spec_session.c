/* The session's contract, with the target played by a fixed function of the context (a
 * second-order Markov chain over V = 64 tokens): speculative runs under the greedy and coupled
 * rules emit exactly the tokens of plain runs, drafts really get accepted, and bad input changes
 * nothing. The real-model A/B runs in tests/ab. */
#include "test_main.h"

#include "specd/spec.h"

#include <math.h>
#include <string.h>
#include <time.h>

enum { V = 64, MAXK = 8, N_OUT = 160 };

/* Logits of the token after (a, b): strongly prefers a short cycle so n-gram drafts often hit,
 * with enough spread that sampling at T = 0.8 really varies. */
static void target_logits(int32_t a, int32_t b, float *row) {
    uint32_t h = (uint32_t)a * 2654435761u ^ (uint32_t)b * 40503u;
    for (int x = 0; x < V; x++) {
        h = h * 1664525u + 1013904223u;
        row[x] = (float)(h >> 8) / (float)(1u << 24) * 2.0f;
    }
    row[(b + 1) % 8] += 7.0f;
    row[(a + 3) % 8] += 5.5f;
}

typedef struct host_run {
    int32_t out[N_OUT + MAXK + 1];
    int64_t n_out;
    specd_seq_stats stats;
} host_run;

/* How a host run departs from the default: the adaptive guard on, and a step's drafted rows
 * made dear (the host burns this much CPU time per row beyond the first). */
typedef struct run_opts {
    int adaptive;
    uint64_t ns_per_draft_row;
} run_opts;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A host engine: runs "the target" over each laid-out step and feeds the logits back. */
static void run_with(const char *policy, const specd_policy_ops *ops, specd_accept_rule rule,
                     float temperature, uint64_t seed, const run_opts *ro, host_run *r) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    sp.max_draft = MAXK;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_seq_params p = specd_seq_default_params();
    p.policy = policy;
    p.policy_ops = ops;
    p.rule = rule;
    p.sampling.temperature = temperature;
    p.seed = seed;
    p.max_tokens = N_OUT;
    p.adaptive = ro ? ro->adaptive : 0;
    const int32_t prompt[] = {5, 6, 7, 0, 1, 2, 3};
    assert_int_equal(specd_spec_seq_open(spec, 3, prompt, 7, &p, &err), SPECD_OK);
    int32_t ctx[7 + N_OUT + MAXK + 1];
    memcpy(ctx, prompt, sizeof prompt);
    int64_t n_ctx = 7;
    float logits[(MAXK + 1) * V];
    while (!specd_spec_seq_done(spec, 3)) {
        specd_step_layout lay;
        assert_int_equal(specd_spec_seq_layout(spec, 3, &lay, &err), SPECD_OK);
        assert_null(lay.visible);
        /* row i continues ctx[0..n_ctx-1) + tokens[0..i] */
        for (int32_t i = 0; i < lay.n_rows; i++) {
            int32_t row = lay.rows[i];
            assert_int_equal(lay.pos[row], n_ctx - 1 + row);
            int32_t b = lay.tokens[row];
            int32_t a = row > 0 ? lay.tokens[row - 1] : ctx[n_ctx - 2];
            target_logits(a, b, logits + (size_t)i * V);
        }
        if (ro && lay.n_rows > 1) { /* a cost, not a wait: the guard measures it */
            uint64_t until = now_ns() + ro->ns_per_draft_row * (uint64_t)(lay.n_rows - 1);
            while (now_ns() < until) {
            }
        }
        specd_step_outcome o;
        assert_int_equal(specd_spec_seq_verify(spec, 3, logits, &o, &err), SPECD_OK);
        assert_int_equal(o.n_keep, o.n_accepted + 1);
        memcpy(ctx + n_ctx, o.emitted, (size_t)o.n_emitted * sizeof(int32_t));
        n_ctx += o.n_emitted;
    }
    const int32_t *out = specd_spec_seq_output(spec, 3, &r->n_out);
    memcpy(r->out, out, (size_t)r->n_out * sizeof(int32_t));
    assert_int_equal(specd_spec_seq_stats(spec, 3, &r->stats, &err), SPECD_OK);
    specd_spec_seq_close(spec, 3);
    specd_spec_destroy(spec);
}

static void run(const char *policy, const specd_policy_ops *ops, specd_accept_rule rule,
                float temperature, uint64_t seed, host_run *r) {
    run_with(policy, ops, rule, temperature, seed, NULL, r);
}

static void assert_same_output(const host_run *a, const host_run *b) {
    assert_int_equal(a->n_out, b->n_out);
    for (int64_t i = 0; i < a->n_out; i++)
        if (a->out[i] != b->out[i]) fail_msg("outputs differ at %lld", (long long)i);
}

static void test_coupled_and_greedy_spec_equal_plain(void **s) {
    (void)s;
    static host_run plain, spec;
    const struct { specd_accept_rule rule; float t; } cases[] = {
        {SPECD_ACCEPT_COUPLED, 0.8f}, {SPECD_ACCEPT_COUPLED, 1.5f},
        {SPECD_ACCEPT_COUPLED, 0.0f}, {SPECD_ACCEPT_GREEDY, 0.7f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (uint64_t seed = 1; seed <= 5; seed++) {
            run("none", NULL, cases[c].rule, cases[c].t, seed, &plain);
            run("ngram", NULL, cases[c].rule, cases[c].t, seed, &spec);
            assert_int_equal(plain.n_out, N_OUT);
            assert_same_output(&plain, &spec);
            assert_int_equal(plain.stats.n_draft_tokens, 0);
            if (spec.stats.n_accepted == 0) /* speculation really happened */
                fail_msg("case %zu seed %llu: drafts %lld accepted 0", c, (unsigned long long)seed, (long long)spec.stats.n_draft_tokens);
            assert_true(spec.stats.n_steps < plain.stats.n_steps);
        }
}

static void test_different_seeds_differ(void **s) {
    (void)s;
    static host_run a, b;
    run("none", NULL, SPECD_ACCEPT_COUPLED, 1.0f, 1, &a);
    run("none", NULL, SPECD_ACCEPT_COUPLED, 1.0f, 2, &b);
    assert_memory_not_equal(a.out, b.out, sizeof(int32_t) * N_OUT);
}

/* A host-supplied policy that always proposes wrong tokens: nothing is accepted and the output
 * is still plain decoding's. */
static specd_status wrong_create(const specd_policy_env *e, const char *o, void **st,
                                 specd_error *err) {
    (void)e, (void)o, (void)err;
    *st = NULL;
    return SPECD_OK;
}
static void wrong_destroy(void *st) { (void)st; }
static specd_status wrong_propose(void *st, const int32_t *h, int64_t n, int32_t max_draft,
                                  int32_t *draft, int32_t *n_draft, float *q, int *has_q,
                                  specd_error *err) {
    (void)st, (void)q, (void)err;
    for (int32_t i = 0; i < max_draft; i++) draft[i] = 40 + (int32_t)((h[n - 1] + i) % 20);
    *n_draft = max_draft;
    *has_q = 0;
    return SPECD_OK;
}
static const specd_policy_ops wrong_ops = {.abi_version = SPECD_POLICY_ABI_VERSION,
                                           .name = "wrong", .create = wrong_create,
                                           .destroy = wrong_destroy, .propose = wrong_propose};

static void test_host_policy_with_bad_drafts(void **s) {
    (void)s;
    static host_run plain, spec;
    run("none", NULL, SPECD_ACCEPT_COUPLED, 0.9f, 7, &plain);
    run(NULL, &wrong_ops, SPECD_ACCEPT_COUPLED, 0.9f, 7, &spec);
    assert_same_output(&plain, &spec);
    assert_true(spec.stats.n_draft_tokens > 0);
    assert_true(spec.stats.n_accepted < spec.stats.n_draft_tokens / 4);
}

/* An oracle drafter: the target's greedy continuation, with shadow drafts allowed. */
static int32_t greedy_next(int32_t a, int32_t b) {
    float row[V];
    target_logits(a, b, row);
    int32_t best = 0;
    for (int32_t x = 1; x < V; x++)
        if (row[x] > row[best]) best = x;
    return best;
}
static specd_status oracle_propose(void *st, const int32_t *h, int64_t n, int32_t max_draft,
                                   int32_t *draft, int32_t *n_draft, float *q, int *has_q,
                                   specd_error *err) {
    (void)st, (void)q, (void)err;
    int32_t a = h[n - 2], b = h[n - 1];
    for (int32_t i = 0; i < max_draft; i++) {
        draft[i] = greedy_next(a, b);
        a = b;
        b = draft[i];
    }
    *n_draft = max_draft;
    *has_q = 0;
    return SPECD_OK;
}
static const specd_policy_ops oracle_ops = {.abi_version = SPECD_POLICY_ABI_VERSION,
                                            .name = "oracle", .flags = SPECD_POLICY_SHADOW_DRAFTS,
                                            .create = wrong_create, .destroy = wrong_destroy,
                                            .propose = oracle_propose};

/* Shadow drafts through the session: the oracle's verified rows are made dear (20 ms of CPU a
 * row, thousands of plain steps here), so however right its drafts, the guard backs off after
 * its opening probe and never drafts again (no probes: a proposal's cost is known). On the plain
 * steps the session still asks the drafter, and each shadow draft matches the output in full,
 * which is what verifying it would have accepted. The output is plain decoding's. */
static void test_shadow_drafts_through_the_session(void **s) {
    (void)s;
    static host_run plain, spec;
    run("none", NULL, SPECD_ACCEPT_GREEDY, 0.0f, 1, &plain);
    const run_opts dear = {.adaptive = 1, .ns_per_draft_row = 20000000};
    run_with(NULL, &oracle_ops, SPECD_ACCEPT_GREEDY, 0.0f, 1, &dear, &spec);
    assert_same_output(&plain, &spec);
    const specd_seq_stats *st = &spec.stats;
    fprintf(stderr, "oracle behind a dear verifier: %lld proposals verified, %lld back-offs, "
                    "%lld shadow drafts, %lld of their tokens matched\n",
            (long long)st->n_draft_tokens, (long long)st->n_backoffs,
            (long long)st->n_shadow_drafts, (long long)st->n_shadow_accepted);
    assert_int_equal(st->n_backoffs, 1);
    assert_true(st->n_draft_tokens <= 2); /* the opening probe's */
    assert_int_equal(st->n_accepted, st->n_draft_tokens);
    /* a shadow of MAXK tokens resolves when all of them matched, one pending at a time: about
     * N_OUT / MAXK of them, each full but the last few (cut to the tokens left) */
    assert_true(st->n_shadow_drafts >= N_OUT / MAXK - 2);
    assert_true(st->n_shadow_accepted >= (st->n_shadow_drafts - 2) * MAXK);
    assert_true(st->n_shadow_accepted <= st->n_steps);
    /* the guard off: no shadows */
    run(NULL, &oracle_ops, SPECD_ACCEPT_GREEDY, 0.0f, 1, &spec);
    assert_same_output(&plain, &spec);
    assert_int_equal(spec.stats.n_shadow_drafts, 0);
}

/* A self-speculative host policy that asks to keep rows the step does not have. */
static int32_t bad_tokens[2] = {1, 2}, bad_pos[2] = {0, 1}, bad_rows[2] = {0, 1};
static int32_t bad_keep[3] = {0, 1, 5}, bad_emitted[1] = {3};
static specd_status bad_layout(void *st, const int32_t *h, int64_t n, specd_step_layout *out,
                               specd_error *err) {
    (void)st, (void)h, (void)err;
    bad_pos[0] = (int32_t)n - 1;
    bad_pos[1] = (int32_t)n;
    *out = (specd_step_layout){.n_tokens = 2, .tokens = bad_tokens, .pos = bad_pos, .n_rows = 2,
                               .rows = bad_rows};
    return SPECD_OK;
}
static specd_status bad_verify(void *st, const float *logits, specd_step_outcome *out,
                               specd_error *err) {
    (void)st, (void)logits, (void)err;
    *out = (specd_step_outcome){.n_emitted = 1, .emitted = bad_emitted, .n_keep = 3,
                                .keep = bad_keep};
    return SPECD_OK;
}
static const specd_policy_ops bad_keep_ops = {.abi_version = SPECD_POLICY_ABI_VERSION,
                                              .name = "bad-keep", .create = wrong_create,
                                              .destroy = wrong_destroy, .layout = bad_layout,
                                              .verify = bad_verify};

static void test_bad_keep_list_is_refused(void **s) {
    (void)s;
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_seq_params p = specd_seq_default_params();
    p.policy_ops = &bad_keep_ops;
    p.adaptive = 0; /* the guard would make the first step a plain one */
    const int32_t prompt[] = {1, 2};
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, 2, &p, &err), SPECD_OK);
    specd_step_layout lay;
    specd_step_outcome o;
    float logits[2 * V] = {0};
    assert_int_equal(specd_spec_seq_layout(spec, 0, &lay, &err), SPECD_OK);
    assert_int_equal(specd_spec_seq_verify(spec, 0, logits, &o, &err), SPECD_E_INTERNAL);
    assert_non_null(strstr(err.message, "kept 3 of 2 rows"));
    int64_t n_out;
    specd_spec_seq_output(spec, 0, &n_out);
    assert_int_equal(n_out, 0); /* nothing emitted */
    specd_spec_destroy(spec);
}

static void test_bad_input(void **s) {
    (void)s;
    specd_spec_params sp = specd_spec_default_params();
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_E_INVALID_ARG); /* n_vocab 0 */
    sp.n_vocab = V;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_seq_params p = specd_seq_default_params();
    const int32_t bad_prompt[] = {1, V};
    assert_int_equal(specd_spec_seq_open(spec, 0, bad_prompt, 2, &p, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "outside the vocabulary"));
    p.policy = "nope";
    const int32_t prompt[] = {1, 2};
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, 2, &p, &err), SPECD_E_INVALID_ARG);
    p.policy = "ngram";
    p.policy_options = "k=99";
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, 2, &p, &err), SPECD_E_INVALID_ARG);
    p.policy_options = NULL;
    assert_int_equal(specd_spec_seq_open(spec, 64, prompt, 2, &p, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, 2, &p, &err), SPECD_OK);
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, 2, &p, &err), SPECD_E_STATE);

    float logits[(MAXK + 1) * V];
    specd_step_outcome o;
    assert_int_equal(specd_spec_seq_verify(spec, 0, logits, &o, &err), SPECD_E_STATE);
    specd_step_layout lay;
    assert_int_equal(specd_spec_seq_layout(spec, 0, &lay, &err), SPECD_OK);
    for (int i = 0; i < lay.n_rows * V; i++) logits[i] = (float)(i % 7);
    logits[3] = NAN;
    assert_int_equal(specd_spec_seq_verify(spec, 0, logits, &o, &err), SPECD_E_NUMERIC);
    int64_t n_out;
    specd_spec_seq_output(spec, 0, &n_out);
    assert_int_equal(n_out, 0); /* nothing emitted */
    logits[3] = 0.0f;
    assert_int_equal(specd_spec_seq_verify(spec, 0, logits, &o, &err), SPECD_OK);
    specd_spec_seq_output(spec, 0, &n_out);
    assert_int_equal(n_out, o.n_emitted);
    specd_spec_seq_close(spec, 0);
    specd_spec_seq_close(spec, 0); /* closing twice is a no-op */
    assert_int_equal(specd_spec_seq_layout(spec, 0, &lay, &err), SPECD_E_INVALID_ARG);
    specd_spec_destroy(spec);
    specd_spec_destroy(NULL);
}

static void test_stop_token_ends_sequence(void **s) {
    (void)s;
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    specd_spec *spec;
    assert_int_equal(specd_spec_create(&sp, &spec, NULL), SPECD_OK);
    specd_seq_params p = specd_seq_default_params();
    p.sampling.temperature = 0.0f;
    const int32_t stop = 9;
    p.stop_tokens = &stop;
    p.n_stop_tokens = 1;
    const int32_t prompt[] = {1};
    assert_int_equal(specd_spec_seq_open(spec, 1, prompt, 1, &p, NULL), SPECD_OK);
    float logits[V] = {0};
    logits[stop] = 5.0f;
    specd_step_layout lay;
    specd_step_outcome o;
    assert_int_equal(specd_spec_seq_layout(spec, 1, &lay, NULL), SPECD_OK);
    assert_int_equal(specd_spec_seq_verify(spec, 1, logits, &o, NULL), SPECD_OK);
    assert_int_equal(o.emitted[0], stop);
    assert_true(specd_spec_seq_done(spec, 1));
    specd_error err;
    assert_int_equal(specd_spec_seq_layout(spec, 1, &lay, &err), SPECD_E_STATE);
    specd_spec_destroy(spec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coupled_and_greedy_spec_equal_plain),
        cmocka_unit_test(test_different_seeds_differ),
        cmocka_unit_test(test_host_policy_with_bad_drafts),
        cmocka_unit_test(test_shadow_drafts_through_the_session),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_bad_keep_list_is_refused),
        cmocka_unit_test(test_stop_token_ends_sequence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
