/* kill -9 of a real daemon in the middle of a stream of requests. The host keeps going (calls
 * fail fast with a status; its own history keeps growing), reconnects once the daemon is back,
 * replays its session, and the daemon ends up holding exactly the host's history: nothing lost,
 * nothing applied twice. For the verifier, the shared logit buffer is mapped again by the new
 * process (its name was unlinked long ago) and references to it are accepted.
 * usage: test_fault DRAFTER_BINARY VERIFIER_BINARY */
#include "test_main.h"

#include <dirent.h>
#include <pthread.h>
#include <string.h>

#include "daemon_util.h"
#include "ipc/frame.h"
#include "specd/accept.h"
#include "specd/sampling.h"

static const char *drafter_bin, *verifier_bin;
static const specd_ipc_fingerprint model = {.vocab_size = TEST_VOCAB,
                                            .tokenizer_hash = TEST_TOKHASH};

typedef struct killer {
    pid_t pid;
    int delay_us;
} killer;

static void wait_reconnected(specd_ipc_client *c);

/* The killer lands mid-request at a moment of its own; the driver joins it (the daemon is dead and
 * reaped then) halfway between the kill and the restart step, so the steps after the join meet a
 * dead daemon however the threads are scheduled. */
static void *kill_later(void *arg) {
    killer *k = arg;
    usleep((useconds_t)k->delay_us);
    kill(k->pid, SIGKILL);
    int status;
    waitpid(k->pid, &status, 0);
    return NULL;
}

static uint32_t token_at(size_t i) {
    return (uint32_t)((i * 7919u + 13u) % TEST_VOCAB);
}

static int count_ours(void) {
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "specd-%u-", (unsigned)geteuid());
    DIR *d = opendir("/dev/shm");
    int count = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, (size_t)n) == 0) count++;
    if (d) closedir(d);
    return count;
}

typedef struct run_stats {
    int ok, failed, failed_after_restart_ok;
} run_stats;

/* Drives STEPS commits; kills the daemon (from another thread, so it lands mid-request) at
 * KILL_AT, restarts it at RESTART_AT. */
static void run_with_fault(const char *bin, specd_ipc_role role) {
    enum { STEPS = 600, KILL_AT = 150, RESTART_AT = 350, PROMPT = 5 };
    daemon_fixture f;
    assert_true(daemon_fixture_start(&f, bin, role));

    specd_error err;
    specd_ipc_client *c = daemon_client(f.ep, role, &model, 300, 20, &err);
    assert_non_null(c);

    uint32_t expected[PROMPT + STEPS];
    for (size_t i = 0; i < PROMPT + STEPS; i++)
        expected[i] = token_at(i);
    specd_ipc_seq_params sq = {.seq_id = 42,
                               .prompt = expected,
                               .n_prompt = PROMPT,
                               .sampling = {.temperature = 0.7f, .top_p = 0.95f},
                               .seed = 1234};
    assert_int_equal(specd_ipc_client_open_seq(c, &sq, &err), SPECD_OK);

    pthread_t th;
    killer k = {.pid = f.pid, .delay_us = 200};
    run_stats rs = {0};
    int down_failures = 0;
    for (size_t i = 0; i < STEPS; i++) {
        if (i == KILL_AT) pthread_create(&th, NULL, kill_later, &k);
        if (i == (KILL_AT + RESTART_AT) / 2) pthread_join(th, NULL);
        if (i == RESTART_AT) f.pid = daemon_start(bin, f.ep, NULL);
        uint32_t t = expected[PROMPT + i];
        specd_status st = specd_ipc_client_commit(c, 42, &t, 1, &err);
        if (st == SPECD_OK)
            rs.ok++;
        else {
            rs.failed++;
            /* Only transport-level failures are expected here. */
            if (st != SPECD_E_PEER && st != SPECD_E_TIMEOUT)
                fail_msg("step %zu: unexpected %s: %s", i, specd_status_name(st), err.message);
            if (i >= KILL_AT && i < RESTART_AT) down_failures++;
        }
        /* Plain decoding goes on at its own pace meanwhile. */
        usleep(500);
    }
    /* The daemon is back: make sure the session is (it may still be reconnecting). */
    wait_reconnected(c);
    uint64_t len, hash;
    assert_int_equal(specd_ipc_client_seq_info(c, 42, &len, &hash, &err), SPECD_OK);
    assert_int_equal(len, PROMPT + STEPS);
    assert_int_equal(hash, specd_ipc_tokens_hash(expected, PROMPT + STEPS));
    /* At least one replay (a loaded machine may time out a live daemon too, which is safe). */
    assert_true(specd_ipc_client_sessions(c) >= 2);
    assert_true(down_failures > 0); /* the fault really happened mid-stream */
    assert_true(rs.ok > KILL_AT);   /* and most steps reached the daemon */
    printf("%s: %d steps reached the daemon, %d went without it; session replayed\n", bin, rs.ok,
           rs.failed);

    specd_ipc_client_destroy(c);
    assert_int_equal(daemon_fixture_stop(&f), 0);
}

static void test_drafter_killed(void **state) {
    (void)state;
    run_with_fault(drafter_bin, SPECD_IPC_ROLE_DRAFTER);
}

/* ---- verifier: a whole generation, with the verifier killed and restarted in the middle ---- */

/* Waits until the client is back with a restarted daemon: the steps left can pass in less time
 * than a reconnect takes (retry_ms), and then no step after the restart would reach it. */
static void wait_reconnected(specd_ipc_client *c) {
    specd_error err;
    specd_status st = SPECD_E_PEER;
    for (uint64_t end = daemon_now_ms() + DAEMON_WAIT_MS; st != SPECD_OK;) {
        st = specd_ipc_client_ping(c, &err);
        if (st == SPECD_OK || daemon_now_ms() >= end) break;
        sleep_ms(20);
    }
    if (st != SPECD_OK) fail_msg("the restarted daemon never answered: %s", err.message);
}

enum { GK = 6, GSTEPS = 240, GKILL = 50, GRESTART = 130, GPROMPT = 4 };
#define GSEED 0x1234abcdULL
#define GSEQ 7u

static uint32_t mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* A synthetic target (a stand-in for a model, so the fault tests need none): the logits for
 * the next token after `prev` at `pos`, peaked at one token so drafts are often right. */
static uint32_t peak_of(uint32_t prev, uint32_t pos) {
    return mix(prev * 31u + pos * 17u) % TEST_VOCAB;
}

static void target_row(float *row, uint32_t prev, uint32_t pos) {
    uint32_t h = mix(prev ^ (pos << 16));
    for (uint32_t j = 0; j < TEST_VOCAB; j += 64)
        row[j] = 0.0f;
    for (uint32_t j = 0; j < TEST_VOCAB; j++)
        row[j] = (float)(mix(h + j) >> 8) * (2.0f / 16777216.0f);
    row[peak_of(prev, pos)] += 16.0f;
}

/* The drafter: guesses the peak, but gets every fifth position wrong. */
static void make_draft(uint32_t last, uint32_t pos, uint32_t *draft) {
    uint32_t prev = last;
    for (uint32_t i = 0; i < GK; i++) {
        uint32_t t = peak_of(prev, pos + i);
        if ((pos + i) % 5 == 0) t = (t + 1) % TEST_VOCAB;
        draft[i] = t;
        prev = t;
    }
}

static void target_rows(float *rows, uint32_t last, uint32_t pos, const uint32_t *draft) {
    for (uint32_t r = 0; r <= GK; r++)
        target_row(rows + (size_t)r * TEST_VOCAB, r == 0 ? last : draft[r - 1], pos + r);
}

static specd_accept *local_engine(void) {
    specd_accept_params p = specd_accept_default_params();
    p.rule = SPECD_ACCEPT_COUPLED;
    p.sampling.temperature = 0.8f;
    p.max_k = GK;
    p.max_vocab = TEST_VOCAB;
    specd_accept *a = NULL;
    specd_error err;
    if (specd_accept_create(&p, &a, &err) != SPECD_OK) fail_msg("accept: %s", err.message);
    return a;
}

/* In-process acceptance: the host's fallback, and the whole of the reference run. */
static size_t accept_local(specd_accept *a, const float *rows, const uint32_t *draft, uint32_t pos,
                           uint32_t *emitted) {
    int32_t d[GK], tok[GK + 1];
    for (int i = 0; i < GK; i++)
        d[i] = (int32_t)draft[i];
    specd_chain_input in = {.k = GK,
                            .draft = d,
                            .target_logits = rows,
                            .n_vocab = TEST_VOCAB,
                            .key = {.seed = GSEED, .sequence = GSEQ, .position = pos}};
    specd_chain_result res = {.tokens = tok};
    specd_error err;
    if (specd_accept_chain(a, &in, &res, &err) != SPECD_OK) fail_msg("chain: %s", err.message);
    for (int32_t i = 0; i < res.n_emitted; i++)
        emitted[i] = (uint32_t)tok[i];
    return (size_t)res.n_emitted;
}

static const uint32_t gprompt[GPROMPT] = {1, 500, 600, 700};

/* Plain in-process generation: the run without any daemon, hence without any fault. */
static size_t reference_run(uint32_t *hist) {
    specd_accept *a = local_engine();
    float *rows = malloc((size_t)(GK + 1) * TEST_VOCAB * sizeof *rows);
    size_t n = GPROMPT;
    memcpy(hist, gprompt, sizeof gprompt);
    for (int s = 0; s < GSTEPS; s++) {
        uint32_t draft[GK];
        make_draft(hist[n - 1], (uint32_t)n, draft);
        target_rows(rows, hist[n - 1], (uint32_t)n, draft);
        n += accept_local(a, rows, draft, (uint32_t)n, hist + n);
    }
    free(rows);
    specd_accept_destroy(a);
    return n;
}

static void test_verifier_killed(void **state) {
    (void)state;
    uint32_t *expect = malloc((GPROMPT + GSTEPS * (GK + 1)) * sizeof *expect);
    uint32_t *hist = malloc((GPROMPT + GSTEPS * (GK + 1)) * sizeof *hist);
    size_t n_expect = reference_run(expect);

    daemon_fixture f;
    assert_true(daemon_fixture_start(&f, verifier_bin, SPECD_IPC_ROLE_VERIFIER));
    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = f.ep;
    p.timeout_ms = 300;
    p.retry_ms = 20;
    specd_ipc_client *c = NULL;
    specd_error err;
    assert_int_equal(specd_ipc_client_create(&p, SPECD_IPC_ROLE_VERIFIER, &model, &c, &err),
                     SPECD_OK);
    specd_ipc_buffer *b = NULL;
    assert_int_equal(specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM,
                                             (size_t)(GK + 1) * TEST_VOCAB * sizeof(float), 0, &b,
                                             &err),
                     SPECD_OK);
    assert_int_equal(specd_ipc_client_attach_buffer(c, b, &err), SPECD_OK);
    specd_ipc_seq_params sq = {.seq_id = GSEQ,
                               .prompt = gprompt,
                               .n_prompt = GPROMPT,
                               .sampling = {.temperature = 0.8f, .top_p = 1.0f},
                               .seed = GSEED,
                               .rule = SPECD_ACCEPT_COUPLED};
    assert_int_equal(specd_ipc_client_open_seq(c, &sq, &err), SPECD_OK);
    specd_accept *fallback = local_engine();
    float *rows = specd_ipc_buffer_data(b);
    memcpy(hist, gprompt, sizeof gprompt);
    size_t n = GPROMPT;
    pthread_t th;
    killer k = {.pid = f.pid, .delay_us = 300};
    int remote = 0, local = 0, remote_after_restart = 0;
    for (int s = 0; s < GSTEPS; s++) {
        if (s == GKILL) pthread_create(&th, NULL, kill_later, &k);
        if (s == (GKILL + GRESTART) / 2) pthread_join(th, NULL);
        if (s == GRESTART) {
            f.pid = daemon_start(verifier_bin, f.ep, NULL);
            wait_reconnected(c);
        }
        uint32_t draft[GK];
        make_draft(hist[n - 1], (uint32_t)n, draft);
        target_rows(rows, hist[n - 1], (uint32_t)n, draft);
        uint64_t seq, shape[2] = {GK + 1, TEST_VOCAB};
        specd_ipc_ref r;
        assert_int_equal(specd_ipc_buffer_publish(b, NULL, &seq, &err), SPECD_OK);
        assert_int_equal(specd_ipc_buffer_ref(b, 0, 2, shape, SPECD_IPC_F32, seq, &r, &err),
                         SPECD_OK);
        specd_ipc_verify_result res;
        specd_status st = specd_ipc_client_verify(c, GSEQ, (uint64_t)s, draft, GK, &r, &res, &err);
        if (st == SPECD_OK) {
            memcpy(hist + n, res.emitted, res.n_emitted * sizeof *hist);
            n += res.n_emitted;
            remote++;
            if (s >= GRESTART) remote_after_restart++;
        } else {
            if (st != SPECD_E_PEER && st != SPECD_E_TIMEOUT)
                fail_msg("step %d: unexpected %s: %s", s, specd_status_name(st), err.message);
            /* Fallback: accept in-process, and tell the verifier later. */
            size_t e = accept_local(fallback, rows, draft, (uint32_t)n, hist + n);
            specd_ipc_client_commit(c, GSEQ, hist + n, e, NULL);
            n += e;
            local++;
        }
    }
    /* The text is the one of the run without the fault. */
    assert_int_equal(n, n_expect);
    assert_memory_equal(hist, expect, n * sizeof *hist);
    /* And the restarted verifier holds exactly that history. */
    wait_reconnected(c);
    uint64_t len, hash, mylen, myhash;
    assert_int_equal(specd_ipc_client_seq_info(c, GSEQ, &len, &hash, &err), SPECD_OK);
    assert_int_equal(specd_ipc_client_history(c, GSEQ, &mylen, &myhash, &err), SPECD_OK);
    assert_int_equal(len, n_expect);
    assert_int_equal(hash, specd_ipc_tokens_hash(expect, n_expect));
    assert_int_equal(myhash, hash);
    /* At least one replay (a loaded machine may time out a live daemon too, which is safe). */
    assert_true(specd_ipc_client_sessions(c) >= 2);
    assert_true(local > 0 && remote > GKILL && remote_after_restart > 0);
    printf("verifier: %zu tokens in %d steps, %d verified by the daemon, %d in-process while it "
           "was gone; identical to the fault-free run\n",
           n, GSTEPS, remote, local);
    specd_accept_destroy(fallback);
    specd_ipc_client_destroy(c);
    specd_ipc_buffer_destroy(b);
    assert_int_equal(daemon_fixture_stop(&f), 0);
    assert_int_equal(count_ours(), 0);
    free(expect);
    free(hist);
}

/* ---- drafter: a whole generation, with the drafter killed and restarted in the middle ----- */

enum { DK = 8, DN = 700, DKILL = 25, DRESTART = 90 };

/* A repetitive synthetic target (so n-gram drafts pay): the peak depends only on the previous
 * token and lives in a small range, so the text falls into a cycle. */
static uint32_t cyc_peak(uint32_t prev) {
    return 100u + mix(prev * 2654435761u) % 61u;
}

static void cyc_row(float *row, uint32_t prev, uint32_t pos) {
    uint32_t h = mix(prev ^ (pos << 16) ^ 0x9e3779b9u);
    for (uint32_t j = 0; j < TEST_VOCAB; j++)
        row[j] = (float)(mix(h + j) >> 8) * (2.0f / 16777216.0f);
    row[cyc_peak(prev)] += 16.0f;
}

static specd_accept *engine_k(int32_t k) {
    specd_accept_params p = specd_accept_default_params();
    p.rule = SPECD_ACCEPT_COUPLED;
    p.sampling.temperature = 0.8f;
    p.max_k = k;
    p.max_vocab = TEST_VOCAB;
    specd_accept *a = NULL;
    specd_error err;
    if (specd_accept_create(&p, &a, &err) != SPECD_OK) fail_msg("accept: %s", err.message);
    return a;
}

/* One plain decoding step: the keyed sample at position pos. */
static uint32_t plain_token(specd_sampler *smp, float *row, uint32_t prev, uint32_t pos) {
    cyc_row(row, prev, pos);
    int32_t t;
    specd_sample_key key = {.seed = GSEED, .sequence = GSEQ, .position = pos};
    specd_error err;
    if (specd_sampler_sample(smp, row, TEST_VOCAB, key, &t, &err) != SPECD_OK)
        fail_msg("sample: %s", err.message);
    return (uint32_t)t;
}

/* The generation test's drafter, killed by its teardown when the test fails (a daemon left
 * running would hold ctest's output pipe open until the timeout). */
static pid_t gen_pid;

static int gen_teardown(void **state) {
    (void)state;
    if (gen_pid > 0) daemon_stop(gen_pid, SIGKILL);
    gen_pid = 0;
    return 0;
}

static void test_drafter_killed_generation(void **state) {
    (void)state;
    specd_sampling_params sp = specd_sampling_default_params();
    sp.temperature = 0.8f;
    specd_sampler *smp = NULL;
    specd_error err;
    assert_int_equal(specd_sampler_create(&sp, TEST_VOCAB, &smp, &err), SPECD_OK);
    float *rows = malloc((size_t)(DK + 1) * TEST_VOCAB * sizeof *rows);
    uint32_t *expect = malloc((DN + DK + 1) * sizeof *expect);
    uint32_t *hist = malloc((DN + DK + 1) * sizeof *hist);
    /* Reference: plain decoding, no drafter at all. */
    memcpy(expect, gprompt, sizeof gprompt);
    for (size_t n = GPROMPT; n < DN; n++)
        expect[n] = plain_token(smp, rows, expect[n - 1], (uint32_t)n);

    daemon_fixture f;
    int ready = daemon_fixture_start(&f, drafter_bin, SPECD_IPC_ROLE_DRAFTER);
    gen_pid = f.pid;
    assert_true(ready);
    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = f.ep;
    p.timeout_ms = 300;
    p.retry_ms = 20;
    specd_ipc_client *c = NULL;
    assert_int_equal(specd_ipc_client_create(&p, SPECD_IPC_ROLE_DRAFTER, &model, &c, &err),
                     SPECD_OK);
    specd_ipc_seq_params sq = {.seq_id = GSEQ,
                               .prompt = gprompt,
                               .n_prompt = GPROMPT,
                               .sampling = {.temperature = 0.8f, .top_p = 1.0f},
                               .seed = GSEED,
                               .policy = "ngram",
                               .max_draft = DK};
    assert_int_equal(specd_ipc_client_open_seq(c, &sq, &err), SPECD_OK);
    specd_accept *acc = engine_k(DK);
    memcpy(hist, gprompt, sizeof gprompt);
    size_t n = GPROMPT;
    uint32_t pending[DK + 1];
    size_t n_pending = 0;
    pthread_t th;
    killer k = {.pid = f.pid, .delay_us = 300};
    int steps = 0, drafted_steps = 0, plain_steps = 0, accepted = 0, after_restart = 0;
    while (n < DN) {
        if (steps == DKILL) pthread_create(&th, NULL, kill_later, &k);
        if (steps == (DKILL + DRESTART) / 2) pthread_join(th, NULL);
        if (steps == DRESTART) {
            f.pid = daemon_start(drafter_bin, f.ep, NULL);
            gen_pid = f.pid;
            wait_reconnected(c);
        }
        uint32_t draft[DK];
        size_t nd = 0;
        specd_status st = specd_ipc_client_propose(c, GSEQ, (uint64_t)steps, pending, n_pending,
                                                   draft, DK, &nd, &err);
        if (st != SPECD_OK) {
            if (st != SPECD_E_PEER && st != SPECD_E_TIMEOUT)
                fail_msg("step %d: unexpected %s: %s", steps, specd_status_name(st), err.message);
            nd = 0; /* no drafter: plain decoding */
        }
        if (nd == 0) {
            hist[n] = plain_token(smp, rows, hist[n - 1], (uint32_t)n);
            pending[0] = hist[n];
            n_pending = 1;
            n++;
            plain_steps++;
        } else {
            int32_t d[DK], tok[DK + 1];
            for (size_t i = 0; i < nd; i++)
                d[i] = (int32_t)draft[i];
            for (size_t r = 0; r <= nd; r++)
                cyc_row(rows + r * TEST_VOCAB, r == 0 ? hist[n - 1] : draft[r - 1],
                        (uint32_t)(n + r));
            specd_chain_input in = {
                .k = (int32_t)nd,
                .draft = d,
                .target_logits = rows,
                .n_vocab = TEST_VOCAB,
                .key = {.seed = GSEED, .sequence = GSEQ, .position = (uint32_t)n}};
            specd_chain_result res = {.tokens = tok};
            assert_int_equal(specd_accept_chain(acc, &in, &res, &err), SPECD_OK);
            for (int32_t i = 0; i < res.n_emitted; i++)
                hist[n + (size_t)i] = (uint32_t)tok[i];
            memcpy(pending, hist + n, (size_t)res.n_emitted * sizeof *pending);
            n_pending = (size_t)res.n_emitted;
            n += (size_t)res.n_emitted;
            drafted_steps++;
            accepted += res.n_accepted;
            if (steps >= DRESTART) after_restart++;
        }
        steps++;
    }
    /* Identical to plain decoding, with or without the drafter, fault or not. */
    assert_memory_equal(hist, expect, DN * sizeof *hist);
    /* The last step's tokens, then the restarted drafter holds exactly the host's history. On a
     * loaded machine the last exchange may have timed out a live daemon: the commit is then
     * kept in the client's history and reaches the daemon with the replay of the next connect
     * (retry_ms after the last attempt), so the check retries while the daemon is unreachable. */
    specd_status cst = specd_ipc_client_commit(c, GSEQ, pending, n_pending, &err);
    if (cst != SPECD_OK && cst != SPECD_E_PEER && cst != SPECD_E_TIMEOUT)
        fail_msg("commit: %s", err.message);
    uint64_t len, hash;
    specd_status ist = SPECD_E_PEER;
    for (uint64_t end = daemon_now_ms() + DAEMON_WAIT_MS;
         ist == SPECD_E_PEER || ist == SPECD_E_TIMEOUT;) {
        ist = specd_ipc_client_seq_info(c, GSEQ, &len, &hash, &err);
        if (daemon_now_ms() >= end) break;
        if (ist == SPECD_E_PEER || ist == SPECD_E_TIMEOUT) sleep_ms(50);
    }
    if (ist != SPECD_OK) fail_msg("seq_info: %s", err.message);
    assert_int_equal(len, n);
    assert_int_equal(hash, specd_ipc_tokens_hash(hist, n));
    /* At least one replay (a loaded machine may time out a live daemon too, which is safe). */
    assert_true(specd_ipc_client_sessions(c) >= 2);
    if (!(plain_steps > 0 && accepted > 0 && after_restart > 0))
        fail_msg("plain steps %d, accepted %d, drafted steps after the restart %d", plain_steps,
                 accepted, after_restart);
    printf("drafter: %zu tokens in %d steps (%d with drafts, %d accepted; %d plain while it was "
           "gone or had nothing); identical to plain decoding\n",
           n, steps, drafted_steps, accepted, plain_steps);
    specd_accept_destroy(acc);
    specd_sampler_destroy(smp);
    specd_ipc_client_destroy(c);
    gen_pid = 0;
    assert_int_equal(daemon_fixture_stop(&f), 0);
    free(rows);
    free(expect);
    free(hist);
}

int main(int argc, char **argv) {
    if (!daemon_test_binaries(argc, argv, &drafter_bin, &verifier_bin)) return 2;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drafter_killed),
        cmocka_unit_test_teardown(test_drafter_killed_generation, gen_teardown),
        cmocka_unit_test(test_verifier_killed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
