/* Batched steps (specd/spec_batch.h): the per-sequence step of spec_session.c over many
 * sequences, their rows packed into one logits block. */
#include "specd/spec_batch.h"

#include "common/clock.h"
#include "common/status_internal.h"
#include "session/spec_device.h"
#include "session/spec_internal.h"

#include <string.h>

specd_status specd_spec_batch_layout(specd_spec *spec, const int32_t *seqs, int32_t n_seqs,
                                     specd_batch *out, specd_error *err) {
    if (!spec || !seqs || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "spec: NULL argument");
    if (n_seqs < 1 || n_seqs > spec->params.max_seqs)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: batch of %d sequences (1..%d)",
                          n_seqs, spec->params.max_seqs);
    for (int32_t i = 0; i < n_seqs; i++) {
        spec_seq *q;
        SPECD_TRY(specd_spec_find_seq(spec, seqs[i], &q, err));
        if (q->done)
            return specd_fail(err, SPECD_E_STATE, "spec: sequence %d has finished", seqs[i]);
        for (int32_t j = 0; j < i; j++)
            if (seqs[j] == seqs[i])
                return specd_fail(err, SPECD_E_INVALID_ARG,
                                  "spec: sequence %d is listed twice in the batch", seqs[i]);
    }
    spec->n_batch = 0;
    spec->batch_t0 = specd_now_ns();
    int32_t n_tokens = 0, n_rows = 0;
    int needs_lora = 0, needs_hidden = 0, needs_embd = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        spec_seq *q = &spec->seqs[seqs[i]];
        specd_batch_seq *b = &spec->batch[i];
        specd_status st = specd_spec_seq_layout_step(spec, q, &b->layout, err);
        if (st != SPECD_OK) {
            for (int32_t j = 0; j <= i; j++) spec->seqs[seqs[j]].laid_out = 0;
            return st;
        }
        b->seq = seqs[i];
        b->token_offset = n_tokens;
        b->row_offset = n_rows;
        n_tokens += b->layout.n_tokens;
        n_rows += b->layout.n_rows;
        needs_lora |= b->layout.lora_gate != NULL;
        needs_embd |= b->layout.input_embd != NULL;
        /* a plain step's row catches a policy up (SPECD_POLICY_HIDDEN_CATCH_UP) */
        needs_hidden |= (specd_policy_flags(q->ops) & SPECD_POLICY_WANTS_HIDDEN) &&
                        (!q->plain_step || specd_policy_catches_up(q->ops)) &&
                        b->layout.n_rows > 0;
        spec->batch_gen[i] = q->step_gen;
        spec->batch_ids[i] = seqs[i];
    }
    spec->n_batch = n_seqs;
    *out = (specd_batch){.n_seqs = n_seqs, .seqs = spec->batch, .n_tokens = n_tokens,
                         .n_rows = n_rows, .needs_lora = needs_lora,
                         .needs_hidden = needs_hidden, .needs_embd = needs_embd};
    return SPECD_OK;
}

/* Feeds each verified sequence's guard its share of the batch's cost (session/batch_cost.h). */
static void observe_batch(specd_spec *spec) {
    int32_t n = spec->n_batch, rows = 0;
    uint64_t own = 0;
    for (int32_t i = 0; i < n; i++) {
        rows += spec->batch[i].layout.n_rows;
        own += spec->seqs[spec->batch[i].seq].own_ns;
    }
    uint64_t wall = specd_now_ns() - spec->batch_t0;
    double forward = wall > own ? (double)(wall - own) : 0.0; /* the host's part */
    specd_batch_cost_observe(&spec->cost, rows, forward);
    for (int32_t i = 0; i < n; i++) {
        if (spec->batch_status[i] != SPECD_OK) continue;
        spec_seq *q = &spec->seqs[spec->batch[i].seq];
        const specd_step_outcome *o = &spec->batch_out[i];
        double share = specd_batch_cost_share(&spec->cost, n, spec->batch[i].layout.n_rows,
                                              rows, forward);
        specd_adaptive_observe(&q->guard, o->n_drafted, o->n_accepted, o->n_emitted,
                               (uint64_t)share + q->own_ns);
    }
}

specd_status specd_spec_batch_verify(specd_spec *spec, const specd_logits *logits,
                                     specd_batch_result *out, specd_error *err) {
    return specd_spec_batch_verify_hidden(spec, logits, NULL, out, err);
}

specd_status specd_spec_batch_verify_hidden(specd_spec *spec, const specd_logits *logits,
                                            const specd_logits *hidden, specd_batch_result *out,
                                            specd_error *err) {
    static const specd_logits none = {0};
    if (!logits) logits = &none; /* allowed when every step is commit-only */
    if (!spec || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "spec: NULL argument");
    int32_t n = spec->n_batch;
    if (n == 0) return specd_fail(err, SPECD_E_STATE, "spec: no batch laid out");
    const specd_batch_seq *last = &spec->batch[n - 1];
    int32_t need = last->row_offset + last->layout.n_rows;
    if (need > 0 && !logits->data)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: NULL logits for %d rows", need);
    if (logits->n_rows < need)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "spec: the batch needs %d logits rows, the block has %d",
                          last->row_offset + last->layout.n_rows, logits->n_rows);
    specd_status first = SPECD_OK;
    int32_t n_failed = 0;
    /* CUDA logits: one launch decides the batch's device steps, each handed to its verify */
    specd_spec_device_decide_batch(spec, logits, spec->batch_decided);
    for (int32_t i = 0; i < n; i++) {
        const specd_batch_seq *b = &spec->batch[i];
        spec_seq *q = &spec->seqs[b->seq];
        specd_status st;
        specd_error e;
        if (!q->open || !q->laid_out || q->step_gen != spec->batch_gen[i])
            st = specd_fail(&e, SPECD_E_STATE,
                            "spec: sequence %d of the batch was verified, laid out again or "
                            "closed since", b->seq);
        else
            st = specd_spec_seq_verify_decided(spec, q, logits, hidden, b->row_offset,
                                               &spec->batch_decided[i], &spec->batch_out[i], &e);
        spec->batch_status[i] = st;
        if (st != SPECD_OK) {
            n_failed++;
            if (first == SPECD_OK) {
                first = st;
                if (err) *err = e;
            }
        }
    }
    observe_batch(spec);
    *out = (specd_batch_result){.n_seqs = n, .seq = spec->batch_ids,
                                .outcome = spec->batch_out, .status = spec->batch_status,
                                .n_failed = n_failed};
    return first;
}
