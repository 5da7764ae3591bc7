/* SimSD's verification layout on the real model, independent of how good the models are (the
 * block model A4 = SmolLM2 + artifacts/adapters/smollm2-135m-sdar as the target):
 *  - one layer: the one-pass verification (policy/dlm/simsd_layout.h) gives, at every draft step, the
 *    distribution the sequential replay of the same order gives (policy/dlm/simsd_replay.h), up to
 *    float summation order: at layer 0 each mask row D~_{o_r} attends to exactly the keys the
 *    block state of step r holds. Without the RoPE copy it does not: the check can fail;
 *  - self-draft at T = 0 (A4 drafting for itself): the sequential replay IS the drafter's own
 *    denoising, bit for bit (the runtime is batch-invariant); the one-pass distributions' KL and
 *    top-1 agreement by step are printed (the paper's Fig. 3) and the step-0 top-1 must agree;
 *    dropping the RoPE copy raises the KL at every step (Table 4's ablation);
 *  - through specd_spec: greedy self-draft acceptance collapses without the RoPE copy; gamma=0
 *    (the target alone) drafts nothing and takes one forward per slot; gamma < B drafts every
 *    block in rounds; all of it is flagged lossy, and the KV every run committed is a plain
 *    prefill's of its tokens, bit for bit;
 *  - p/q statistics through the acceptance engine with SimSD's real rows (cross-model drafter,
 *    T = 1): the first draft-order slot's token follows p^(1) (G-test) and is accepted at the rate
 *    sum min(p, q);
 *  - a host that runs its own target gets the tokens specd_spec_run gets.
 * With the argument "quick" (test_simsd_model, sized for the sanitizers) only the one-layer replay
 * and the greedy host run; test_simsd_stats (label slow) runs the rest: the coupled host run and
 * everything above but the one-layer replay. Every pass that runs test_simsd_stats runs
 * test_simsd_model beside it, so the two do not repeat each other's cases. */
#include "test_main.h"

#include "accept/gof.h"
#include "fixture_model.h"

#include "policy/dlm/simsd_drafter.h"
#include "policy/dlm/simsd_replay.h"
#include "specd/accept.h"
#include "specd/policy.h"
#include "specd/spec_batch.h"
#include "specd/spec_runtime.h"

#include <math.h>
#include <string.h>

enum { B = 4, N_PROMPTS = 3, MAX_PROMPT = 256, N_BLOCKS = 3, N_GEN = 24 };
/* the prompts checked: all, or the first under the sanitizers (SPECD_TEST_PROMPTS) */
enum { N_RUN = SPECD_TEST_PROMPTS(N_PROMPTS) };

static int32_t prompts[N_PROMPTS][MAX_PROMPT];
static int64_t n_prompts[N_PROMPTS];
static specd_model *model;
static const specd_model_info *info;
static specd_lora *lora;
static const float *mask_vec;
static int32_t n_embd;
static char adapter[4096];
static float *onepass, *seq;
static size_t V;

static specd_context *make_ctx(int32_t n_layers) {
    specd_context_params cp = specd_context_default_params();
    cp.n_ctx = MAX_PROMPT + N_BLOCKS * B + 2 * B + 2;
    cp.n_batch = 64;
    cp.n_layers = n_layers;
    specd_context *c;
    specd_error err;
    if (specd_context_create(model, &cp, &c, &err) != SPECD_OK) fail_msg("ctx: %s", err.message);
    assert_int_equal(specd_context_set_lora(c, lora, &err), SPECD_OK);
    return c;
}

static void prefill(specd_context *c, const int32_t *toks, int64_t from, int64_t to) {
    specd_error err;
    for (int64_t i = from; i < to; i += 64) {
        int32_t m = to - i < 64 ? (int32_t)(to - i) : 64;
        specd_seq_batch b = {.seq = 0, .n_tokens = m, .tokens = toks + i};
        if (specd_context_extend(c, &b, 1, NULL, &err) != SPECD_OK)
            fail_msg("prefill: %s", err.message);
    }
}

static specd_simsd_drafter *make_drafter(int32_t n_layers, float temperature, uint64_t seed) {
    specd_policy_env env = {.n_vocab = info->n_vocab,
                            .max_draft = 8,
                            .target = model,
                            .rule = temperature > 0 ? SPECD_ACCEPT_REJECTION : SPECD_ACCEPT_GREEDY,
                            .seed = seed};
    env.sampling = specd_sampling_default_params();
    env.sampling.temperature = temperature;
    specd_simsd_drafter *d;
    specd_error err;
    if (specd_simsd_drafter_create(&env, model, n_layers, lora, B, 0, 0, &d, &err) != SPECD_OK)
        fail_msg("drafter: %s", err.message);
    return d;
}

static const int32_t all_masks[B] = {-1, -1, -1, -1};

static void replay(specd_context *c, const int32_t *hist, int64_t n, const int32_t *block,
                   const specd_simsd_draft *d, int rope_copy, float *one, float *sq) {
    specd_simsd_replay_input in = {.target = c,
                                   .use_lora = 1,
                                   .mask_vec = mask_vec,
                                   .n_embd = n_embd,
                                   .mask_id = 0,
                                   .n_vocab = info->n_vocab,
                                   .b = B,
                                   .history = hist,
                                   .n = n,
                                   .block = block,
                                   .draft = d,
                                   .rope_copy = rope_copy};
    specd_error err;
    if (specd_simsd_replay(&in, one, sq, &err) != SPECD_OK) fail_msg("replay: %s", err.message);
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m) m = d;
    }
    return m;
}

static void test_one_layer_replay_exact(void **s) {
    (void)s;
    specd_context *c = make_ctx(1);
    specd_simsd_drafter *d = make_drafter(0, 0.0f, 1);
    double worst_on = 0.0, best_off = INFINITY;
    specd_error err;
    for (int p = 0; p < N_RUN; p++) {
        const int32_t *h = prompts[p];
        const int64_t n = n_prompts[p];
        assert_int_equal(specd_context_kv_truncate(c, 0, 0, &err), SPECD_OK);
        prefill(c, h, 0, n - 1);
        specd_simsd_draft dr;
        assert_int_equal(specd_simsd_drafter_draft(d, h, n, all_masks, B, &dr, &err), SPECD_OK);
        replay(c, h, n, NULL, &dr, 1, onepass, seq);
        double on = max_abs_diff(onepass, seq, B * V);
        replay(c, h, n, NULL, &dr, 0, onepass, NULL);
        double off = max_abs_diff(onepass, seq, B * V);
        /* gamma < B: a later round of the block, its first draft decided, two more drafted */
        int32_t state[B] = {-1, -1, -1, -1};
        state[dr.order[0]] = dr.token[dr.order[0]];
        specd_simsd_draft d2;
        assert_int_equal(specd_simsd_drafter_draft(d, h, n, state, 2, &d2, &err), SPECD_OK);
        assert_int_equal(d2.tau[dr.order[0]], 0);
        replay(c, h, n, state, &d2, 1, onepass, seq);
        const double part = max_abs_diff(onepass, seq, 2 * V);
        if (part > on) on = part;
        assert_int_equal(specd_context_kv_len(c, 0), n - 1); /* the replay kept nothing */
        fprintf(stderr, "one layer, prompt %d: max |one-pass - sequential| %.2e (RoPE copy), "
                        "%.2e (without)\n", p, on, off);
        if (on > worst_on) worst_on = on;
        if (off < best_off) best_off = off;
    }
    assert_true(worst_on < 1e-3);  /* summation order only */
    assert_true(best_off > 1e-1);  /* the positions reach the logits: the check can fail */
    specd_simsd_drafter_destroy(d);
    specd_context_destroy(c);
}

static void test_self_draft_precision(void **s) {
    (void)s;
    specd_context *c = make_ctx(0);
    specd_simsd_drafter *d = make_drafter(0, 0.0f, 1);
    double kl[2][B] = {{0}}, agree[2][B] = {{0}};
    int count = 0;
    specd_error err;
    for (int p = 0; p < N_PROMPTS; p++) {
        int32_t h[MAX_PROMPT + N_BLOCKS * B];
        int64_t n = n_prompts[p];
        memcpy(h, prompts[p], (size_t)n * sizeof(int32_t));
        assert_int_equal(specd_context_kv_truncate(c, 0, 0, &err), SPECD_OK);
        prefill(c, h, 0, n - 1);
        for (int blk = 0; blk < N_BLOCKS; blk++) {
            specd_simsd_draft dr;
            assert_int_equal(specd_simsd_drafter_draft(d, h, n, all_masks, B, &dr, &err), SPECD_OK);
            for (int rope = 1; rope >= 0; rope--) {
                replay(c, h, n, NULL, &dr, rope, onepass, rope ? seq : NULL);
                for (int r = 0; r < B; r++) {
                    int t;
                    kl[rope][r] += specd_simsd_kl_logits(seq + r * V, onepass + r * V, info->n_vocab, &t);
                    agree[rope][r] += t;
                }
            }
            /* self-draft: the replay is the drafter's own sequential denoising, bit for bit */
            assert_memory_equal(seq, dr.logits, B * V * sizeof(float));
            count++;
            /* the block as drafted becomes history (greedy self-draft: the target's own
             * decoding order) */
            for (int i = 0; i < B; i++)
                h[n + i] = dr.token[i];
            prefill(c, h, n - 1, n + B - 1);
            n += B;
        }
    }
    fprintf(stderr, "self-draft T=0, %d blocks of %d: KL(sequential || one-pass) and top-1 "
                    "agreement by draft step\n", count, B);
    for (int rope = 1; rope >= 0; rope--) {
        fprintf(stderr, "  RoPE copy %-3s KL", rope ? "on" : "off");
        for (int r = 0; r < B; r++)
            fprintf(stderr, " %.3f", kl[rope][r] / count);
        fprintf(stderr, "   top-1");
        for (int r = 0; r < B; r++)
            fprintf(stderr, " %.2f", agree[rope][r] / count);
        fprintf(stderr, "\n");
    }
    /* Step 0 is exact only at layer 0 (test_one_layer_replay_exact): deeper, D~_{o_1} attends to
     * the other mask rows, which saw the data rows of earlier steps, d_{o_1} among them (eq. 1's
     * two-hop path, the paper's "higher order interactions"). So its agreement is reported, and
     * what is asserted is the ablation: the RoPE copy is closer at every step. */
    double a_on = 0.0, a_off = 0.0;
    for (int r = 0; r < B; r++) {
        assert_true(kl[1][r] < kl[0][r]);
        a_on += agree[1][r];
        a_off += agree[0][r];
    }
    assert_true(a_on > a_off);
    specd_simsd_drafter_destroy(d);
    specd_context_destroy(c);
}

/* The KV the policy committed is a plain prefill's of the same tokens, bit for bit: the next
 * row's logits over it equal those over a cache prefilled from scratch (a kept block row from a
 * gated, bidirectional or verification step would differ). */
static void committed_kv_is_plain(specd_context *c, const int32_t *prompt, int64_t n_prompt,
                                  const int32_t *out, int64_t n_out) {
    static int32_t all[MAX_PROMPT + N_GEN];
    memcpy(all, prompt, (size_t)n_prompt * sizeof(int32_t));
    memcpy(all + n_prompt, out, (size_t)n_out * sizeof(int32_t));
    const int32_t kv = specd_context_kv_len(c, 0);
    assert_int_equal(kv, n_prompt + n_out - 1); /* everything but the pending token */
    specd_context *fresh = make_ctx(0);
    specd_error err;
    assert_int_equal(specd_context_set_lora(fresh, NULL, &err), SPECD_OK);
    prefill(fresh, all, 0, kv);
    float *a = malloc(V * sizeof(float)), *b = malloc(V * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(specd_context_decode(c, 0, all[kv], a, &err), SPECD_OK);
    assert_int_equal(specd_context_decode(fresh, 0, all[kv], b, &err), SPECD_OK);
    assert_memory_equal(a, b, V * sizeof(float));
    free(a);
    free(b);
    specd_context_destroy(fresh);
}

static void generate(const char *opts, specd_seq_stats *st) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = info->n_vocab;
    sp.max_draft = 8;
    sp.target = model;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_context_params cp = specd_context_default_params();
    cp.n_ctx = MAX_PROMPT + N_GEN + 3 * B + 2;
    cp.n_batch = 64;
    specd_context *c;
    assert_int_equal(specd_context_create(model, &cp, &c, &err), SPECD_OK);
    char full[8192];
    snprintf(full, sizeof full, "adapter=%s,%s", adapter, opts);
    specd_seq_params params = specd_seq_default_params();
    params.policy = "simsd";
    params.policy_options = full;
    params.sampling.temperature = 0.0f;
    params.max_tokens = N_GEN;
    params.adaptive = 0;
    memset(st, 0, sizeof *st);
    for (int p = 0; p < N_PROMPTS; p++) {
        if (specd_spec_seq_open(spec, 0, prompts[p], n_prompts[p], &params, &err) != SPECD_OK)
            fail_msg("open %s: %s", full, err.message);
        specd_run_stats rs;
        if (specd_spec_run(spec, 0, c, 0, NULL, NULL, &rs, &err) != SPECD_OK)
            fail_msg("run %s: %s", full, err.message);
        int64_t got;
        const int32_t *out = specd_spec_seq_output(spec, 0, &got);
        assert_int_equal(got, N_GEN);
        committed_kv_is_plain(c, prompts[p], n_prompts[p], out, got);
        specd_seq_stats one;
        assert_int_equal(specd_spec_seq_stats(spec, 0, &one, &err), SPECD_OK);
        assert_true(one.lossy);
        st->n_emitted += one.n_emitted;
        st->n_steps += one.n_steps;
        st->n_draft_tokens += one.n_draft_tokens;
        st->n_drafts += one.n_drafts;
        st->n_accepted += one.n_accepted;
        specd_spec_seq_close(spec, 0);
    }
    fprintf(stderr, "simsd %-30s tokens per target forward %.2f, acceptance %.3f (%lld of %lld)\n",
            opts, (double)st->n_emitted / (double)st->n_steps,
            st->n_draft_tokens ? (double)st->n_accepted / (double)st->n_draft_tokens : 0.0,
            (long long)st->n_accepted, (long long)st->n_draft_tokens);
    specd_context_destroy(c);
    specd_spec_destroy(spec);
}

static void test_policy_rope_ablation(void **s) {
    (void)s;
    specd_seq_stats on, off, alone;
    generate("drafter=self", &on);
    generate("drafter=self,rope_copy=0", &off);
    generate("gamma=0", &alone);
    specd_seq_stats two;
    generate("drafter=self,gamma=2", &two);
    /* gamma = 2 of B = 4: after the first round at least 2 slots are still masked, so every
     * block has a second round (the last step of a run, committing the last block, also
     * verifies a block that is never emitted) */
    assert_true(two.n_drafts >= 2 * (N_GEN / B) * N_PROMPTS + N_PROMPTS);
    assert_true(two.n_steps < alone.n_steps);
    assert_true(on.n_draft_tokens > 0 && off.n_draft_tokens > 0);
    assert_int_equal(alone.n_draft_tokens, 0);
    /* the target alone reveals one slot per forward: B forwards per block, the commit riding on
     * the next block's first, and one more at the end */
    assert_int_equal(alone.n_steps, alone.n_emitted + N_PROMPTS);
    const double a_on = (double)on.n_accepted / (double)on.n_draft_tokens;
    const double a_off = (double)off.n_accepted / (double)off.n_draft_tokens;
    assert_true(a_on > a_off + 0.2);
    assert_true(on.n_steps < alone.n_steps);
}

/* Opens sequence 0 of spec on the first prompt with simsd's A4 adapter and opts. */
static void open_prompt0(specd_spec *spec, const char *opts, float temperature) {
    char full[8192];
    snprintf(full, sizeof full, "adapter=%s,%s", adapter, opts);
    specd_seq_params params = specd_seq_default_params();
    params.policy = "simsd";
    params.policy_options = full;
    params.sampling.temperature = temperature;
    params.seed = 99;
    params.max_tokens = N_GEN;
    params.adaptive = 0;
    specd_error err;
    if (specd_spec_seq_open(spec, 0, prompts[0], n_prompts[0], &params, &err) != SPECD_OK)
        fail_msg("open %s: %s", full, err.message);
}

/* A host that runs its own target (no target model in the spec, only its GGUF path): it loads
 * the adapter from the layout's lora_path, feeds the mask vectors and the visibility, commits the
 * kept rows; the policy loads the drafter's weights from the path once per spec. Its tokens equal
 * specd_spec_run's with the target in specd, greedy and sampled. */
static void host_run(const char *opts, float temperature, int32_t *out) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = info->n_vocab;
    sp.max_draft = 8;
    sp.target_path = specd_test_model_path();
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_context *c = make_ctx(0);
    assert_int_equal(specd_context_set_lora(c, NULL, &err), SPECD_OK);
    specd_lora *host_lora = NULL;
    open_prompt0(spec, opts, temperature);
    prefill(c, prompts[0], 0, n_prompts[0] - 1);
    float *logits = malloc((size_t)specd_spec_max_step_rows(spec) * V * sizeof(float));
    assert_non_null(logits);
    const int32_t seq0 = 0;
    while (!specd_spec_seq_done(spec, 0)) {
        specd_batch batch;
        if (specd_spec_batch_layout(spec, &seq0, 1, &batch, &err) != SPECD_OK)
            fail_msg("layout: %s", err.message);
        const specd_step_layout *l = &batch.seqs[0].layout;
        if (l->lora_gate && !host_lora) {
            assert_non_null(l->lora_path);
            assert_int_equal(specd_lora_create(model, l->lora_path, &host_lora, &err), SPECD_OK);
            assert_int_equal(specd_context_set_lora(c, host_lora, &err), SPECD_OK);
        }
        const int32_t before = specd_context_kv_len(c, 0);
        specd_seq_batch sb = specd_step_seq_batch(l, 0);
        specd_extend_out eo = {.n_rows = l->n_rows, .rows = l->rows, .logits = logits};
        assert_int_equal(specd_context_extend(c, &sb, 1, &eo, &err), SPECD_OK);
        specd_logits lg = {.data = logits, .row_stride = info->n_vocab, .n_rows = l->n_rows,
                           .dtype = SPECD_DTYPE_F32, .device = SPECD_DEVICE_HOST};
        specd_batch_result res;
        if (specd_spec_batch_verify(spec, &lg, &res, &err) != SPECD_OK || res.n_failed)
            fail_msg("verify: %s", err.message);
        int32_t keep[64];
        for (int32_t j = 0; j < res.outcome[0].n_keep; j++)
            keep[j] = before + res.outcome[0].keep[j];
        assert_int_equal(
            specd_context_kv_keep(c, 0, before, res.outcome[0].n_keep, keep, &err), SPECD_OK);
    }
    int64_t got;
    const int32_t *toks = specd_spec_seq_output(spec, 0, &got);
    assert_int_equal(got, N_GEN);
    memcpy(out, toks, N_GEN * sizeof(int32_t));
    free(logits);
    specd_context_destroy(c);
    specd_lora_destroy(host_lora);
    specd_spec_destroy(spec);
}

static void in_specd(const char *opts, float temperature, int32_t *out) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = info->n_vocab;
    sp.max_draft = 8;
    sp.target = model;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_context *c = make_ctx(0);
    open_prompt0(spec, opts, temperature);
    specd_run_stats rs;
    assert_int_equal(specd_spec_run(spec, 0, c, 0, NULL, NULL, &rs, &err), SPECD_OK);
    int64_t got;
    memcpy(out, specd_spec_seq_output(spec, 0, &got), N_GEN * sizeof(int32_t));
    assert_int_equal(got, N_GEN);
    specd_context_destroy(c);
    specd_spec_destroy(spec);
}

static int quick; /* the sanitizer-sized selection (main's argument "quick") */

static void test_host_runs_the_target(void **s) {
    (void)s;
    int32_t a[N_GEN], b[N_GEN];
    /* greedy in quick's run, coupled in the full one */
    const float temperature = quick ? 0.0f : 0.8f;
    host_run("drafter=self,threads=1", temperature, a);
    in_specd("drafter=self,threads=1", temperature, b);
    assert_memory_equal(a, b, sizeof a);
}

/* drafter layers: 0 = A4 itself (q close to p: both the accept and the residual path), 8 = the
 * target's first 8 layers with the adapter cut there (q far from p: mostly the residual) */
static void pq_statistics(int32_t drafter_layers) {
    enum { DRAWS = 4000 };
    specd_context *c = make_ctx(0);
    specd_simsd_drafter *d = make_drafter(drafter_layers, 1.0f, 7);
    const int32_t *h = prompts[0];
    const int64_t n = n_prompts[0];
    specd_error err;
    prefill(c, h, 0, n - 1);
    specd_simsd_draft dr;
    assert_int_equal(specd_simsd_drafter_draft(d, h, n, all_masks, B, &dr, &err), SPECD_OK);
    replay(c, h, n, NULL, &dr, 1, onepass, NULL);
    /* p^(1) and q^(1) under the sequence's transform (T = 1, top-k 40, top-p 0.95, min-p 0.05) */
    specd_sampling_params sp = specd_sampling_default_params();
    sp.temperature = 1.0f;
    specd_sampler *smp;
    assert_int_equal(specd_sampler_create(&sp, info->n_vocab, &smp, &err), SPECD_OK);
    float *p = malloc(V * sizeof(float)), *q = malloc(V * sizeof(float));
    double *pd = malloc(V * sizeof(double));
    uint64_t *counts = calloc(V, sizeof(uint64_t));
    assert_non_null(p);
    assert_non_null(q);
    assert_non_null(pd);
    assert_non_null(counts);
    assert_int_equal(specd_sampler_probs(smp, onepass, info->n_vocab, p, &err), SPECD_OK);
    assert_int_equal(specd_sampler_probs(smp, dr.logits, info->n_vocab, q, &err), SPECD_OK);
    double overlap = 0.0;
    for (size_t v = 0; v < V; v++)
        overlap += fmin((double)p[v], (double)q[v]), pd[v] = p[v];
    specd_accept_params ap = specd_accept_default_params();
    ap.rule = SPECD_ACCEPT_REJECTION;
    ap.sampling = sp;
    ap.max_k = B;
    ap.max_vocab = info->n_vocab;
    specd_accept *acc;
    assert_int_equal(specd_accept_create(&ap, &acc, &err), SPECD_OK);
    int accepted = 0;
    for (int i = 0; i < DRAWS; i++) {
        specd_sample_key key = {.seed = 1000u + (uint64_t)i, .sequence = 3, .position = 0};
        int32_t x, tok[2], row = 0;
        uint32_t pos = (uint32_t)(n + dr.order[0]);
        key.position = pos;
        assert_int_equal(specd_sampler_sample_draft(smp, dr.logits, info->n_vocab, key, &x, &err),
                         SPECD_OK);
        specd_chain_input in = {.k = 1,
                                .draft = &x,
                                .draft_probs = q,
                                .q_vocab = info->n_vocab,
                                .target_logits = onepass,
                                .n_vocab = info->n_vocab,
                                .key = key};
        specd_chain_keys keys = {
            .n_rows = 1, .key_row = &row, .bonus_row = SPECD_CHAIN_NO_BONUS, .positions = &pos};
        specd_chain_result res = {.tokens = tok};
        assert_int_equal(specd_accept_chain_keyed(acc, &in, &keys, &res, &err), SPECD_OK);
        accepted += res.n_accepted;
        counts[tok[0]]++;
    }
    const double rate = (double)accepted / DRAWS, sd = sqrt(overlap * (1 - overlap) / DRAWS);
    const double pv = gof_pvalue(counts, pd, (int)V, DRAWS);
    fprintf(stderr, "p/q through the engine, drafter layers %d: acceptance %.3f, sum min(p, q) "
                    "%.3f; G-test of the emitted token against p^(1): p-value %.3f\n",
            drafter_layers, rate, overlap, pv);
    assert_true(fabs(rate - overlap) < 4.0 * sd + 1e-9);
    assert_true(pv > 1e-3);
    specd_accept_destroy(acc);
    specd_sampler_destroy(smp);
    free(p);
    free(q);
    free(pd);
    free(counts);
    specd_simsd_drafter_destroy(d);
    specd_context_destroy(c);
}

static void test_pq_statistics(void **s) {
    (void)s;
    pq_statistics(0);
    pq_statistics(8);
}

int main(int argc, char **argv) {
    quick = argc > 1 && !strcmp(argv[1], "quick");
    specd_error err;
    fixture_golden_prompts(N_PROMPTS, MAX_PROMPT, &prompts[0][0], n_prompts);
    fixture_source_path("artifacts/adapters/smollm2-135m-sdar", adapter, sizeof adapter);
    model = fixture_model_open();
    if (specd_lora_create(model, adapter, &lora, &err) != SPECD_OK) {
        fprintf(stderr, "adapter: %s\n", err.message);
        return 1;
    }
    info = specd_model_get_info(model);
    mask_vec = specd_lora_mask_embedding(lora, &n_embd);
    V = (size_t)info->n_vocab;
    onepass = malloc(B * V * sizeof(float));
    seq = malloc(B * V * sizeof(float));
    const struct CMUnitTest small[] = {
        cmocka_unit_test(test_one_layer_replay_exact),
        cmocka_unit_test(test_host_runs_the_target),
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self_draft_precision),
        cmocka_unit_test(test_policy_rope_ablation),
        cmocka_unit_test(test_pq_statistics),
        cmocka_unit_test(test_host_runs_the_target),
    };
    int rc = quick ? cmocka_run_group_tests(small, NULL, NULL)
                   : cmocka_run_group_tests(tests, NULL, NULL);
    free(onepass);
    free(seq);
    specd_lora_destroy(lora);
    fixture_close(model, NULL);
    return rc;
}
