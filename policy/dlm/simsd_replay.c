#include "policy/dlm/simsd_replay.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "policy/dlm/sdar_layout.h"
#include "policy/dlm/simsd_layout.h"

#include <math.h>
#include <string.h>

enum { MAXR = SPECD_SIMSD_MAX_ROWS + 1 };

typedef struct rows {
    int32_t tokens[MAXR], pos[MAXR];
    float gate[MAXR];
    uint8_t embd_rows[MAXR], keep[MAXR];
    float *embd;
} rows;

static void put(rows *r, const specd_simsd_replay_input *in, int32_t i, int32_t token,
                int32_t pos, float gate) {
    r->tokens[i] = token < 0 ? in->mask_id : token;
    r->pos[i] = pos;
    r->gate[i] = gate;
    r->keep[i] = 0;
    r->embd_rows[i] = token < 0 && in->mask_vec;
    if (token < 0 && in->mask_vec)
        memcpy(r->embd + (size_t)i * (size_t)in->n_embd, in->mask_vec,
               (size_t)in->n_embd * sizeof(float));
}

static specd_status run(const specd_simsd_replay_input *in, rows *r, int32_t n_tok,
                        const uint8_t *vis, int32_t n_out, const int32_t *out_rows, float *logits,
                        specd_error *err) {
    specd_seq_batch bt = {.seq = 0,
                          .n_tokens = n_tok,
                          .tokens = r->tokens,
                          .pos = r->pos,
                          .visible = vis,
                          .lora_gate = in->use_lora ? r->gate : NULL,
                          .commit = r->keep,
                          .embd = in->mask_vec ? r->embd : NULL,
                          .embd_rows = in->mask_vec ? r->embd_rows : NULL};
    specd_extend_out eo = {.n_rows = n_out, .rows = out_rows, .logits = logits};
    return specd_context_extend(in->target, &bt, 1, &eo, err);
}

specd_status specd_simsd_replay(const specd_simsd_replay_input *in, float *onepass,
                                float *sequential, specd_error *err) {
    const int32_t b = in->b, n_cached = (int32_t)(in->n - 1), first = (int32_t)in->n;
    const size_t V = (size_t)in->n_vocab;
    const specd_simsd_draft *d = in->draft;
    if (b < 1 || b > SPECD_SIMSD_MAX_B || in->n < 1 || d->gamma < 1 || d->gamma > b)
        return specd_fail(err, SPECD_E_INVALID_ARG, "simsd replay: block %d, history %lld", b,
                          (long long)in->n);
    int32_t block[SPECD_SIMSD_MAX_B];
    for (int32_t i = 0; i < b; i++)
        block[i] = in->block ? in->block[i] : -1;
    rows r = {0};
    uint8_t *vis = specd_alloc_array(MAXR, (size_t)n_cached + MAXR);
    float *tmp = specd_alloc_array((size_t)b, V * sizeof(float));
    if (in->mask_vec) r.embd = specd_alloc_array(MAXR, (size_t)in->n_embd * sizeof(float));
    specd_status st = SPECD_OK;
    if (!vis || !tmp || (in->mask_vec && !r.embd))
        st = specd_fail(err, SPECD_E_NOMEM, "simsd replay: out of memory");
    if (st == SPECD_OK && onepass) {
        specd_simsd_row br[SPECD_SIMSD_MAX_ROWS];
        const int32_t n_br = specd_simsd_rows(b, first, block, d->tau, d->token, in->rope_copy, br);
        put(&r, in, 0, in->history[in->n - 1], n_cached, 0.0f);
        int32_t out_rows[SPECD_SIMSD_MAX_B], slot_of[SPECD_SIMSD_MAX_B], n_out = 0;
        for (int32_t k = 0; k < n_br; k++) {
            put(&r, in, 1 + k, br[k].token, br[k].pos, 1.0f);
            if (br[k].token < 0 && d->tau[br[k].slot] > 0) { /* a drafted slot's D~ */
                slot_of[n_out] = br[k].slot;
                out_rows[n_out++] = 1 + k;
            }
        }
        specd_simsd_visible(vis, n_cached, 1, br, n_br);
        st = run(in, &r, 1 + n_br, vis, n_out, out_rows, tmp, err);
        for (int32_t k = 0; st == SPECD_OK && k < n_out; k++)
            memcpy(onepass + (size_t)(d->tau[slot_of[k]] - 1) * V, tmp + (size_t)k * V,
                   V * sizeof(float));
    }
    for (int32_t k = 0; st == SPECD_OK && sequential && k < d->gamma; k++) {
        put(&r, in, 0, in->history[in->n - 1], n_cached, 0.0f);
        for (int32_t i = 0; i < b; i++) {
            const int32_t t = block[i] >= 0 ? block[i] : d->tau[i] > 0 && d->tau[i] <= k ? d->token[i] : -1;
            put(&r, in, 1 + i, t, first + i, 1.0f);
        }
        specd_sdar_visible(vis, n_cached, 1, b);
        const int32_t row = 1 + d->order[k];
        st = run(in, &r, 1 + b, vis, 1, &row, sequential + (size_t)k * V, err);
    }
    specd_free(vis);
    specd_free(tmp);
    specd_free(r.embd);
    return st;
}

double specd_simsd_kl_logits(const float *p, const float *q, int32_t n_vocab, int *top1_agree) {
    double mp = -INFINITY, mq = -INFINITY, zp = 0.0, zq = 0.0, kl = 0.0;
    int32_t ap = 0, aq = 0;
    for (int32_t v = 0; v < n_vocab; v++) {
        if (p[v] > mp) mp = p[v], ap = v;
        if (q[v] > mq) mq = q[v], aq = v;
    }
    for (int32_t v = 0; v < n_vocab; v++)
        zp += exp((double)p[v] - mp), zq += exp((double)q[v] - mq);
    const double lzp = log(zp), lzq = log(zq);
    for (int32_t v = 0; v < n_vocab; v++) {
        const double lp = (double)p[v] - mp - lzp, lq = (double)q[v] - mq - lzq;
        if (exp(lp) > 0.0) kl += exp(lp) * (lp - lq); /* 0 log 0 = 0, also at p = -inf */
    }
    if (top1_agree) *top1_agree = ap == aq;
    return kl;
}
