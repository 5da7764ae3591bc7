#include "policy/simsd_replay.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "policy/sdar_layout.h"
#include "policy/simsd_layout.h"

#include <math.h>
#include <string.h>

enum { MAXR = 2 * SPECD_SIMSD_MAX_B + 1 };

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
    if (b < 1 || b > SPECD_SIMSD_MAX_B || in->n < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "simsd replay: block %d, history %lld", b,
                          (long long)in->n);
    rows r = {0};
    uint8_t *vis = specd_alloc_array(MAXR, (size_t)n_cached + MAXR);
    float *tmp = specd_alloc_array((size_t)b, V * sizeof(float));
    if (in->mask_vec) r.embd = specd_alloc_array(MAXR, (size_t)in->n_embd * sizeof(float));
    specd_status st = SPECD_OK;
    if (!vis || !tmp || (in->mask_vec && !r.embd))
        st = specd_fail(err, SPECD_E_NOMEM, "simsd replay: out of memory");
    const specd_simsd_draft *d = in->draft;
    int32_t out_rows[SPECD_SIMSD_MAX_B];
    if (st == SPECD_OK && onepass) {
        int32_t pos[2 * SPECD_SIMSD_MAX_B];
        specd_simsd_positions(pos, first, b, in->rope_copy);
        put(&r, in, 0, in->history[in->n - 1], n_cached, 0.0f);
        for (int32_t i = 0; i < b; i++) {
            put(&r, in, 1 + i, d->token[i], pos[i], 1.0f);
            put(&r, in, 1 + b + i, -1, pos[b + i], 1.0f);
        }
        specd_simsd_visible(vis, n_cached, 1, b, d->tau);
        /* the D~ rows in slot order, reordered by draft step below */
        for (int32_t i = 0; i < b; i++)
            out_rows[i] = 1 + b + i;
        st = run(in, &r, 1 + 2 * b, vis, b, out_rows, tmp, err);
        for (int32_t k = 0; st == SPECD_OK && k < b; k++)
            memcpy(onepass + (size_t)k * V, tmp + (size_t)d->order[k] * V, V * sizeof(float));
    }
    for (int32_t k = 0; st == SPECD_OK && sequential && k < b; k++) {
        put(&r, in, 0, in->history[in->n - 1], n_cached, 0.0f);
        for (int32_t i = 0; i < b; i++)
            put(&r, in, 1 + i, d->tau[i] <= k ? d->token[i] : -1, first + i, 1.0f);
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
        kl += exp(lp) * (lp - lq);
    }
    if (top1_agree) *top1_agree = ap == aq;
    return kl;
}
