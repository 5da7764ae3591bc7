/* The drafter sends draft distributions q by shared buffer when its policy samples: a real
 * specd-drafter serving the draft policy with sample=1 (the default model as its own drafter)
 * returns, with each sampled draft, q rows read from its buffer that equal bit for bit the q the
 * same policy computes in this process with the same key, over several steps (the buffer is
 * rewritten and re-published each time); a deterministic draft (sample=0) carries none. And
 * end to end: a session under rejection sampling with the `remote` policy (drafts and q from the
 * daemon) emits exactly what the same session with the draft policy in-process emits (without q
 * a sampled draft would be judged as deterministic, and the outputs part). Needs the real model.
 * usage: test_drafter_q DRAFTER_BINARY */
#include "test_main.h"

#include <string.h>

#include "common/alloc.h"
#include "daemon_util.h"
#include "drafter_q_seq.h"
#include "specd/policy.h"
#include "specd/runtime.h"
#include "specd/spec_runtime.h"

enum { K = 4, SEQ = 3 };
static const char *drafter_bin, *model_path;
static const specd_ipc_fingerprint fp = {.vocab_size = TEST_VOCAB, .tokenizer_hash = TEST_TOKHASH};
static pid_t running; /* the drafter, killed by the teardown when a test fails */

static int teardown(void **state) {
    (void)state;
    if (running > 0) daemon_stop(running, SIGKILL);
    running = 0;
    return 0;
}

static void open_seq(specd_ipc_client *c, uint64_t id, const char *policy, const uint32_t *prompt,
                     size_t n) {
    specd_ipc_seq_params sq = {.seq_id = id,
                               .prompt = prompt,
                               .n_prompt = n,
                               .sampling = {.temperature = 0.8f, .top_p = 1.0f},
                               .seed = 5,
                               .policy = policy,
                               .max_draft = K,
                               .rule = SPECD_ACCEPT_REJECTION};
    specd_error err;
    if (specd_ipc_client_open_seq(c, &sq, &err) != SPECD_OK) fail_msg("open: %s", err.message);
}

/* A drafter serving s (the draft policy, sampling) and g (the same, deterministic). */
static void start_drafter(daemon_fixture *d) {
    char spec_s[1200], spec_g[1200];
    assert_true(daemon_temp_endpoint(d));
    snprintf(spec_s, sizeof spec_s, "s=draft:model=%s,sample=1,k=%d", model_path, K);
    snprintf(spec_g, sizeof spec_g, "g=draft:model=%s,k=%d", model_path, K);
    d->pid = fork();
    if (d->pid == 0) {
        execl(drafter_bin, drafter_bin, "--endpoint", d->ep, "--vocab", "49152",
              "--tokenizer-hash", TEST_TOKHASH_ARG, "--policy", spec_s, "--policy", spec_g,
              (char *)NULL);
        _exit(127);
    }
    running = d->pid;
    assert_true(daemon_wait_ready(d->ep, SPECD_IPC_ROLE_DRAFTER));
}

static void stop_drafter(daemon_fixture *d) {
    running = 0;
    assert_int_equal(daemon_fixture_stop(d), 0);
}

static void test_sampled_draft_brings_q(void **state) {
    (void)state;
    daemon_fixture d;
    start_drafter(&d);
    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = d.ep;
    p.timeout_ms = 30000; /* the drafter loads the model on open */
    p.retry_ms = 0;
    specd_ipc_client *c = NULL;
    specd_error err;
    assert_int_equal(specd_ipc_client_create(&p, SPECD_IPC_ROLE_DRAFTER, &fp, &c, &err), SPECD_OK);

    /* The same policy here, keyed as the drafter keys it (seed, seq_key = seq id). */
    const specd_policy_ops *ops = specd_policy_find("draft");
    assert_non_null(ops);
    specd_policy_env env = {.n_vocab = (int32_t)TEST_VOCAB, .max_draft = K, .seed = 5,
                            .seq_key = SEQ, .rule = SPECD_ACCEPT_REJECTION};
    env.sampling = specd_sampling_default_params();
    env.sampling.temperature = 0.8f;
    void *ref = NULL;
    char opts[1100];
    snprintf(opts, sizeof opts, "model=%s,sample=1,k=%d", model_path, K);
    if (ops->create(&env, opts, &ref, &err) != SPECD_OK) fail_msg("create: %s", err.message);

    size_t qn = (size_t)K * TEST_VOCAB;
    float *q = specd_alloc_array(qn, sizeof(float)), *want_q = specd_alloc_array(qn, sizeof(float));
    int32_t hist[64] = {1, 9690, 198, 2683, 314, 260, 1431, 28, 2, 198};
    int64_t n = 10;
    uint32_t prompt[10], draft[K], commit[K];
    for (int i = 0; i < 10; i++) prompt[i] = (uint32_t)hist[i];
    open_seq(c, SEQ, "s", prompt, 10);
    size_t n_commit = 0;
    for (int step = 0; step < 3; step++) {
        int32_t want[K], nw = 0;
        int want_has_q = 0;
        if (ops->propose(ref, hist, n, K, want, &nw, want_q, &want_has_q, &err) != SPECD_OK)
            fail_msg("reference propose: %s", err.message);
        assert_int_equal(nw, K);
        assert_true(want_has_q);
        size_t nd = 0;
        int has_q = 0;
        if (specd_ipc_client_propose_q(c, SEQ, (uint64_t)step, commit, n_commit, draft, K, &nd, q,
                                       &has_q, &err) != SPECD_OK)
            fail_msg("propose: %s", err.message);
        assert_int_equal(nd, K);
        assert_true(has_q);
        for (int i = 0; i < K; i++) assert_int_equal(draft[i], (uint32_t)want[i]);
        if (memcmp(q, want_q, qn * sizeof(float)) != 0)
            fail_msg("step %d: q from the drafter's buffer differs from the policy's", step);
        /* accept the first two drafts and the target's pick (here: token 13) */
        n_commit = 3;
        commit[0] = draft[0];
        commit[1] = draft[1];
        commit[2] = 13;
        for (size_t i = 0; i < n_commit; i++) hist[n++] = (int32_t)commit[i];
    }
    ops->destroy(ref);

    /* A deterministic draft (sample=0) carries no q: q is left alone. */
    open_seq(c, SEQ + 1, "g", prompt, 10);
    for (size_t i = 0; i < qn; i++) q[i] = -1.0f;
    size_t nd = 0;
    int has_q = 1;
    if (specd_ipc_client_propose_q(c, SEQ + 1, 0, NULL, 0, draft, K, &nd, q, &has_q, &err) !=
        SPECD_OK)
        fail_msg("propose g: %s", err.message);
    assert_int_equal(nd, K);
    assert_false(has_q);
    for (size_t i = 0; i < qn; i++)
        if (q[i] != -1.0f) fail_msg("q written at %zu for a deterministic draft", i);

    specd_free(q);
    specd_free(want_q);
    specd_ipc_client_destroy(c);
    stop_drafter(&d);
}

enum { N_GEN = 24 };

/* N_GEN tokens under rejection sampling at T 0.8 with `policy`; returns accepted drafts. */
static int64_t generate(specd_model *model, specd_context *ctx, const char *policy,
                        const char *options, int32_t *out) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = specd_model_get_info(model)->n_vocab;
    sp.max_draft = K;
    sp.target = model;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    const specd_seq_params params = drafter_q_seq_params(policy, options, N_GEN);
    assert_int_equal(
        specd_spec_seq_open(spec, 0, DRAFTER_Q_PROMPT, DRAFTER_Q_N_PROMPT, &params, &err),
        SPECD_OK);
    specd_run_stats rs;
    if (specd_spec_run(spec, 0, ctx, 0, NULL, NULL, &rs, &err) != SPECD_OK)
        fail_msg("run (%s): %s", policy, err.message);
    int64_t n;
    const int32_t *toks = specd_spec_seq_output(spec, 0, &n);
    assert_int_equal(n, N_GEN);
    memcpy(out, toks, N_GEN * sizeof(int32_t));
    specd_seq_stats st;
    assert_int_equal(specd_spec_seq_stats(spec, 0, &st, &err), SPECD_OK);
    specd_spec_destroy(spec);
    return st.n_accepted;
}

static void test_remote_rejection_equals_local(void **state) {
    (void)state;
    char local_opts[1100], remote_opts[400];
    daemon_fixture d;
    start_drafter(&d);
    specd_model *model = NULL;
    specd_context *ctx = NULL;
    specd_error err;
    assert_int_equal(specd_model_create(model_path, &model, &err), SPECD_OK);
    specd_context_params cp = specd_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 32;
    assert_int_equal(specd_context_create(model, &cp, &ctx, &err), SPECD_OK);
    snprintf(local_opts, sizeof local_opts, "model=%s,sample=1,k=%d", model_path, K);
    snprintf(remote_opts, sizeof remote_opts,
             "endpoint=%s,policy=s,tokenizer_hash=" TEST_TOKHASH_ARG ",timeout_ms=30000", d.ep);
    int32_t local[N_GEN], remote[N_GEN];
    int64_t acc_local = generate(model, ctx, "draft", local_opts, local);
    int64_t acc_remote = generate(model, ctx, "remote", remote_opts, remote);
    print_message("accepted drafts: local %lld, remote %lld\n", (long long)acc_local,
                  (long long)acc_remote);
    for (int i = 0; i < N_GEN; i++)
        if (local[i] != remote[i])
            fail_msg("token %d: remote %d, local %d", i, remote[i], local[i]);
    assert_int_equal(acc_local, acc_remote);
    assert_true(acc_remote > 0); /* the drafts were used, not a plain decode */
    specd_context_destroy(ctx);
    specd_model_destroy(model);
    stop_drafter(&d);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DRAFTER\n", argv[0]);
        return 2;
    }
    drafter_bin = argv[1];
    model_path = specd_test_model_path();
    if (!model_path) {
        printf("skipped: SPECD_TEST_MODEL not set\n");
        return SPECD_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_sampled_draft_brings_q, teardown),
        cmocka_unit_test_teardown(test_remote_rejection_equals_local, teardown)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
