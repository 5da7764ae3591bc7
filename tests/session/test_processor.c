/* Row processors (specd/processor.h) in the session, with the target played by a fixed
 * second-order Markov chain over V = 64 tokens (no model): the penalties' arithmetic against a
 * hand computation; with penalties, speculative runs (ngram, suffix, recycle's trees) emit exactly
 * the tokens of plain runs and differ from runs without them; a banned token is never emitted
 * nor accepted; admit's cuts never reach the target; forced drafts are verified and, when right,
 * raise tokens per forward; paths that cannot apply a processor are refused at open. The
 * real-model runs are tests/cli/test_penalties.sh. */
#include "test_main.h"

#include "common/status_internal.h"
#include "session/penalties.h"
#include "specd/spec_batch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { V = 64, MAXK = 8, N_OUT = 120, N_PROMPT = 7, ROWS = 2 * MAXK + 1 };

static const int32_t prompt[N_PROMPT] = {5, 6, 7, 0, 1, 2, 3};

/* The token after (a, b): a short cycle n-gram drafts hit, with spread for sampling. */
static void target_row(int32_t a, int32_t b, float *row) {
    uint32_t h = (uint32_t)a * 2654435761u ^ (uint32_t)b * 40503u;
    for (int x = 0; x < V; x++) {
        h = h * 1664525u + 1013904223u;
        row[x] = (float)(h >> 8) / (float)(1u << 24) * 2.0f - 0.5f; /* some below 0 */
    }
    row[(b + 1) % 8] += 7.0f;
    row[(a + 3) % 8] += 5.5f;
    row[b] += 6.5f; /* a close third: repeating the last token, which the penalties weigh */
}

/* The test's processor: bans one token (-1: none), may cut drafts at it, may force the greedy
 * continuation (or a wrong one). Counts its calls. */
typedef struct test_proc {
    int32_t banned;
    int admit;
    int forced;       /* 1: the target's greedy choice under the ban; 2: a wrong token */
    int64_t n_commit; /* tokens committed to it */
} test_proc;

static specd_status tp_apply(void *user, const specd_row_path *path, float *logits,
                             int32_t n_vocab, specd_error *err) {
    (void)path, (void)n_vocab, (void)err;
    const test_proc *t = user;
    if (t->banned >= 0) logits[t->banned] = -INFINITY;
    return SPECD_OK;
}

static int32_t tp_admit(void *user, const specd_row_path *path, const int32_t *drafts,
                        int32_t n) {
    (void)path;
    const test_proc *t = user;
    for (int32_t i = 0; i < n; i++)
        if (drafts[i] == t->banned) return i;
    return n;
}

static int32_t greedy_after(const test_proc *t, int32_t a, int32_t b) {
    float row[V];
    target_row(a, b, row);
    if (t->banned >= 0) row[t->banned] = -INFINITY;
    int32_t best = 0;
    for (int32_t x = 1; x < V; x++) best = row[x] > row[best] ? x : best;
    return best;
}

static int32_t tp_forced(void *user, const specd_row_path *path, int32_t *out, int32_t max) {
    const test_proc *t = user;
    int32_t a = path->tokens[path->n_tokens - 2], b = path->tokens[path->n_tokens - 1];
    for (int32_t i = 0; i < max; i++) {
        int32_t c = greedy_after(t, a, b);
        if (t->forced == 2) c = (c + 1) % 8 == t->banned ? (c + 2) % 8 : (c + 1) % 8;
        out[i] = c;
        a = b;
        b = c;
    }
    return max < 3 ? max : 3;
}

static void tp_commit(void *user, const int32_t *tokens, int32_t n) {
    (void)tokens;
    ((test_proc *)user)->n_commit += n;
}

/* A drafter proposing the unconstrained target's greedy chain: it drafts the banned token
 * wherever the target prefers it, and is right elsewhere. */
static specd_status stub_create(const specd_policy_env *e, const char *o, void **st,
                                specd_error *err) {
    (void)e, (void)o, (void)err;
    *st = NULL;
    return SPECD_OK;
}
static void stub_destroy(void *st) { (void)st; }
static specd_status greedy_propose(void *st, const int32_t *h, int64_t n, int32_t max_draft,
                                   int32_t *draft, int32_t *n_draft, float *q, int *has_q,
                                   specd_error *err) {
    (void)st, (void)q, (void)err;
    const test_proc unbanned = {.banned = -1};
    int32_t a = h[n - 2], b = h[n - 1];
    for (int32_t i = 0; i < max_draft; i++) {
        draft[i] = greedy_after(&unbanned, a, b);
        a = b;
        b = draft[i];
    }
    *n_draft = max_draft;
    *has_q = 0;
    return SPECD_OK;
}
static const specd_policy_ops greedy_ops = {.abi_version = SPECD_POLICY_ABI_VERSION,
                                            .name = "greedy", .create = stub_create,
                                            .destroy = stub_destroy,
                                            .propose = greedy_propose};

typedef struct run_cfg {
    const char *policy;
    const specd_policy_ops *ops; /* or NULL */
    specd_accept_rule rule;
    float temperature;
    uint64_t seed;
    specd_penalties_params pen;
    test_proc *proc; /* NULL: none */
} run_cfg;

typedef struct run_out {
    int32_t out[N_OUT + ROWS];
    int64_t n_out;
    int64_t banned_in_layouts; /* drafts equal to the banned token the target was asked to run */
    specd_seq_stats stats;
} run_out;

/* The tokens row r of a laid-out step follows: the context, then the step's tokens it sees
 * (all up to r in a chain; its ancestors in a tree), itself last; returns the last two. */
static void row_context(const specd_step_layout *lay, const int32_t *ctx, int64_t n_ctx,
                        int32_t r, int32_t *a, int32_t *b) {
    int32_t prev[2] = {ctx[n_ctx - 2], ctx[n_ctx - 1]};
    int64_t width = n_ctx - 1 + lay->n_tokens;
    for (int32_t j = 1; j <= r; j++) {
        if (lay->visible && !lay->visible[(size_t)r * (size_t)width + (size_t)(n_ctx - 1 + j)])
            continue;
        prev[0] = prev[1];
        prev[1] = lay->tokens[j];
    }
    *a = prev[0];
    *b = prev[1];
}

/* A spec over the toy vocabulary; verifier: a remote verifier endpoint, or NULL. */
static specd_spec *make_spec(const char *verifier) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    sp.max_draft = MAXK;
    sp.verifier_endpoint = verifier;
    sp.verifier_timeout_ms = 50;
    specd_spec *spec = NULL;
    specd_error err;
    if (specd_spec_create(&sp, &spec, &err) != SPECD_OK) fail_msg("spec: %s", err.message);
    return spec;
}

static void run(const run_cfg *c, run_out *r) {
    specd_spec *spec = make_spec(NULL);
    specd_error err;
    specd_seq_params p = specd_seq_default_params();
    p.policy = c->policy;
    p.policy_ops = c->ops;
    p.rule = c->rule;
    p.sampling.temperature = c->temperature;
    p.seed = c->seed;
    p.max_tokens = N_OUT;
    p.adaptive = 0;
    p.penalties = c->pen;
    if (c->proc)
        p.processor = (specd_row_processor){.apply = tp_apply,
                                            .admit = c->proc->admit ? tp_admit : NULL,
                                            .forced = c->proc->forced ? tp_forced : NULL,
                                            .commit = tp_commit, .user = c->proc};
    if (specd_spec_seq_open(spec, 2, prompt, N_PROMPT, &p, &err) != SPECD_OK)
        fail_msg("open: %s", err.message);
    int32_t ctx[N_PROMPT + N_OUT + ROWS];
    memcpy(ctx, prompt, sizeof prompt);
    int64_t n_ctx = N_PROMPT;
    static float logits[ROWS * V];
    memset(r, 0, sizeof *r);
    while (!specd_spec_seq_done(spec, 2)) {
        specd_step_layout lay;
        assert_int_equal(specd_spec_seq_layout(spec, 2, &lay, &err), SPECD_OK);
        for (int32_t i = 0; i < lay.n_rows; i++) {
            int32_t row = lay.rows[i], a, b;
            row_context(&lay, ctx, n_ctx, row, &a, &b);
            target_row(a, b, logits + (size_t)i * V);
            if (row > 0 && c->proc && lay.tokens[row] == c->proc->banned) r->banned_in_layouts++;
        }
        specd_step_outcome o;
        if (specd_spec_seq_verify(spec, 2, logits, &o, &err) != SPECD_OK)
            fail_msg("verify: %s", err.message);
        memcpy(ctx + n_ctx, o.emitted, (size_t)o.n_emitted * sizeof(int32_t));
        n_ctx += o.n_emitted;
    }
    const int32_t *out = specd_spec_seq_output(spec, 2, &r->n_out);
    memcpy(r->out, out, (size_t)r->n_out * sizeof(int32_t));
    assert_int_equal(specd_spec_seq_stats(spec, 2, &r->stats, &err), SPECD_OK);
    if (c->proc) assert_int_equal(c->proc->n_commit, r->n_out);
    specd_spec_seq_close(spec, 2);
    specd_spec_destroy(spec);
}

static int same_output(const run_out *a, const run_out *b) {
    return a->n_out == b->n_out && !memcmp(a->out, b->out, (size_t)a->n_out * sizeof(int32_t));
}

static void assert_same(const run_out *a, const run_out *b, const char *what) {
    if (!same_output(a, b)) {
        int64_t i = 0;
        while (i < a->n_out && i < b->n_out && a->out[i] == b->out[i]) i++;
        fail_msg("%s: outputs differ at token %lld", what, (long long)i);
    }
}

static void test_penalty_math(void **s) {
    (void)s;
    enum { PV = 6 };
    const int32_t pr[] = {1, 2, 2};
    specd_penalties_params pp = {.presence_penalty = 0.25f, .frequency_penalty = 0.5f,
                                 .repetition_penalty = 2.0f};
    specd_penalties *pen;
    specd_error err;
    assert_int_equal(specd_penalties_create(&pp, PV, pr, 3, &pen, &err), SPECD_OK);
    specd_row_processor proc = specd_penalties_processor(pen);
    const int32_t gen[] = {3, 3, 4};
    proc.commit(proc.user, gen, 3);
    /* prompt 1 2 2, output 3 3 4, then drafts 4 5 before the row */
    const int32_t path_tokens[] = {1, 2, 2, 3, 3, 4, 4, 5};
    specd_row_path path = {.tokens = path_tokens, .n_tokens = 8, .n_prompt = 3,
                           .n_committed = 6};
    float l[PV] = {1.0f, 2.0f, -1.0f, 3.0f, -2.0f, 0.5f};
    assert_int_equal(proc.apply(proc.user, &path, l, PV, &err), SPECD_OK);
    /* by hand: unseen as is; prompt-only: repetition only; output: repetition, then count *
     * frequency + presence (3: twice committed; 4: once committed + once drafted; 5: drafted) */
    const float want[PV] = {1.0f, 2.0f / 2, -1.0f * 2, 3.0f / 2 - (2 * 0.5f + 0.25f),
                            -2.0f * 2 - (2 * 0.5f + 0.25f), 0.5f / 2 - (0.5f + 0.25f)};
    for (int i = 0; i < PV; i++)
        if (l[i] != want[i]) fail_msg("token %d: %g, want %g", i, (double)l[i], (double)want[i]);
    /* the drafts were counted for that row only: the committed row has 4 once, 5 unseen */
    path.n_tokens = 6;
    float m[PV] = {1.0f, 2.0f, -1.0f, 3.0f, -2.0f, 0.5f};
    assert_int_equal(proc.apply(proc.user, &path, m, PV, &err), SPECD_OK);
    assert_true(m[4] == -2.0f * 2 - (0.5f + 0.25f));
    assert_true(m[5] == 0.5f);
    /* a path the state has not seen committed is refused, not mis-penalised */
    path.n_committed = 5;
    assert_int_equal(proc.apply(proc.user, &path, m, PV, &err), SPECD_E_STATE);
    specd_penalties_destroy(pen);
    specd_penalties_params bad = {.repetition_penalty = 0.0f};
    assert_int_equal(specd_penalties_check(&bad, &err), SPECD_E_INVALID_ARG);
    bad = (specd_penalties_params){.presence_penalty = 2.5f, .repetition_penalty = 1.0f};
    assert_int_equal(specd_penalties_check(&bad, &err), SPECD_E_INVALID_ARG);
}

static const struct { specd_accept_rule rule; float t; } modes[] = {
    {SPECD_ACCEPT_GREEDY, 0.0f}, {SPECD_ACCEPT_COUPLED, 0.8f}, {SPECD_ACCEPT_COUPLED, 1.3f}};

/* Plain decoding in mode m with the processor t. */
static run_cfg mode_cfg(size_t m, uint64_t seed, specd_penalties_params pen, test_proc *t) {
    return (run_cfg){.policy = "none", .rule = modes[m].rule, .temperature = modes[m].t,
                     .seed = seed, .pen = pen, .proc = t};
}

static void test_penalties_spec_equals_plain(void **s) {
    (void)s;
    static run_out plain, spec, unpenalised;
    const specd_penalties_params pen = {.presence_penalty = 0.6f, .frequency_penalty = 0.8f,
                                        .repetition_penalty = 1.2f};
    const char *policies[] = {"ngram", "suffix", "recycle"};
    int changed = 0;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (uint64_t seed = 1; seed <= 2; seed++) {
            run_cfg c = mode_cfg(m, seed, specd_seq_default_params().penalties, NULL);
            run(&c, &unpenalised);
            c.pen = pen;
            run(&c, &plain);
            changed += !same_output(&plain, &unpenalised);
            for (size_t k = 0; k < sizeof policies / sizeof policies[0]; k++) {
                c.policy = policies[k];
                run(&c, &spec);
                assert_same(&plain, &spec, policies[k]);
                if (spec.stats.n_draft_tokens == 0)
                    fail_msg("%s mode %zu: nothing drafted", policies[k], m);
                c.policy = "none";
            }
        }
    assert_true(changed > 0); /* the penalties really change what is generated */
}

/* The token the unconstrained target emits most under greedy decoding: banning it changes the
 * output (so the tests below can fail). */
static int32_t favourite(void) {
    static run_out free_run;
    run_cfg c = {.policy = "none", .rule = SPECD_ACCEPT_GREEDY,
                 .pen = specd_seq_default_params().penalties};
    run(&c, &free_run);
    int64_t count[V] = {0};
    int32_t best = 0;
    for (int64_t i = 0; i < free_run.n_out; i++) count[free_run.out[i]]++;
    for (int32_t x = 1; x < V; x++) best = count[x] > count[best] ? x : best;
    assert_true(count[best] > 0);
    return best;
}

static void test_banned_token_never_emitted(void **s) {
    (void)s;
    static run_out plain, spec, cut;
    const int32_t ban = favourite();
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        test_proc t = {.banned = ban};
        run_cfg c = mode_cfg(m, 5, specd_seq_default_params().penalties, &t);
        run(&c, &plain);
        t.n_commit = 0;
        c.ops = &greedy_ops;
        run(&c, &spec);
        assert_same(&plain, &spec, "drafts of a banned token");
        for (int64_t i = 0; i < spec.n_out; i++) assert_int_not_equal(spec.out[i], ban);
        /* the drafter proposed the banned token, none was taken, others were */
        assert_true(spec.banned_in_layouts > 0);
        assert_true(spec.stats.n_accepted > 0);
        /* with admit, drafts at the banned token are cut before the target sees them */
        t = (test_proc){.banned = ban, .admit = 1};
        run(&c, &cut);
        assert_same(&plain, &cut, "drafts cut by admit");
        assert_int_equal(cut.banned_in_layouts, 0);
        assert_true(cut.stats.n_draft_cut > 0);
        assert_true(cut.stats.n_draft_tokens < spec.stats.n_draft_tokens);
        c.ops = NULL;
        /* a tree policy's nodes are cut the same way */
        t = (test_proc){.banned = ban, .admit = 1};
        c.policy = "recycle";
        run(&c, &cut);
        assert_same(&plain, &cut, "recycle with admit");
        assert_int_equal(cut.banned_in_layouts, 0);
        assert_true(cut.stats.n_accepted > 0);
    }
}

static void test_forced_drafts(void **s) {
    (void)s;
    static run_out plain, forced, wrong;
    const int32_t ban = favourite();
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        test_proc t = {.banned = ban};
        specd_penalties_params pen = {.presence_penalty = 0.2f, .repetition_penalty = 1.1f};
        run_cfg c = mode_cfg(m, 9, pen, &t);
        run(&c, &plain);
        assert_int_equal(plain.stats.n_draft_tokens, 0);
        t = (test_proc){.banned = ban, .forced = 1};
        run(&c, &forced);
        assert_same(&plain, &forced, "forced drafts");
        assert_true(forced.stats.n_forced > 0);
        assert_int_equal(forced.stats.n_forced, forced.stats.n_draft_tokens);
        if (modes[m].t == 0.0f) { /* greedy: the oracle is mostly right, and then they pay */
            assert_true(forced.stats.n_accepted > 0);
            assert_true(forced.stats.n_steps < plain.stats.n_steps);
        }
        t = (test_proc){.banned = ban, .forced = 2};
        run(&c, &wrong);
        assert_same(&plain, &wrong, "wrong forced drafts");
        assert_true(wrong.stats.n_forced > 0);
    }
}

/* A self-speculative policy: its rows are its own, so a processor is refused at open. */
static specd_status self_layout(void *st, const int32_t *h, int64_t n, specd_step_layout *out,
                                specd_error *err) {
    (void)st, (void)h, (void)n, (void)out;
    return specd_fail(err, SPECD_E_INTERNAL, "not used");
}
static specd_status self_verify(void *st, const float *logits, specd_step_outcome *out,
                                specd_error *err) {
    (void)st, (void)logits, (void)out;
    return specd_fail(err, SPECD_E_INTERNAL, "not used");
}
static const specd_policy_ops self_ops = {.abi_version = SPECD_POLICY_ABI_VERSION,
                                          .name = "selfish", .create = stub_create,
                                          .destroy = stub_destroy, .layout = self_layout,
                                          .verify = self_verify};

static void test_refusals(void **s) {
    (void)s;
    specd_spec *spec = make_spec(NULL);
    specd_error err;
    specd_seq_params p = specd_seq_default_params();
    p.policy_ops = &self_ops;
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, N_PROMPT, &p, &err), SPECD_OK);
    specd_spec_seq_close(spec, 0);
    p.penalties.frequency_penalty = 0.5f;
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, N_PROMPT, &p, &err),
                     SPECD_E_UNSUPPORTED);
    assert_non_null(strstr(err.message, "drafter-shaped"));
    test_proc t = {.banned = 1};
    p = specd_seq_default_params();
    p.policy_ops = &self_ops;
    p.processor = (specd_row_processor){.apply = tp_apply, .user = &t};
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, N_PROMPT, &p, &err),
                     SPECD_E_UNSUPPORTED);
    /* out-of-range penalties and a processor without apply */
    p = specd_seq_default_params();
    p.penalties.repetition_penalty = -1.0f;
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, N_PROMPT, &p, &err),
                     SPECD_E_INVALID_ARG);
    p = specd_seq_default_params();
    p.processor.admit = tp_admit;
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, N_PROMPT, &p, &err),
                     SPECD_E_INVALID_ARG);
    assert_int_equal(specd_spec_seq_done(spec, 0), 1); /* nothing was opened */
    specd_spec_destroy(spec);
    /* a remote verifier daemon scores rows where no processor runs (none need be up: the
     * refusal comes first) */
    char dir[] = "/tmp/specd-proc.XXXXXX", ep[64];
    assert_non_null(mkdtemp(dir));
    snprintf(ep, sizeof ep, "ipc://%s/verifier.sock", dir);
    spec = make_spec(ep);
    p = specd_seq_default_params();
    p.policy = "ngram";
    p.penalties.presence_penalty = 0.5f;
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, N_PROMPT, &p, &err),
                     SPECD_E_UNSUPPORTED);
    assert_non_null(strstr(err.message, "remote verifier"));
    specd_spec_destroy(spec);
    rmdir(dir);
}

/* The batch API (specd/spec_batch.h) with bf16 logits and a padded stride: three sequences of
 * one batch, plain, ngram and a drafter of banned tokens, all with the same penalties, ban and
 * stream key, emit the same tokens. */
static void test_batch_api(void **s) {
    (void)s;
    enum { NS = 3, STRIDE = V + 5 };
    specd_spec *spec = make_spec(NULL);
    specd_error err;
    const int32_t ban = favourite();
    static test_proc procs[NS];
    static int32_t ctx[NS][N_PROMPT + N_OUT + ROWS];
    int64_t n_ctx[NS];
    int32_t ids[NS] = {4, 1, 6};
    for (int i = 0; i < NS; i++) {
        procs[i] = (test_proc){.banned = ban, .admit = i == 2};
        specd_seq_params p = specd_seq_default_params();
        p.policy = i == 1 ? "ngram" : "none";
        p.policy_ops = i == 2 ? &greedy_ops : NULL;
        p.sampling.temperature = 0.8f;
        p.seed = 3;
        p.stream_key = 77;
        p.max_tokens = N_OUT;
        p.adaptive = 0;
        p.penalties = (specd_penalties_params){.frequency_penalty = 0.8f,
                                               .repetition_penalty = 1.2f};
        p.processor = (specd_row_processor){.apply = tp_apply,
                                            .admit = procs[i].admit ? tp_admit : NULL,
                                            .commit = tp_commit, .user = &procs[i]};
        assert_int_equal(specd_spec_seq_open(spec, ids[i], prompt, N_PROMPT, &p, &err), SPECD_OK);
        memcpy(ctx[i], prompt, sizeof prompt);
        n_ctx[i] = N_PROMPT;
    }
    static uint16_t block[NS * ROWS * STRIDE];
    float row[V];
    for (;;) {
        int32_t live[NS], n_live = 0, at[NS]; /* the unfinished, and each one's index */
        for (int i = 0; i < NS; i++)
            if (!specd_spec_seq_done(spec, ids[i])) at[n_live] = i, live[n_live++] = ids[i];
        if (n_live == 0) break;
        specd_batch b;
        if (specd_spec_batch_layout(spec, live, n_live, &b, &err) != SPECD_OK)
            fail_msg("batch layout: %s", err.message);
        for (int j = 0; j < n_live; j++) {
            const specd_batch_seq *bs = &b.seqs[j];
            int i = at[j];
            for (int32_t k = 0; k < bs->layout.n_rows; k++) {
                int32_t a, c;
                row_context(&bs->layout, ctx[i], n_ctx[i], bs->layout.rows[k], &a, &c);
                target_row(a, c, row);
                uint16_t *dst = block + (size_t)(bs->row_offset + k) * STRIDE;
                for (int32_t x = 0; x < V; x++) { /* bf16: the top half, truncated */
                    uint32_t bits;
                    memcpy(&bits, &row[x], 4);
                    dst[x] = (uint16_t)(bits >> 16);
                }
            }
        }
        specd_logits lg = {.data = block, .row_stride = STRIDE, .n_rows = b.n_rows,
                           .dtype = SPECD_DTYPE_BF16, .device = SPECD_DEVICE_HOST};
        specd_batch_result res;
        if (specd_spec_batch_verify(spec, &lg, &res, &err) != SPECD_OK)
            fail_msg("batch verify: %s", err.message);
        for (int j = 0; j < n_live; j++) {
            const specd_step_outcome *o = &res.outcome[j];
            int i = at[j];
            memcpy(ctx[i] + n_ctx[i], o->emitted, (size_t)o->n_emitted * sizeof(int32_t));
            n_ctx[i] += o->n_emitted;
        }
    }
    int64_t n0, n1, n2;
    const int32_t *o0 = specd_spec_seq_output(spec, ids[0], &n0);
    const int32_t *o1 = specd_spec_seq_output(spec, ids[1], &n1);
    const int32_t *o2 = specd_spec_seq_output(spec, ids[2], &n2);
    assert_int_equal(n0, N_OUT);
    assert_int_equal(n1, n0);
    assert_int_equal(n2, n0);
    assert_memory_equal(o0, o1, (size_t)n0 * sizeof(int32_t));
    assert_memory_equal(o0, o2, (size_t)n0 * sizeof(int32_t));
    for (int64_t i = 0; i < n0; i++) assert_int_not_equal(o0[i], ban);
    specd_seq_stats st;
    assert_int_equal(specd_spec_seq_stats(spec, ids[2], &st, &err), SPECD_OK);
    assert_true(st.n_draft_cut > 0 && st.n_accepted > 0);
    specd_spec_destroy(spec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_penalty_math),
        cmocka_unit_test(test_penalties_spec_equals_plain),
        cmocka_unit_test(test_banned_token_never_emitted),
        cmocka_unit_test(test_forced_drafts),
        cmocka_unit_test(test_batch_api),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
