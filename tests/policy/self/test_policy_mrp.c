/* The mrp policy (MRP-causal, paper 002) on the real model.
 *
 * Identity: under greedy and coupled sampling, mrp in spec mode emits exactly what plain
 * decoding emits, for a random head written here (the identity holds for any head: the chain
 * rule decides every token) and for the shipped trained head (artifacts/mrp/, or SPECD_MRP_HEAD),
 * which must also have its drafts accepted. direct mode emits drafts unchecked: its steps say
 * lossy and it emits more than one token per forward.
 * Rejection sampling: with k = 1, the token verified after a fixed context follows the target's
 * distribution (G-test over the vocabulary) across thousands of seeds, while drafts drawn from
 * the head's q are accepted: the q the policy hands to the engine is the one it drew from.
 * The batch loop (serve) runs it too, with plain decoding's greedy output. Bad head files are
 * refused with a message naming the file and what is wrong.
 * Draft vocabulary (mrp.draft_vocab, vocab=N): spec mode stays identical to plain decoding, and
 * every draft (seen unchecked in direct mode) is one of the first N ids, which the whole
 * vocabulary's drafts are not. remask: tau > 1 reveals nothing (plain decoding's tokens, not
 * lossy), tau = 0 everything (direct's tokens and stats, lossy), tau in between reveals a
 * prefix of what direct would. */
#include "test_main.h"

#include "accept/gof.h"
#include "golden_prompts.h"
#include "mrp_head_writer.h"
#include "specd/spec_loop.h"
#include "specd/spec_runtime.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* two prompts per check (it was three): each identity, lossiness and vocabulary check holds or
 * fails per run, and two show it; the statistics draw their contexts from N_GOLDEN prompts */
enum { N_GEN = 20, MAX_PROMPT = 256, N_PROMPTS = 2, N_GOLDEN = 10 };

static int32_t prompts[N_GOLDEN][MAX_PROMPT];
static int64_t n_prompts[N_GOLDEN];
static specd_model *model;
static specd_context *ctx;
static char dir[64], random_head[128], shipped_head[1024], vocab_head[128], q8_head[128];

enum { N_DVOCAB = 2048, N_DV_SMALL = 64 };
static int32_t dvocab[N_DVOCAB];

static specd_spec *make_spec(void) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = specd_model_get_info(model)->n_vocab;
    sp.n_embd = specd_model_get_info(model)->n_embd;
    sp.max_draft = 4;
    sp.target = model;
    specd_spec *spec;
    specd_error err;
    if (specd_spec_create(&sp, &spec, &err) != SPECD_OK) fail_msg("spec: %s", err.message);
    return spec;
}

/* A run with every step the policy's is a function of its arguments; one asked for again
 * (test_min_conf's min_conf=0 runs are test_identity_shipped_head's, test_direct_is_lossy's is
 * test_remask's first direct run) is answered with the first one's tokens and stats. Runs under
 * the guard are not kept: its decisions follow the clock. */
typedef struct memo_run {
    int p, adaptive;
    char policy[16], opts[1200];
    float temperature;
    int32_t n_gen;
    int32_t out[N_GEN];
    specd_seq_stats stats;
} memo_run;
enum { N_MEMO = 96 };
static memo_run memo[N_MEMO];
static int n_memo;

static memo_run *memo_find(int p, const char *policy, const char *opts, float temperature,
                           int adaptive, int32_t n_gen) {
    for (int i = 0; i < n_memo; i++)
        if (memo[i].p == p && memo[i].adaptive == adaptive && memo[i].n_gen == n_gen &&
            memo[i].temperature == temperature && !strcmp(memo[i].policy, policy) &&
            !strcmp(memo[i].opts, opts ? opts : ""))
            return &memo[i];
    return NULL;
}

/* n tokens of prompt p; with the adaptive guard (adaptive), or with every step the policy's, as
 * the policy's own checks below expect */
static void generate_n(int p, const char *policy, const char *opts, float temperature,
                       int adaptive, int32_t n_gen, int32_t *out, specd_seq_stats *stats) {
    const memo_run *seen = memo_find(p, policy, opts, temperature, adaptive, n_gen);
    if (seen) {
        memcpy(out, seen->out, (size_t)n_gen * sizeof(int32_t));
        *stats = seen->stats;
        return;
    }
    specd_spec *spec = make_spec();
    specd_error err;
    specd_seq_params params = specd_seq_default_params();
    params.policy = policy;
    params.policy_options = opts;
    params.sampling.temperature = temperature;
    params.seed = 99;
    params.max_tokens = n_gen;
    params.adaptive = adaptive;
    if (specd_spec_seq_open(spec, 0, prompts[p], n_prompts[p], &params, &err) != SPECD_OK)
        fail_msg("open %s %s: %s", policy, opts ? opts : "", err.message);
    specd_run_stats rs;
    if (specd_spec_run(spec, 0, ctx, 0, NULL, NULL, &rs, &err) != SPECD_OK)
        fail_msg("run %s: %s", policy, err.message);
    int64_t n;
    const int32_t *toks = specd_spec_seq_output(spec, 0, &n);
    assert_int_equal(n, n_gen);
    memcpy(out, toks, (size_t)n_gen * sizeof(int32_t));
    assert_int_equal(specd_spec_seq_stats(spec, 0, stats, &err), SPECD_OK);
    assert_int_equal(stats->n_steps, rs.n_steps);
    specd_spec_destroy(spec);
    if (!adaptive && n_gen <= N_GEN && n_memo < N_MEMO && strlen(policy) < sizeof memo->policy &&
        (!opts || strlen(opts) < sizeof memo->opts)) {
        memo_run *m = &memo[n_memo++];
        *m = (memo_run){.p = p, .adaptive = adaptive, .temperature = temperature, .n_gen = n_gen,
                        .stats = *stats};
        snprintf(m->policy, sizeof m->policy, "%s", policy);
        snprintf(m->opts, sizeof m->opts, "%s", opts ? opts : "");
        memcpy(m->out, out, (size_t)n_gen * sizeof(int32_t));
    }
}

static void generate(int p, const char *policy, const char *opts, float temperature,
                     int32_t *out, specd_seq_stats *stats) {
    generate_n(p, policy, opts, temperature, 0, N_GEN, out, stats);
}

/* plain decoding of prompt p at temperature 0 or 0.8, decoded once: every identity check below
 * compares against the same reference */
static const int32_t *plain_reference(int p, float temperature) {
    static int32_t plain[2][N_PROMPTS][N_GEN];
    static int done[2][N_PROMPTS];
    int t = temperature > 0.0f;
    assert_true(temperature == (t ? 0.8f : 0.0f));
    if (!done[t][p]) {
        specd_seq_stats st;
        generate(p, "none", NULL, temperature, plain[t][p], &st);
        done[t][p] = 1;
    }
    return plain[t][p];
}

/* spec mode against plain decoding on N_PROMPTS prompts; returns the proposals accepted */
static int64_t check_identity(const char *head, const char *extra, float temperature) {
    char opts[1200];
    snprintf(opts, sizeof opts, "head=%s,k=3,min_conf=0%s", head, extra);
    int64_t accepted = 0;
    for (int p = 0; p < N_PROMPTS; p++) {
        int32_t mrp[N_GEN];
        specd_seq_stats s_mrp;
        const int32_t *plain = plain_reference(p, temperature);
        generate(p, "mrp", opts, temperature, mrp, &s_mrp);
        for (int i = 0; i < N_GEN; i++)
            if (plain[i] != mrp[i])
                fail_msg("T=%.2f prompt %d head %s: mrp differs at token %d (%d vs %d)",
                         temperature, p, head, i, mrp[i], plain[i]);
        /* every step after the first verified k proposals, and nothing was called lossy */
        assert_true(s_mrp.n_draft_tokens >= 3 * (s_mrp.n_steps - 1) - 3);
        assert_true(s_mrp.n_steps + s_mrp.n_accepted >= N_GEN);
        assert_int_equal(s_mrp.lossy, 0);
        accepted += s_mrp.n_accepted;
    }
    return accepted;
}

static void test_identity_random_head(void **s) {
    (void)s;
    check_identity(random_head, "", 0.0f);
    check_identity(random_head, "", 0.8f);
    /* every C_k over the whole vocabulary; candidates from the target's row */
    check_identity(random_head, ",cand=0", 0.8f);
    check_identity(random_head, ",cand_from=target", 0.0f);
    /* a Q8_0 eh_proj (export --dtype q8_0) is read as stored */
    check_identity(q8_head, "", 0.0f);
}

/* Under the adaptive guard: a head whose drafts are (almost) never taken is switched off, its
 * plain steps' hidden rows wait for the head and are committed in batches or when a probe runs
 * it again (SPECD_POLICY_HIDDEN_CATCH_UP), and the output stays plain decoding's whatever the
 * guard decides and whenever (its decisions follow the clock). */
static void test_guard_identity(void **s) {
    (void)s;
    /* the guard's first step is plain, so the probe's first layout commits the prompt's rows
     * and that step's together; with catch_up=16 only the newest 16 wait, and the head starts
     * again from them */
    enum { N_LONG = 128 };
    const float temps[] = {0.0f, 0.8f};
    for (int p = 0; p < 2; p++) { /* prompt p at temps[p] */
        char opts[1200];
        snprintf(opts, sizeof opts, "head=%s,k=3,min_conf=0%s", random_head,
                 p == 1 ? ",catch_up=16" : "");
        int32_t plain[N_LONG], mrp[N_LONG];
        specd_seq_stats s_plain, s_mrp;
        generate_n(p, "none", NULL, temps[p], 0, N_LONG, plain, &s_plain);
        generate_n(p, "mrp", opts, temps[p], 1, N_LONG, mrp, &s_mrp);
        for (int i = 0; i < N_LONG; i++)
            if (plain[i] != mrp[i])
                fail_msg("guarded T=%.2f prompt %d: mrp differs at token %d (%d vs %d)",
                         temps[p], p, i, mrp[i], plain[i]);
        fprintf(stderr, "guarded T=%.1f prompt %d: %lld steps, %lld plain by the guard, %lld "
                        "back-offs, %lld drafts accepted\n", temps[p], p,
                (long long)s_mrp.n_steps, (long long)s_mrp.n_guard_plain,
                (long long)s_mrp.n_backoffs, (long long)s_mrp.n_accepted);
        /* one token per step never pays: the guard turned the head off */
        assert_true(s_mrp.n_backoffs >= 1);
        assert_true(s_mrp.n_guard_plain > N_LONG / 2);
        assert_int_equal(s_mrp.lossy, 0);
    }
}

static int have_shipped(void) {
    struct stat st;
    return stat(shipped_head, &st) == 0;
}

static void test_identity_shipped_head(void **s) {
    (void)s;
    if (!have_shipped()) {
        fprintf(stderr, "SKIP: no trained MRP head at %s (set SPECD_MRP_HEAD)\n", shipped_head);
        skip();
    }
    int64_t greedy = check_identity(shipped_head, "", 0.0f);
    int64_t coupled = check_identity(shipped_head, "", 0.8f);
    int64_t whole = check_identity(shipped_head, ",vocab=0", 0.0f);
    fprintf(stderr, "shipped head: %lld greedy and %lld coupled proposals accepted (whole "
                    "vocabulary: %lld greedy)\n",
            (long long)greedy, (long long)coupled, (long long)whole);
    /* a trained head drafts tokens the target takes */
    assert_true(greedy > 0);
    assert_true(whole > 0);
}

/* spec with min_conf: fewer proposals (the head's doubtful drafts are not laid out), the same
 * tokens as plain decoding under greedy and coupled, never lossy */
static void test_min_conf(void **s) {
    (void)s;
    if (!have_shipped()) {
        fprintf(stderr, "SKIP: no trained MRP head at %s (set SPECD_MRP_HEAD)\n", shipped_head);
        skip();
    }
    const float temps[] = {0.0f, 0.8f};
    for (int ti = 0; ti < 2; ti++) {
        int64_t drafted_all = 0, drafted_gated = 0;
        for (int p = 0; p < N_PROMPTS; p++) {
            int32_t all[N_GEN], gated[N_GEN];
            specd_seq_stats s_all, s_gated;
            char opts[1200];
            const int32_t *plain = plain_reference(p, temps[ti]);
            snprintf(opts, sizeof opts, "head=%s,k=3,min_conf=0", shipped_head);
            generate(p, "mrp", opts, temps[ti], all, &s_all);
            snprintf(opts, sizeof opts, "head=%s,k=3,min_conf=0.4", shipped_head);
            generate(p, "mrp", opts, temps[ti], gated, &s_gated);
            for (int i = 0; i < N_GEN; i++)
                if (plain[i] != gated[i])
                    fail_msg("T=%.1f prompt %d: min_conf=0.4 differs from plain at %d", temps[ti],
                             p, i);
            assert_int_equal(s_gated.lossy, 0);
            drafted_all += s_all.n_draft_tokens;
            drafted_gated += s_gated.n_draft_tokens;
        }
        fprintf(stderr, "T=%.1f: %lld proposals at min_conf=0, %lld at min_conf=0.4\n", temps[ti],
                (long long)drafted_all, (long long)drafted_gated);
        assert_true(drafted_gated < drafted_all);
    }
}

/* direct: drafts emitted unchecked; the steps say lossy and carry k + 1 tokens */
static void test_direct_is_lossy(void **s) {
    (void)s;
    char opts[1200];
    snprintf(opts, sizeof opts, "head=%s,k=3,mode=direct", random_head);
    int32_t out[N_GEN];
    specd_seq_stats st;
    generate(0, "mrp", opts, 0.0f, out, &st);
    assert_int_equal(st.lossy, 1);
    /* the first step only proposes; every later one emits its 3 drafts and the target's token */
    assert_true(st.n_steps <= 1 + (N_GEN - 1 + 3) / 4);
    assert_true(st.n_draft_tokens > 0);
}

/* direct mode at T = 0 on prompt p: tokens and stats; the step structure is checked (the first
 * step only proposes, each later one emits 3 drafts and the target's token) */
static void run_direct(int p, const char *opts, int32_t *out, specd_seq_stats *st) {
    generate(p, "mrp", opts, 0.0f, out, st);
    assert_int_equal(st->n_steps, 1 + (N_GEN - 1 + 3) / 4);
}

static int is_draft_index(int i) { return i >= 1 && (i - 1) % 4 != 3; }

static void test_draft_vocab(void **s) {
    (void)s;
    char opts[1200];
    /* spec mode over the first N_DVOCAB (default: all of a list shorter than 8192) or fewer */
    check_identity(vocab_head, "", 0.0f);
    check_identity(vocab_head, ",vocab=300", 0.8f);
    check_identity(vocab_head, ",vocab=0", 0.0f);
    for (int p = 0; p < N_PROMPTS; p++) {
        int32_t out[N_GEN], whole[N_GEN];
        specd_seq_stats st;
        snprintf(opts, sizeof opts, "head=%s,k=3,mode=direct,vocab=%d", vocab_head, N_DV_SMALL);
        run_direct(p, opts, out, &st);
        snprintf(opts, sizeof opts, "head=%s,k=3,mode=direct,vocab=0", vocab_head);
        run_direct(p, opts, whole, &st);
        int outside = 0;
        for (int i = 0; i < N_GEN; i++) {
            if (!is_draft_index(i)) continue;
            int in_small = 0, in_small_whole = 0;
            for (int j = 0; j < N_DV_SMALL; j++) {
                in_small |= out[i] == dvocab[j];
                in_small_whole |= whole[i] == dvocab[j];
            }
            if (!in_small)
                fail_msg("prompt %d: draft %d (token %d) is outside vocab=%d", p, i, out[i],
                         N_DV_SMALL);
            outside += !in_small_whole;
        }
        /* the control: over the whole vocabulary the head drafts other tokens */
        assert_true(outside > 0);
    }
}

/* remask against plain decoding (tau > 1) and direct (tau = 0) */
static void test_remask(void **s) {
    (void)s;
    char opts[1200];
    for (int p = 0; p < N_PROMPTS; p++) {
        for (int t = 0; t < 2; t++) {
            const float T = t ? 0.8f : 0.0f;
            int32_t rm[N_GEN];
            specd_seq_stats s_rm;
            const int32_t *plain = plain_reference(p, T);
            snprintf(opts, sizeof opts, "head=%s,k=3,mode=remask,tau=1.5", random_head);
            generate(p, "mrp", opts, T, rm, &s_rm);
            for (int i = 0; i < N_GEN; i++)
                if (plain[i] != rm[i])
                    fail_msg("T=%.1f prompt %d: remask tau=1.5 differs from plain at %d", T, p, i);
            assert_int_equal(s_rm.n_draft_tokens, 0);
            assert_int_equal(s_rm.lossy, 0);
            assert_int_equal(s_rm.n_steps, N_GEN);
        }
        int32_t direct[N_GEN], rm[N_GEN], mid[N_GEN];
        specd_seq_stats s_direct, s_rm, s_mid;
        snprintf(opts, sizeof opts, "head=%s,k=3,mode=direct", random_head);
        run_direct(p, opts, direct, &s_direct);
        snprintf(opts, sizeof opts, "head=%s,k=3,mode=remask,tau=0", random_head);
        generate(p, "mrp", opts, 0.0f, rm, &s_rm);
        for (int i = 0; i < N_GEN; i++)
            if (direct[i] != rm[i])
                fail_msg("prompt %d: remask tau=0 differs from direct at %d", p, i);
        assert_int_equal(s_rm.lossy, 1);
        assert_int_equal(s_rm.n_steps, s_direct.n_steps);
        assert_int_equal(s_rm.n_draft_tokens, s_direct.n_draft_tokens);
        assert_int_equal(s_rm.n_accepted, s_direct.n_accepted);
        /* in between: fewer drafts revealed than direct, lossy exactly when one was */
        snprintf(opts, sizeof opts, "head=%s,k=3,mode=remask,tau=0.5", random_head);
        generate(p, "mrp", opts, 0.0f, mid, &s_mid);
        assert_true(s_mid.n_draft_tokens <= s_direct.n_draft_tokens);
        assert_int_equal(s_mid.lossy, s_mid.n_draft_tokens > 0);
        /* each step emits its revealed drafts and the target's token (the last one cut short) */
        assert_true(s_mid.n_steps + s_mid.n_draft_tokens >= N_GEN);
        assert_true(s_mid.n_steps + s_mid.n_draft_tokens < N_GEN + 4);
    }
}

/* The batch loop (serve's path) runs mrp with the other requests in one forward: steps get
 * their hidden states from the shared extend; it does not pass prompt hidden states, so the head
 * starts at each request's first step. Greedy output is plain decoding's. */
typedef struct loop_out {
    int32_t tokens[N_PROMPTS][N_GEN];
    int32_t n[N_PROMPTS];
    int done[N_PROMPTS];
    int64_t accepted;
    specd_status status[N_PROMPTS];
} loop_out;

static loop_out *loop_sink;
static int64_t loop_ids[N_PROMPTS];

static void on_loop_event(const specd_loop_event *e, void *user) {
    int p = (int)(intptr_t)user;
    for (int32_t i = 0; i < e->n_tokens && loop_sink->n[p] < N_GEN; i++)
        loop_sink->tokens[p][loop_sink->n[p]++] = e->tokens[i];
    if (e->done) {
        loop_sink->done[p] = 1;
        loop_sink->status[p] = e->status;
        if (e->status != SPECD_OK) fprintf(stderr, "request %d: %s\n", p, e->message);
        if (e->stats) loop_sink->accepted += e->stats->n_accepted;
    }
}

static void test_batch_loop(void **s) {
    (void)s;
    specd_loop_params lp = specd_loop_default_params();
    lp.max_seqs = N_PROMPTS;
    lp.n_ctx = 256;
    lp.n_batch = 64;
    lp.max_draft = 4;
    lp.n_threads = 2;
    specd_loop *loop;
    specd_error err;
    if (specd_loop_create(model, &lp, &loop, &err) != SPECD_OK) fail_msg("loop: %s", err.message);
    static loop_out out;
    memset(&out, 0, sizeof out);
    loop_sink = &out;
    char opts[1200];
    snprintf(opts, sizeof opts, "head=%s,k=3,min_conf=0", random_head);
    for (int p = 0; p < N_PROMPTS; p++) {
        specd_seq_params params = specd_seq_default_params();
        params.policy = "mrp";
        params.policy_options = opts;
        params.sampling.temperature = 0.0f;
        params.stream_key = 100 + (uint64_t)p;
        params.max_tokens = N_GEN;
        if (specd_loop_submit(loop, prompts[p], n_prompts[p], &params, on_loop_event,
                              (void *)(intptr_t)p, &loop_ids[p], &err) != SPECD_OK)
            fail_msg("submit: %s", err.message);
    }
    for (int guard = 0; guard < 10 * N_GEN && specd_loop_n_running(loop) + specd_loop_n_queued(loop) > 0;
         guard++)
        assert_int_equal(specd_loop_step(loop, NULL, &err), SPECD_OK);
    specd_loop_destroy(loop);
    for (int p = 0; p < N_PROMPTS; p++) {
        assert_true(out.done[p]);
        assert_int_equal(out.status[p], SPECD_OK);
        assert_int_equal(out.n[p], N_GEN);
        const int32_t *plain = plain_reference(p, 0.0f);
        for (int i = 0; i < N_GEN; i++)
            if (plain[i] != out.tokens[p][i])
                fail_msg("loop prompt %d: mrp differs at token %d (%d vs %d)", p, i,
                         out.tokens[p][i], plain[i]);
    }
}

static void expect_refused(const char *opts, specd_status status, const char *needle) {
    specd_spec *spec = make_spec();
    specd_error err;
    specd_error_clear(&err);
    specd_seq_params params = specd_seq_default_params();
    params.policy = "mrp";
    params.policy_options = opts;
    specd_status st = specd_spec_seq_open(spec, 0, prompts[0], n_prompts[0], &params, &err);
    if (st != status || !strstr(err.message, needle))
        fail_msg("options %s: got %s '%s', expected %s containing '%s'", opts,
                 specd_status_name(st), err.message, specd_status_name(status), needle);
    specd_spec_destroy(spec);
}

static void write_variant(const char *path, const char *omit, int32_t n_embd, int32_t n_vocab,
                          int no_version) {
    mrp_head_spec hs = {.info = *specd_model_get_info(model), .n_vocab_key = n_vocab,
                        .omit = omit, .no_version = no_version, .noise = 0.02f, .seed = 5};
    hs.info.n_layer = 1;
    if (n_embd) {
        hs.info.n_embd = n_embd;
        hs.info.n_head = n_embd / hs.info.head_dim;
        hs.info.n_head_kv = 1;
    }
    assert_int_equal(mrp_write_head(path, &hs), 0);
}

static void test_bad_heads(void **s) {
    (void)s;
    int32_t V = specd_model_get_info(model)->n_vocab;
    char path[160], opts[256];
    struct {
        const char *omit;
        int32_t n_embd, n_vocab;
        int no_version;
        specd_status status;
        const char *needle;
    } cases[] = {
        {"mrp.eh_proj.weight", 0, V, 0, SPECD_E_FORMAT, "mrp.eh_proj.weight is missing"},
        {"mrp.hnorm.weight", 0, V, 0, SPECD_E_FORMAT, "mrp.hnorm.weight is missing"},
        {"blk.0.attn_q.weight", 0, V, 0, SPECD_E_FORMAT, "blk.0.attn_q.weight is missing"},
        {NULL, 512, V, 0, SPECD_E_MISMATCH, "embedding width 512"},
        {NULL, 0, 32000, 0, SPECD_E_MISMATCH, "vocabulary of 32000"},
        {NULL, 0, V, 1, SPECD_E_FORMAT, "no mrp.version"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/bad%zu.gguf", dir, i);
        write_variant(path, cases[i].omit, cases[i].n_embd, cases[i].n_vocab,
                      cases[i].no_version);
        snprintf(opts, sizeof opts, "head=%s", path);
        expect_refused(opts, cases[i].status, cases[i].needle);
        expect_refused(opts, cases[i].status, path); /* the message names the file */
        unlink(path);
    }
    /* a corrupt (truncated) file */
    snprintf(path, sizeof path, "%s/cut.gguf", dir);
    write_variant(path, NULL, 0, V, 0);
    assert_int_equal(truncate(path, 100000), 0);
    snprintf(opts, sizeof opts, "head=%s", path);
    specd_spec *spec = make_spec();
    specd_error err;
    specd_seq_params params = specd_seq_default_params();
    params.policy = "mrp";
    params.policy_options = opts;
    assert_int_not_equal(specd_spec_seq_open(spec, 0, prompts[0], n_prompts[0], &params, &err),
                         SPECD_OK);
    assert_non_null(strstr(err.message, path));
    specd_spec_destroy(spec);
    unlink(path);
    expect_refused("head=/nonexistent/head.gguf", SPECD_E_IO, "/nonexistent/head.gguf");
    expect_refused("k=2", SPECD_E_INVALID_ARG, "needs head=PATH");
    snprintf(opts, sizeof opts, "head=%s,mode=fast", random_head);
    expect_refused(opts, SPECD_E_INVALID_ARG, "mode=fast");
    snprintf(opts, sizeof opts, "head=%s,k=9", random_head);
    expect_refused(opts, SPECD_E_INVALID_ARG, "k=9");
    snprintf(opts, sizeof opts, "head=%s,cand_from=nowhere", random_head);
    expect_refused(opts, SPECD_E_INVALID_ARG, "cand_from=nowhere");
    snprintf(opts, sizeof opts, "head=%s,mode=remask,tau=high", random_head);
    expect_refused(opts, SPECD_E_INVALID_ARG, "tau=high");
    snprintf(opts, sizeof opts, "head=%s,min_conf=1.5", random_head);
    expect_refused(opts, SPECD_E_INVALID_ARG, "min_conf=1.5");
    /* draft vocabularies: asked of a head without one, longer than the list, a bad list */
    snprintf(opts, sizeof opts, "head=%s,vocab=100", random_head);
    expect_refused(opts, SPECD_E_INVALID_ARG, "no mrp.draft_vocab");
    snprintf(opts, sizeof opts, "head=%s,vocab=%d", vocab_head, N_DVOCAB + 1);
    expect_refused(opts, SPECD_E_INVALID_ARG, "mrp.draft_vocab has 2048 tokens");
    int32_t bad_list[3][4] = {{5, 9, 5, 7}, {1, 2, -3, 4}, {0, 1, 2, V}};
    const char *why[3] = {"mrp.draft_vocab[2] = 5 is a repeat", "= -3 is not a token id",
                          "is not a token id"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/badvocab%d.gguf", dir, i);
        mrp_head_spec hs = {.info = *specd_model_get_info(model), .n_vocab_key = V,
                            .noise = 0.02f, .seed = 5, .draft_vocab = bad_list[i],
                            .n_draft_vocab = 4};
        hs.info.n_layer = 1;
        assert_int_equal(mrp_write_head(path, &hs), 0);
        snprintf(opts, sizeof opts, "head=%s,vocab=0", path); /* checked even when unused */
        expect_refused(opts, SPECD_E_FORMAT, why[i]);
        expect_refused(opts, SPECD_E_FORMAT, path);
        unlink(path);
    }
}

/* The target's rows after ctx[0..n): the last token's logits into l0, then X's row (X
 * appended) into l1; hidden states of both into h (2 rows). */
static void target_rows(const int32_t *toks, int64_t n, int32_t X, float *l0, float *h) {
    specd_error err;
    assert_int_equal(specd_context_kv_truncate(ctx, 0, 0, &err), SPECD_OK);
    if (n > 1) {
        specd_seq_batch b = {.seq = 0, .n_tokens = (int32_t)n - 1, .tokens = toks};
        assert_int_equal(specd_context_extend(ctx, &b, 1, NULL, &err), SPECD_OK);
    }
    int32_t step[2] = {toks[n - 1], X};
    specd_seq_batch b2 = {.seq = 0, .n_tokens = 2, .tokens = step};
    specd_extend_out o2 = {.n_rows = 2, .logits = l0, .hidden = h};
    assert_int_equal(specd_context_extend(ctx, &b2, 1, &o2, &err), SPECD_OK);
    assert_int_equal(specd_context_kv_truncate(ctx, 0, 0, &err), SPECD_OK);
}

enum { CAND = 64 };

/* q of a head with C = 0: softmax(row / T) over the CAND best tokens of row (ties: lower id) */
static void null_head_q(const float *row, int32_t V, float T, double *q) {
    int32_t top[CAND];
    int n = 0;
    for (int32_t x = 0; x < V; x++) {
        if (n == CAND && !(row[x] > row[top[CAND - 1]])) continue;
        int at = n < CAND ? n++ : CAND - 1;
        while (at > 0 && row[x] > row[top[at - 1]]) {
            top[at] = top[at - 1];
            at--;
        }
        top[at] = x;
    }
    double sum = 0.0;
    memset(q, 0, (size_t)V * sizeof(double));
    for (int i = 0; i < CAND; i++) sum += exp((double)(row[top[i]] / T - row[top[0]] / T));
    for (int i = 0; i < CAND; i++) q[top[i]] = exp((double)(row[top[i]] / T - row[top[0]] / T)) / sum;
}

/* Rejection sampling (k = 1) over thousands of seeds, on a head whose residual is 0 (so q is
 * known here: softmax over the top CAND of the row before): in a fixed context the drafts follow
 * q and the verified token follows the target (G-tests), and drafts are accepted. The context is
 * the candidate where drafts and the target overlap most. */
static void test_rejection_statistics(void **s) {
    (void)s;
    const specd_model_info *info = specd_model_get_info(model);
    const int32_t V = info->n_vocab, E = info->n_embd;
    const float T = 1.0f;
    specd_error err;
    specd_sampling_params sp = specd_sampling_default_params();
    sp.temperature = T;
    specd_sampler *smp;
    assert_int_equal(specd_sampler_create(&sp, V, &smp, &err), SPECD_OK);
    float *l0 = malloc((size_t)V * 3 * sizeof(float)), *l1 = l0 + V, *pf = l0 + 2 * (size_t)V;
    float *h = malloc((size_t)E * 3 * sizeof(float));
    double *p1 = malloc((size_t)V * sizeof(double)), *q = malloc((size_t)V * sizeof(double));
    uint64_t *counts = calloc((size_t)V, sizeof(uint64_t)), *dcounts = calloc((size_t)V, 8);
    assert_true(l0 && h && p1 && q && counts && dcounts);
    /* candidates: the golden prompts and a repetition (whose next two tokens agree) */
    int32_t cands[N_GOLDEN + 1][MAX_PROMPT];
    int64_t n_cands[N_GOLDEN + 1];
    for (int p = 0; p < N_GOLDEN; p++) {
        memcpy(cands[p], prompts[p], (size_t)n_prompts[p] * sizeof(int32_t));
        n_cands[p] = n_prompts[p];
    }
    for (int i = 0; i < 16; i++) cands[N_GOLDEN][i] = prompts[0][i % 2 ? 1 : 2];
    n_cands[N_GOLDEN] = 16;
    int best = -1;
    double best_score = 0.0, best_px = 0.0, best_overlap = 0.0;
    int32_t X = 0, bestX = 0;
    for (int c = 0; c <= N_GOLDEN; c++) {
        target_rows(cands[c], n_cands[c], 0, l0, h);
        assert_int_equal(specd_sampler_probs(smp, l0, V, pf, &err), SPECD_OK);
        X = 0;
        for (int32_t x = 1; x < V; x++) X = pf[x] > pf[X] ? x : X;
        double px = pf[X];
        target_rows(cands[c], n_cands[c], X, l0, h);
        assert_int_equal(specd_sampler_probs(smp, l1, V, pf, &err), SPECD_OK);
        null_head_q(l0, V, T, q);
        double overlap = 0.0;
        for (int32_t x = 0; x < V; x++) overlap += q[x] < pf[x] ? q[x] : pf[x];
        if (px * overlap > best_score) {
            best_score = px * overlap;
            best = c;
            bestX = X;
            best_px = px;
            best_overlap = overlap;
        }
    }
    assert_true(best >= 0);
    X = bestX;
    const int32_t *P = cands[best];
    const int64_t n = n_cands[best];
    target_rows(P, n, X, l0, h);
    assert_int_equal(specd_sampler_probs(smp, l1, V, pf, &err), SPECD_OK);
    for (int32_t x = 0; x < V; x++) p1[x] = pf[x];
    null_head_q(l0, V, T, q);
    /* step 2's rows: X's row, then the draft's, for which X's stands in: the first token is
     * decided on row 0 and q alone (row 1 gives only the bonus and the next drafts) */
    memcpy(pf, l1, (size_t)V * sizeof(float));
    memcpy(h + 2 * (size_t)E, h + E, (size_t)E * sizeof(float));

    char head[160], opts[256];
    snprintf(head, sizeof head, "%s/null.gguf", dir);
    mrp_head_spec hs = {.info = *info, .n_vocab_key = V, .noise = 0.02f, .seed = 3,
                        .zero_output = 1};
    hs.info.n_layer = 1;
    assert_int_equal(mrp_write_head(head, &hs), 0);
    snprintf(opts, sizeof opts, "head=%s,k=1,ctx=64,cand=%d,min_conf=0", head, CAND);
    const specd_policy_ops *ops = specd_policy_find("mrp");
    assert_non_null(ops);
    specd_policy_env env = {.n_vocab = V, .max_draft = 1, .target = model, .sampling = sp,
                            .rule = SPECD_ACCEPT_REJECTION, .seq_key = 3};
    void *shared = NULL;
    assert_int_equal(ops->shared_create(&env, opts, &shared, &err), SPECD_OK);
    env.shared = shared;
    int32_t hist[MAX_PROMPT + 2];
    memcpy(hist, P, (size_t)n * sizeof(int32_t));
    hist[n] = X;
    uint64_t total = 0, accepted = 0;
    const int trials = 4000;
    for (int t = 0; t < trials; t++) {
        env.seed = 1000 + (uint64_t)t;
        void *st = NULL;
        if (ops->create(&env, opts, &st, &err) != SPECD_OK) fail_msg("create: %s", err.message);
        specd_step_layout lay;
        specd_step_outcome out;
        memset(&lay, 0, sizeof lay);
        assert_int_equal(ops->layout(st, hist, n, &lay, &err), SPECD_OK);
        assert_int_equal(lay.n_tokens, 1);
        assert_int_equal(ops->verify_hidden(st, l0, h, E, &out, &err), SPECD_OK);
        if (out.emitted[0] != X) { /* another context: not counted */
            ops->destroy(st);
            continue;
        }
        memset(&lay, 0, sizeof lay);
        assert_int_equal(ops->layout(st, hist, n + 1, &lay, &err), SPECD_OK);
        assert_int_equal(lay.n_tokens, 2);
        dcounts[lay.tokens[1]]++;
        if (ops->verify_hidden(st, l1, h + E, E, &out, &err) != SPECD_OK)
            fail_msg("verify: %s", err.message);
        counts[out.emitted[0]]++;
        accepted += (uint64_t)out.n_accepted;
        total++;
        ops->destroy(st);
    }
    ops->shared_destroy(shared);
    unlink(head);
    double pv = gof_pvalue(counts, p1, V, total), pq = gof_pvalue(dcounts, q, V, total);
    /* the power check: the drafts do not follow the target, nor the tokens q */
    double pv_drafts = gof_pvalue(dcounts, p1, V, total), pq_tokens = gof_pvalue(counts, q, V, total);
    fprintf(stderr, "rejection: candidate %d, p(X) %.2f, overlap of q and p %.2f; %llu trials in "
                    "context, %llu drafts accepted; G-test p-values: tokens vs target %.4f, "
                    "drafts vs q %.4f (controls: drafts vs target %.2g, tokens vs q %.2g)\n",
            best, best_px, best_overlap, (unsigned long long)total, (unsigned long long)accepted,
            pv, pq, pv_drafts, pq_tokens);
    assert_true(total >= (uint64_t)(trials / 4));
    assert_true(accepted > 0);
    assert_true(pv > 1e-3);
    assert_true(pq > 1e-3);
    assert_true(pv_drafts < 1e-3 || pq_tokens < 1e-3);
    specd_sampler_destroy(smp);
    free(l0);
    free(h);
    free(p1);
    free(q);
    free(counts);
    free(dcounts);
}

int main(void) {
    const char *path = specd_test_model_path();
    specd_error err;
    if (!path || specd_golden_prompts_read(getenv("SPECD_SOURCE_DIR"), N_GOLDEN, MAX_PROMPT,
                                           &prompts[0][0], n_prompts) != 0) {
        fprintf(stderr, "model or golden prompts missing\n");
        return 1;
    }
    if (specd_model_create(path, &model, &err) != SPECD_OK) {
        fprintf(stderr, "model: %s\n", err.message);
        return 1;
    }
    specd_context_params cp = specd_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 32;
    if (specd_context_create(model, &cp, &ctx, &err) != SPECD_OK) {
        fprintf(stderr, "context: %s\n", err.message);
        return 1;
    }
    const char *env_head = getenv("SPECD_MRP_HEAD");
    snprintf(shipped_head, sizeof shipped_head, "%s", env_head && *env_head ? env_head : "");
    if (!shipped_head[0])
        snprintf(shipped_head, sizeof shipped_head, "%s/artifacts/mrp/smollm2-135m-mrp.gguf",
                 getenv("SPECD_SOURCE_DIR") ? getenv("SPECD_SOURCE_DIR") : ".");
    snprintf(dir, sizeof dir, "/tmp/specd_mrp_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    snprintf(random_head, sizeof random_head, "%s/random.gguf", dir);
    mrp_head_spec hs = {.info = *specd_model_get_info(model),
                        .n_vocab_key = specd_model_get_info(model)->n_vocab, .noise = 0.02f,
                        .seed = 11};
    hs.info.n_layer = 1;
    /* the same head with a draft vocabulary: distinct ids spread over the vocabulary */
    snprintf(vocab_head, sizeof vocab_head, "%s/vocab.gguf", dir);
    for (int32_t i = 0; i < N_DVOCAB; i++)
        dvocab[i] = (int32_t)(((int64_t)i * 7919) % specd_model_get_info(model)->n_vocab);
    mrp_head_spec hv = hs, hq = hs;
    hv.draft_vocab = dvocab;
    hv.n_draft_vocab = N_DVOCAB;
    hq.q8_eh_proj = 1;
    snprintf(q8_head, sizeof q8_head, "%s/q8.gguf", dir);
    if (mrp_write_head(random_head, &hs) != 0 || mrp_write_head(vocab_head, &hv) != 0 ||
        mrp_write_head(q8_head, &hq) != 0) {
        fprintf(stderr, "cannot write the random heads\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_heads),
        cmocka_unit_test(test_identity_random_head),
        cmocka_unit_test(test_guard_identity),
        cmocka_unit_test(test_direct_is_lossy),
        cmocka_unit_test(test_draft_vocab),
        cmocka_unit_test(test_remask),
        cmocka_unit_test(test_batch_loop),
        cmocka_unit_test(test_rejection_statistics),
        cmocka_unit_test(test_identity_shipped_head),
        cmocka_unit_test(test_min_conf),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(random_head);
    unlink(vocab_head);
    unlink(q8_head);
    rmdir(dir);
    specd_context_destroy(ctx);
    specd_model_destroy(model);
    return rc;
}
