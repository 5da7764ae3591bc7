/* specd's runtime (CPU or CUDA) as the host engine of a spec session (specd/spec_runtime.h). */
#include "specd/spec_runtime.h"

#include "common/alloc.h"
#include "common/clock.h"
#include "common/status_internal.h"
#include "session/spec_internal.h"

#include <string.h>

/* The prompt minus its last token into the cache; with hidden (a policy that wants the prompt's
 * hidden states) each chunk's rows are handed to it. */
static specd_status prefill(specd_spec *spec, int32_t seq, specd_context *ctx, int32_t kv_seq,
                            const int32_t *prompt, int64_t n, int32_t n_batch, float *hidden,
                            specd_error *err) {
    for (int64_t done = 0; done < n;) {
        int32_t chunk = (int32_t)(n - done < n_batch ? n - done : n_batch);
        specd_seq_batch b = {.seq = kv_seq, .n_tokens = chunk, .tokens = prompt + done};
        specd_extend_out out = {.n_rows = chunk, .hidden = hidden};
        SPECD_TRY(specd_context_extend(ctx, &b, 1, hidden ? &out : NULL, err));
        if (hidden) SPECD_TRY(specd_spec_seq_prefill_hidden(spec, seq, hidden, done, chunk, err));
        done += chunk;
    }
    return SPECD_OK;
}

/* Verifies the step with the rows' hidden states for a policy that reads them. */
static specd_status verify_with_hidden(specd_spec *spec, int32_t seq, const float *logits,
                                       const float *hidden, int32_t n_rows, int32_t n_vocab,
                                       specd_step_outcome *o, specd_error *err) {
    spec_seq *q = NULL;
    SPECD_TRY(specd_spec_find_seq(spec, seq, &q, err));
    specd_logits lg = {.data = logits, .row_stride = n_vocab, .n_rows = n_rows,
                       .dtype = SPECD_DTYPE_F32, .device = SPECD_DEVICE_HOST};
    specd_logits hd = {.data = hidden, .row_stride = spec->params.n_embd, .n_rows = n_rows,
                       .dtype = SPECD_DTYPE_F32, .device = SPECD_DEVICE_HOST};
    SPECD_TRY(specd_spec_seq_verify_step(spec, q, n_rows > 0 ? &lg : NULL, &hd, 0, o, err));
    specd_adaptive_observe(&q->guard, o->n_drafted, o->n_accepted, o->n_emitted,
                           specd_now_ns() - q->t_step);
    return SPECD_OK;
}

specd_status specd_spec_run(specd_spec *spec, int32_t seq, specd_context *ctx, int32_t kv_seq,
                            specd_tokens_fn on_tokens, void *user, specd_run_stats *stats,
                            specd_error *err) {
    if (!spec || !ctx || !stats) return specd_fail(err, SPECD_E_INVALID_ARG, "run: NULL argument");
    int64_t n_prompt;
    const int32_t *prompt = specd_spec_seq_prompt(spec, seq, &n_prompt);
    if (!prompt) return specd_fail(err, SPECD_E_INVALID_ARG, "run: sequence %d is not open", seq);
    int32_t n_vocab = specd_model_get_info(specd_context_model(ctx))->n_vocab;
    int32_t n_batch = specd_context_n_batch(ctx);
    int32_t max_rows = specd_spec_max_step_rows(spec);
    if (n_batch < max_rows)
        return specd_fail(err, SPECD_E_INVALID_ARG, "run: context n_batch %d < %d rows a step may have",
                          n_batch, max_rows);
    spec_seq *q = NULL;
    SPECD_TRY(specd_spec_find_seq(spec, seq, &q, err));
    int wants_hidden = (specd_policy_flags(q->ops) & SPECD_POLICY_WANTS_HIDDEN) != 0;
    int32_t n_embd = specd_model_get_info(specd_context_model(ctx))->n_embd;
    if (wants_hidden && spec->params.n_embd != n_embd)
        return specd_fail(err, SPECD_E_MISMATCH,
                          "run: policy %s reads hidden states of width %d; the model's are %d",
                          q->ops->name, spec->params.n_embd, n_embd);
    memset(stats, 0, sizeof *stats);
    stats->n_prompt = n_prompt;
    /* A CUDA target's logits stay on the device and the step is verified there (the session
     * copies them to the host only for what its device path does not take). A policy that reads
     * hidden states gets host rows of both. */
    const int on_device = specd_context_device(ctx) == SPECD_DEVICE_CUDA && !wants_hidden;

    float *logits = specd_alloc_array((size_t)max_rows * (size_t)n_vocab, sizeof(float));
    int32_t *keep = specd_alloc_array((size_t)max_rows, sizeof(int32_t));
    /* hidden rows for a step or a prefill chunk (n_batch >= max_rows, checked above) */
    float *hidden =
        wants_hidden ? specd_alloc_array((size_t)n_batch * (size_t)n_embd, sizeof(float)) : NULL;
    if (!logits || !keep || (wants_hidden && !hidden)) {
        specd_free(logits);
        specd_free(keep);
        specd_free(hidden);
        return specd_fail(err, SPECD_E_NOMEM, "run: out of memory for logits");
    }
    specd_status st = specd_context_kv_truncate(ctx, kv_seq, 0, err);
    uint64_t t0 = specd_now_ns();
    float *pf_hidden = specd_spec_seq_wants_prefill_hidden(spec, seq) ? hidden : NULL;
    if (st == SPECD_OK)
        st = prefill(spec, seq, ctx, kv_seq, prompt, n_prompt - 1, n_batch, pf_hidden, err);
    uint64_t t1 = specd_now_ns();
    stats->prefill_ns = t1 - t0;

    while (st == SPECD_OK && !specd_spec_seq_done(spec, seq)) {
        specd_step_layout lay;
        uint64_t p0 = specd_now_ns();
        if ((st = specd_spec_seq_layout(spec, seq, &lay, err)) != SPECD_OK) break;
        if ((st = specd_context_set_lora(ctx, lay.lora, err)) != SPECD_OK) break;
        stats->prepare_ns += specd_now_ns() - p0;
        int32_t kv_before = specd_context_kv_len(ctx, kv_seq);
        specd_seq_batch b = specd_step_seq_batch(&lay, kv_seq);
        /* a remote verifier reads host logits from its shared buffer: write them there */
        float *shared = on_device ? NULL : specd_spec_verifier_logits(spec);
        float *step_logits =
            shared && lay.n_rows <= specd_spec_max_draft(spec) + 1 ? shared : logits;
        const float *device_logits = NULL;
        specd_extend_out out = {.n_rows = lay.n_rows, .rows = lay.rows,
                                .logits = on_device ? NULL : step_logits, .hidden = hidden,
                                .device_logits = on_device ? &device_logits : NULL};
        uint64_t f0 = specd_now_ns();
        st = specd_context_extend(ctx, &b, 1, lay.n_rows > 0 ? &out : NULL, err);
        stats->forward_ns += specd_now_ns() - f0;
        if (st != SPECD_OK) break;
        specd_step_outcome o;
        uint64_t v0 = specd_now_ns();
        specd_logits dev = {.data = device_logits, .row_stride = n_vocab, .n_rows = lay.n_rows,
                            .dtype = SPECD_DTYPE_F32, .device = SPECD_DEVICE_CUDA};
        if (on_device && lay.n_rows > 0)
            st = specd_spec_seq_verify_logits(spec, seq, &dev, &o, err);
        else
            st = wants_hidden ? verify_with_hidden(spec, seq, step_logits, hidden, lay.n_rows,
                                                   n_vocab, &o, err)
                              : specd_spec_seq_verify(spec, seq, step_logits, &o, err);
        if (st != SPECD_OK) break;
        uint64_t v1 = specd_now_ns();
        stats->verify_ns += v1 - v0;
        for (int32_t i = 0; i < o.n_keep; i++) keep[i] = kv_before + o.keep[i];
        if ((st = specd_context_kv_keep(ctx, kv_seq, kv_before, o.n_keep, keep, err)) != SPECD_OK)
            break;
        stats->trim_ns += specd_now_ns() - v1;
        stats->n_steps++;
        stats->n_emitted += o.n_emitted;
        if (on_tokens && o.n_emitted > 0) on_tokens(o.emitted, o.n_emitted, user);
    }
    stats->decode_ns = specd_now_ns() - t1;
    specd_context_set_lora(ctx, NULL, NULL); /* the adapter belongs to the policy */
    specd_free(logits);
    specd_free(keep);
    specd_free(hidden);
    return st;
}
