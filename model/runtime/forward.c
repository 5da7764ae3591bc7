/* An extend as every backend shares it: the arguments checked, the step's token rows laid out
 * (c->tok), the backend's forward pass run (backend.h), then the cache rows committed. */
#include "model/runtime/backend.h"

#include "common/clock.h"
#include "common/status_internal.h"

#include <math.h>
#include <string.h>

static specd_status validate_seq(specd_context *c, const specd_seq_batch *s, int32_t k,
                                 specd_error *err) {
    const specd_model_info *in = &c->model->info;
    if (s->seq < 0 || s->seq >= c->p.n_seq)
        return specd_fail(err, SPECD_E_INVALID_ARG, "extend: seqs[%d].seq %d not in 0..%d", k,
                          s->seq, c->p.n_seq - 1);
    if (c->mark[s->seq])
        return specd_fail(err, SPECD_E_INVALID_ARG, "extend: seq %d given twice", s->seq);
    c->mark[s->seq] = 1;
    if (s->n_tokens < 1 || !s->tokens)
        return specd_fail(err, SPECD_E_INVALID_ARG, "extend: seqs[%d] has no tokens", k);
    const int32_t l0 = c->kv_len[s->seq];
    if (s->n_tokens > c->p.n_ctx - l0)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "extend: seq %d: %d new tokens after %d cached exceed n_ctx %d", s->seq,
                          s->n_tokens, l0, c->p.n_ctx);
    for (int32_t i = 0; i < s->n_tokens; i++) {
        if (s->tokens[i] < 0 || s->tokens[i] >= in->n_vocab)
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "extend: seq %d token[%d] = %d not in 0..%d", s->seq, i, s->tokens[i],
                              in->n_vocab - 1);
        /* positions stay below 2^24 so that (float)pos is exact, as RoPE assumes */
        if (s->pos && (s->pos[i] < 0 || s->pos[i] >= (1 << 24)))
            return specd_fail(err, SPECD_E_INVALID_ARG, "extend: seq %d pos[%d] = %d out of range",
                              s->seq, i, s->pos[i]);
        if (s->lora_gate) {
            const float gv = s->lora_gate[i];
            if (!isfinite(gv))
                return specd_fail(err, SPECD_E_NUMERIC, "extend: seq %d lora_gate[%d] not finite",
                                  s->seq, i);
            if (gv != 0.0f && !c->lora)
                return specd_fail(err, SPECD_E_STATE,
                                  "extend: seq %d lora_gate[%d] = %g but no adapter is set", s->seq,
                                  i, (double)gv);
        }
        if (s->embd && (!s->embd_rows || s->embd_rows[i]))
            for (int32_t x = 0; x < in->n_embd; x++)
                if (!isfinite(s->embd[(size_t)i * (size_t)in->n_embd + (size_t)x]))
                    return specd_fail(err, SPECD_E_NUMERIC, "extend: seq %d embd row %d not finite",
                                      s->seq, i);
        if (s->visible) {
            const uint8_t *row = s->visible + (size_t)i * (size_t)(l0 + s->n_tokens);
            int any = 0;
            for (int32_t j = 0; j < l0 + s->n_tokens && !any; j++)
                any = row[j] != 0;
            if (!any)
                return specd_fail(err, SPECD_E_INVALID_ARG,
                                  "extend: seq %d token %d sees no row (empty attention)", s->seq,
                                  i);
        }
    }
    return SPECD_OK;
}

static specd_status validate(specd_context *c, const specd_seq_batch *seqs, int32_t n_seqs,
                             const specd_extend_out *out, int32_t *n_tok, specd_error *err) {
    if (!c || !seqs) return specd_fail(err, SPECD_E_INVALID_ARG, "extend: ctx or seqs is NULL");
    if (n_seqs < 1 || n_seqs > c->p.n_seq)
        return specd_fail(err, SPECD_E_INVALID_ARG, "extend: n_seqs %d not in 1..%d", n_seqs,
                          c->p.n_seq);
    memset(c->mark, 0, (size_t)c->p.n_seq);
    int64_t total = 0;
    for (int32_t k = 0; k < n_seqs; k++) {
        SPECD_TRY(validate_seq(c, &seqs[k], k, err));
        total += seqs[k].n_tokens;
        if (total > c->p.n_batch)
            return specd_fail(err, SPECD_E_INVALID_ARG, "extend: more than n_batch %d tokens",
                              c->p.n_batch);
    }
    *n_tok = (int32_t)total;
    if (!out) return SPECD_OK;
    if (out->n_rows < 0 || out->n_rows > total)
        return specd_fail(err, SPECD_E_INVALID_ARG, "extend: n_rows %d not in 0..%lld", out->n_rows,
                          (long long)total);
    if (out->device_logits && !c->backend->device_logits)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "extend: device_logits needs a CUDA context (this one runs on the %s)",
                          c->backend->name);
    if (!out->rows && out->n_rows != total)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "extend: rows is NULL but n_rows %d != %lld new tokens", out->n_rows,
                          (long long)total);
    if (out->rows) {
        memset(c->mark, 0, (size_t)total);
        for (int32_t j = 0; j < out->n_rows; j++) {
            const int32_t r = out->rows[j];
            if (r < 0 || r >= total || c->mark[r])
                return specd_fail(err, SPECD_E_INVALID_ARG,
                                  "extend: rows[%d] = %d out of range or repeated", j, r);
            c->mark[r] = 1;
        }
    }
    return SPECD_OK;
}

/* After the forward: the new rows sit at l0..l0+n-1 of each cache; keep the ones marked for
 * commit, in order (a device's cache moves them there, which can fail). */
static specd_status commit(specd_context *c, const specd_seq_batch *seqs, int32_t n_seqs,
                           specd_error *err) {
    for (int32_t k = 0; k < n_seqs; k++) {
        const specd_seq_batch *s = &seqs[k];
        const int32_t l0 = c->kv_len[s->seq];
        if (!s->commit) {
            c->kv_len[s->seq] = l0 + s->n_tokens;
            continue;
        }
        int32_t nk = 0;
        for (int32_t i = 0; i < s->n_tokens; i++)
            if (s->commit[i]) c->out_rows[nk++] = l0 + i;
        SPECD_TRY(c->backend->kv_compact(c, s->seq, l0, nk, c->out_rows, err));
    }
    return SPECD_OK;
}

specd_status specd_context_extend(specd_context *c, const specd_seq_batch *seqs, int32_t n_seqs,
                                  const specd_extend_out *out, specd_error *err) {
    const uint64_t t_start = c && c->prof ? specd_now_ns() : 0;
    int32_t n_tok = 0;
    SPECD_TRY(validate(c, seqs, n_seqs, out, &n_tok, err));
    int32_t r = 0;
    int any_gate = 0;
    for (int32_t k = 0; k < n_seqs; k++) {
        const specd_seq_batch *s = &seqs[k];
        const int32_t l0 = c->kv_len[s->seq];
        for (int32_t i = 0; i < s->n_tokens; i++, r++) {
            rt_token *t = &c->tok[r];
            t->token = s->tokens[i];
            t->seq = s->seq;
            t->i = i;
            t->n_new = s->n_tokens;
            t->l0 = l0;
            t->pos = s->pos ? s->pos[i] : l0 + i;
            t->gate = s->lora_gate ? s->lora_gate[i] : 0.0f;
            any_gate |= t->gate != 0.0f;
            t->embd = s->embd && (!s->embd_rows || s->embd_rows[i])
                          ? s->embd + (size_t)i * (size_t)c->model->info.n_embd
                          : NULL;
            t->visible = s->visible ? s->visible + (size_t)i * (size_t)(l0 + s->n_tokens) : NULL;
            /* positions past the last visible one add nothing (validated: one is visible) */
            t->n_pos = l0 + i + 1;
            if (t->visible) {
                t->n_pos = l0 + s->n_tokens;
                while (!t->visible[t->n_pos - 1])
                    t->n_pos--;
            }
        }
    }
    rt_step st = {.c = c, .n_tok = n_tok, .any_gate = any_gate};
    if (out && out->n_rows > 0 && (out->logits || out->hidden || out->device_logits)) {
        for (int32_t j = 0; j < out->n_rows; j++)
            c->out_rows[j] = out->rows ? out->rows[j] : j;
        st.n_out = out->n_rows;
        st.out_rows = c->out_rows;
        st.logits = out->logits || out->device_logits;
        st.host_logits = out->logits;
        st.hidden = out->hidden;
        st.device_logits = out->device_logits;
    }
    if (out && out->device_logits) *out->device_logits = NULL;
    SPECD_TRY(c->backend->extend(&st, err));
    SPECD_TRY(commit(c, seqs, n_seqs, err));
    if (c->prof) rt_prof_step(c->prof, n_tok, specd_now_ns() - t_start);
    return SPECD_OK;
}

specd_status specd_context_decode(specd_context *c, int32_t seq, int32_t token, float *logits,
                                  specd_error *err) {
    specd_seq_batch s = {.seq = seq, .n_tokens = 1, .tokens = &token};
    int32_t row = 0;
    specd_extend_out o = {.n_rows = logits ? 1 : 0, .rows = &row, .logits = logits};
    return specd_context_extend(c, &s, 1, &o, err);
}
