/* The forward pass of an extend: all threads run fwd_worker over the whole graph, splitting each
 * phase by output rows/columns and meeting at a barrier between phases (ggml's scheme). Op order
 * follows llama.cpp's llm_build_llama / qwen2 / qwen3 graphs. */
#include "model/runtime/runtime_internal.h"

#include "model/runtime/cuda_backend.h"

#include "common/alloc.h"
#include "common/clock.h"
#include "common/status_internal.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/matmul_fast.h"
#include "kernels/cpu/ops.h"

#include <math.h>
#include <string.h>
#include <time.h>

typedef struct fwd_job {
    specd_context *c;
    int32_t n_tok;
    int32_t n_out; /* rows to finish (output norm, head) */
    const int32_t *out_rows;
    float *logits, *hidden; /* caller's, validated */
} fwd_job;

/* this thread's CPU time (SPECD_PROFILE=cpu) */
static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* SPECD_PROFILE: charges the time since this thread's last mark to op (pt NULL: off). */
static inline void mark(rt_prof_thread *pt, int op) {
    if (!pt) return;
    const uint64_t now = pt->cpu_time ? thread_cpu_ns() : specd_now_ns();
    pt->cur[op] += now - pt->last;
    pt->last = now;
}

/* The phase before ends as op; waiting for the other threads counts as PR_BARRIER. */
static inline void phase_end(specd_threadpool *pool, rt_prof_thread *pt, int op) {
    mark(pt, op);
    specd_threadpool_barrier(pool);
    mark(pt, PR_BARRIER);
}

/* Contiguous share [*b, *e) of n items for thread ith of nth. */
static inline void share(int64_t n, int ith, int nth, int64_t *b, int64_t *e) {
    *b = n * ith / nth;
    *e = n * (ith + 1) / nth;
}

/* Whether matrix m takes the fast kernels (kernels/cpu/matmul_fast.h): its activation rows are
 * then fast rows. Q, K and V share one quantization: their types share a vec_dot type (checked
 * at load), and every type of the Q8_0/Q8_1 family has a fast kernel, so they agree here too. */
static int fast_matrix(const specd_context *c, const rt_matrix *m) {
    return c->fast && specd_fast_row_bytes(m->type, m->n_in) != 0;
}

/* Quantizes rows [r0, r1) of x (stride ld floats) for matrix m into c->xq. */
static void quant_rows(specd_context *c, const rt_matrix *m, const float *x, int64_t ld, int64_t r0,
                       int64_t r1) {
    const int fast = fast_matrix(c, m);
    for (int64_t r = r0; r < r1; r++) {
        char *dst = (char *)c->xq + (size_t)r * c->xq_stride;
        if (fast)
            specd_fast_quantize_row(x + r * ld, m->n_in, dst, c->simd);
        else
            specd_quantize_rows(m->vtraits, m->traits->vec_dot_type, x + r * ld, ld, 1, m->n_in,
                                dst);
    }
}

/* This thread's share of y = W x for all n rows (W's output columns split across threads). */
static void matmul_share(specd_context *c, const rt_matrix *m, int64_t n, float *y, int64_t ld_y,
                         int ith, int nth) {
    int64_t b, e;
    share(m->n_out, ith, nth, &b, &e);
    if (b < e && fast_matrix(c, m))
        specd_matmul_rows_fast(m->type, m->data, m->n_in, b, e, c->xq, c->xq_stride, n, y, ld_y,
                               c->simd);
    else if (b < e)
        specd_matmul_rows(m->traits, m->type, m->data, m->n_in, b, e, c->xq, c->xq_stride, n, y,
                          ld_y, c->simd);
}

/* y += gate * (alpha / r) * B (A x) for one row, when the token's gate is non-zero. */
static void lora_row(const specd_context *c, int32_t layer, int proj, float gate, const float *x,
                     float *y, int ith) {
    const specd_lora *lo = c->lora;
    if (!lo || gate == 0.0f) return;
    const rt_lora_pair *pr = &lo->pairs[(size_t)layer * RT_N_PROJ + (size_t)proj];
    if (!pr->a) return;
    const int64_t n_in = lo->n_in[proj], n_out = lo->n_out[proj], r = lo->rank;
    float *ax = c->lora_scratch + (size_t)ith * (size_t)c->lora_rank_cap;
    for (int64_t k = 0; k < r; k++) {
        const float *ar = pr->a + k * n_in;
        float s = 0.0f;
        for (int64_t i = 0; i < n_in; i++)
            s += ar[i] * x[i];
        ax[k] = s;
    }
    const float cg = gate * lo->scale;
    for (int64_t o = 0; o < n_out; o++) {
        const float *br = pr->b + o * r;
        float s = 0.0f;
        for (int64_t k = 0; k < r; k++)
            s += br[k] * ax[k];
        y[o] += cg * s;
    }
}

/* Attention of layer l, this thread's share. Query rows that read the same cache (one
 * sequence's run of new tokens x the heads of one KV head) go through specd_attention_rows in tiles
 * of at most ATT_TILE rows, so each K and V row is converted once per tile; every row's result is
 * the same whatever the tiling. Each (run, KV head) splits into tiles of even size, at least two
 * per thread in all where there are rows enough, and a thread takes a contiguous share of them. */
/* tiles of a (run, KV head) of rows query rows: enough for ATT_TILE each, at least min_split */
static int64_t att_split(int64_t rows, int64_t min_split) {
    int64_t m = (rows + ATT_TILE - 1) / ATT_TILE;
    if (m < min_split) m = min_split;
    return m < rows ? m : rows;
}

static void attention_share(specd_context *c, int32_t l, int64_t n, float scale, float *work,
                            size_t work_floats, int ith, int nth) {
    const specd_model_info *in = &c->model->info;
    const int32_t G = in->n_head / in->n_head_kv, hd = in->head_dim;
    const int64_t NQ = (int64_t)in->n_head * hd;
    const size_t n_ctx = (size_t)c->p.n_ctx;
    float *scores = c->scores + (size_t)ith * n_ctx;
    float *probs = c->probs + (size_t)ith * c->probs_stride;
    int64_t n_runs = 0;
    for (int64_t t = 0; t < n; t++)
        n_runs += t == 0 || c->tok[t].seq != c->tok[t - 1].seq;
    const int64_t units = n_runs * in->n_head_kv;
    const int64_t min_split = (2 * (int64_t)nth + units - 1) / units;
    int64_t total = 0;
    for (int64_t t0 = 0, t1; t0 < n; t0 = t1) {
        for (t1 = t0 + 1; t1 < n && c->tok[t1].seq == c->tok[t0].seq; t1++) {
        }
        total += in->n_head_kv * att_split((t1 - t0) * G, min_split);
    }
    int64_t ib, ie, idx = 0;
    share(total, ith, nth, &ib, &ie);
    specd_attention_query rows[ATT_TILE];
    for (int64_t t0 = 0, t1; t0 < n && idx < ie; t0 = t1) {
        for (t1 = t0 + 1; t1 < n && c->tok[t1].seq == c->tok[t0].seq; t1++) {
        }
        const int64_t n_rows = (t1 - t0) * G, m = att_split(n_rows, min_split);
        const int32_t seq = c->tok[t0].seq;
        for (int32_t kvh = 0; kvh < in->n_head_kv; kvh++)
            for (int64_t k = 0; k < m; k++, idx++) {
                if (idx < ib || idx >= ie) continue;
                const int64_t q0 = n_rows * k / m, q1 = n_rows * (k + 1) / m;
                for (int64_t qi = q0; qi < q1; qi++) {
                    const int64_t r = t0 + qi / G;
                    const int64_t h = (int64_t)kvh * G + qi % G;
                    const rt_token *t = &c->tok[r];
                    rows[qi - q0] = (specd_attention_query){.q = c->q + r * NQ + h * hd,
                                                            .visible = t->visible,
                                                            .n_pos = t->n_pos,
                                                            .out = c->att + r * NQ + h * hd};
                }
                specd_attention_rows(rows, (int32_t)(q1 - q0), rt_kv_k(c, seq, l) + kvh * hd,
                                     c->kv_dim, rt_kv_vt(c, seq, l) + (size_t)kvh * hd * n_ctx,
                                     n_ctx, hd, scale, work, work_floats, scores, probs, c->simd);
            }
    }
}

static void fwd_layers(fwd_job *job, int ith, int nth, float *att_work, size_t att_work_floats,
                       rt_prof_thread *pt) {
    specd_context *c = job->c;
    const specd_model *m = c->model;
    const specd_model_info *in = &m->info;
    specd_threadpool *pool = c->pool;
    const int64_t n = job->n_tok, E = in->n_embd, F = in->n_ff, hd = in->head_dim;
    const int64_t NQ = (int64_t)in->n_head * hd, NKV = (int64_t)c->kv_dim;
    const int neox = in->arch != SPECD_ARCH_LLAMA;
    const float scale = 1.0f / sqrtf((float)hd);
    int64_t rb, re;
    share(n, ith, nth, &rb, &re); /* this thread's token rows for per-row phases */

    for (int64_t r = rb; r < re; r++) { /* token embeddings (get_rows) */
        const rt_matrix *te = &m->tok_embd;
        const size_t row = specd_dtype_row_bytes(te->type, E);
        /* token ids were validated against n_vocab */
        if (c->tok[r].embd)
            memcpy(c->x + r * E, c->tok[r].embd, (size_t)E * sizeof(float));
        else
            te->traits->to_float((const char *)te->data + (size_t)c->tok[r].token * row,
                                 c->x + r * E, E);
        specd_rope_angles(c->tok[r].pos, in->n_rot, in->rope_freq_base,
                          c->rope_cos + r * (in->n_rot / 2), c->rope_sin + r * (in->n_rot / 2));
    }
    mark(pt, PR_EMBED);
    const int32_t n_layers = c->p.n_layers > 0 ? c->p.n_layers : in->n_layer;
    for (int32_t l = 0; l < n_layers; l++) {
        const rt_layer *L = &m->layers[l];
        /* attention norm + quantize for Q/K/V (same vec_dot type for the three: checked) */
        for (int64_t r = rb; r < re; r++) {
            specd_rmsnorm_f32(c->x + r * E, L->attn_norm, c->xn + r * E, E, in->rms_eps);
        }
        mark(pt, PR_NORM);
        for (int64_t r = rb; r < re; r++)
            quant_rows(c, &L->w[RT_Q], c->xn, E, r, r + 1);
        phase_end(pool, pt, PR_QUANT);
        matmul_share(c, &L->w[RT_Q], n, c->q, NQ, ith, nth);
        matmul_share(c, &L->w[RT_K], n, c->k, NKV, ith, nth);
        matmul_share(c, &L->w[RT_V], n, c->v, NKV, ith, nth);
        phase_end(pool, pt, PR_MM_QKV);
        /* LoRA, bias, QK norm, RoPE, then the new K/V rows into the cache; each token's Q, K and
         * V are separate units of work, so that a decode's single row splits across threads */
        int64_t ub, ue;
        share(3 * n, ith, nth, &ub, &ue);
        for (int64_t u = ub; u < ue; u++) {
            const int64_t r = u / 3;
            const rt_token *t = &c->tok[r];
            const float *cs = c->rope_cos + r * (in->n_rot / 2);
            const float *sn = c->rope_sin + r * (in->n_rot / 2);
            const size_t row = (size_t)(t->l0 + t->i);
            if (u % 3 == 0) {
                float *q = c->q + r * NQ;
                lora_row(c, l, RT_Q, t->gate, c->xn + r * E, q, ith);
                if (L->bq)
                    for (int64_t i = 0; i < NQ; i++)
                        q[i] += L->bq[i];
                if (L->q_norm)
                    for (int32_t h = 0; h < in->n_head; h++)
                        specd_rmsnorm_f32(q + h * hd, L->q_norm, q + h * hd, hd, in->rms_eps);
                specd_rope_f32_simd(q, in->n_head, (int32_t)hd, in->n_rot, cs, sn, neox, c->simd);
            } else if (u % 3 == 1) {
                float *k = c->k + r * NKV;
                lora_row(c, l, RT_K, t->gate, c->xn + r * E, k, ith);
                if (L->bk)
                    for (int64_t i = 0; i < NKV; i++)
                        k[i] += L->bk[i];
                if (L->k_norm)
                    for (int32_t h = 0; h < in->n_head_kv; h++)
                        specd_rmsnorm_f32(k + h * hd, L->k_norm, k + h * hd, hd, in->rms_eps);
                specd_rope_f32_simd(k, in->n_head_kv, (int32_t)hd, in->n_rot, cs, sn, neox,
                                    c->simd);
                uint16_t *kc = rt_kv_k(c, t->seq, l) + row * c->kv_dim;
                for (int64_t i = 0; i < NKV; i++)
                    kc[i] = specd_fp32_to_fp16(k[i]);
            } else {
                float *v = c->v + r * NKV;
                lora_row(c, l, RT_V, t->gate, c->xn + r * E, v, ith);
                if (L->bv)
                    for (int64_t i = 0; i < NKV; i++)
                        v[i] += L->bv[i];
                uint16_t *vt = rt_kv_vt(c, t->seq, l) + row; /* V is stored transposed */
                for (int64_t i = 0; i < NKV; i++)
                    vt[(size_t)i * (size_t)c->p.n_ctx] = specd_fp32_to_fp16(v[i]);
            }
        }
        phase_end(pool, pt, PR_ROPE_KV);
        attention_share(c, l, n, scale, att_work, att_work_floats, ith, nth);
        phase_end(pool, pt, PR_ATTN);
        for (int64_t r = rb; r < re; r++)
            quant_rows(c, &L->w[RT_O], c->att, NQ, r, r + 1);
        phase_end(pool, pt, PR_QUANT);
        matmul_share(c, &L->w[RT_O], n, c->tmp, E, ith, nth);
        phase_end(pool, pt, PR_MM_O);
        /* residual, FFN norm, quantize for gate/up */
        for (int64_t r = rb; r < re; r++) {
            float *o = c->tmp + r * E, *x = c->x + r * E;
            lora_row(c, l, RT_O, c->tok[r].gate, c->att + r * NQ, o, ith);
            for (int64_t i = 0; i < E; i++)
                x[i] = o[i] + x[i];
            specd_rmsnorm_f32(x, L->ffn_norm, c->xn + r * E, E, in->rms_eps);
        }
        mark(pt, PR_NORM);
        for (int64_t r = rb; r < re; r++)
            quant_rows(c, &L->w[RT_GATE], c->xn, E, r, r + 1);
        phase_end(pool, pt, PR_QUANT);
        matmul_share(c, &L->w[RT_GATE], n, c->g, F, ith, nth);
        matmul_share(c, &L->w[RT_UP], n, c->u, F, ith, nth);
        phase_end(pool, pt, PR_MM_GU);
        for (int64_t r = rb; r < re; r++) {
            float *g = c->g + r * F, *u = c->u + r * F;
            lora_row(c, l, RT_GATE, c->tok[r].gate, c->xn + r * E, g, ith);
            lora_row(c, l, RT_UP, c->tok[r].gate, c->xn + r * E, u, ith);
            specd_swiglu_f32(g, u, g, F, c->simd);
        }
        mark(pt, PR_SWIGLU);
        for (int64_t r = rb; r < re; r++)
            quant_rows(c, &L->w[RT_DOWN], c->g, F, r, r + 1);
        phase_end(pool, pt, PR_QUANT);
        matmul_share(c, &L->w[RT_DOWN], n, c->tmp, E, ith, nth);
        phase_end(pool, pt, PR_MM_DOWN);
        for (int64_t r = rb; r < re; r++) {
            float *o = c->tmp + r * E, *x = c->x + r * E;
            lora_row(c, l, RT_DOWN, c->tok[r].gate, c->g + r * F, o, ith);
            for (int64_t i = 0; i < E; i++)
                x[i] = o[i] + x[i];
        }
        /* the next layer's first phase reads and writes only these rows, on this thread, so it
         * needs no barrier here; the output head's rows are split otherwise */
        if (l + 1 < n_layers)
            mark(pt, PR_NORM);
        else
            phase_end(pool, pt, PR_NORM);
    }
    if (job->n_out == 0) return;
    /* output norm and head for the requested rows only */
    int64_t ob, oe;
    share(job->n_out, ith, nth, &ob, &oe);
    for (int64_t j = ob; j < oe; j++) {
        const int64_t r = job->out_rows[j];
        float *h = c->xn + j * E; /* xn is free now: the last layer is done */
        specd_rmsnorm_f32(c->x + r * E, m->output_norm, h, E, in->rms_eps);
        if (job->hidden) memcpy(job->hidden + j * E, h, (size_t)E * sizeof(float));
    }
    mark(pt, PR_NORM);
    if (!job->logits) return;
    for (int64_t j = ob; j < oe; j++)
        quant_rows(c, &m->output, c->xn, E, j, j + 1);
    phase_end(pool, pt, PR_QUANT);
    matmul_share(c, &m->output, job->n_out, job->logits, in->n_vocab, ith, nth);
    mark(pt, PR_HEAD);
}

static void fwd_worker(void *arg, int ith, int nth) {
    fwd_job *job = arg;
    const specd_context *c = job->c;
    rt_prof_thread *pt = NULL;
    if (c->prof) {
        pt = &c->prof->th[ith];
        pt->cur = pt->ns[rt_prof_bucket(job->n_tok)];
        pt->cpu_time = c->prof->cpu_time;
        if (pt->cpu_time) {
            pt->last = thread_cpu_ns();
        } else {
            pt->last = specd_now_ns();
            pt->cur[PR_WAKE] += pt->last - c->prof->t_dispatch;
        }
    }
    fwd_layers(job, ith, nth, c->att_work + (size_t)ith * c->att_work_stride, c->att_work_stride,
               pt);
}

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
    if (out->device_logits && !c->cuda)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "extend: device_logits needs a CUDA context (this one runs on the CPU)");
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
 * commit, in order (a CUDA cache moves them on its device, which can fail). */
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
        if (c->cuda)
            SPECD_TRY(rt_cuda_kv_compact(c, s->seq, l0, nk, c->out_rows, err));
        else
            rt_kv_compact(c, s->seq, l0, nk, c->out_rows);
    }
    return SPECD_OK;
}

specd_status specd_context_extend(specd_context *c, const specd_seq_batch *seqs, int32_t n_seqs,
                                  const specd_extend_out *out, specd_error *err) {
    const uint64_t t_start = c && c->prof ? specd_now_ns() : 0;
    int32_t n_tok = 0;
    SPECD_TRY(validate(c, seqs, n_seqs, out, &n_tok, err));
    int32_t r = 0;
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
    fwd_job job = {.c = c, .n_tok = n_tok};
    if (out && out->n_rows > 0 && (out->logits || out->hidden || out->device_logits)) {
        for (int32_t j = 0; j < out->n_rows; j++)
            c->out_rows[j] = out->rows ? out->rows[j] : j;
        job.n_out = out->n_rows;
        job.out_rows = c->out_rows;
        job.logits = out->logits;
        job.hidden = out->hidden;
    }
    if (c->cuda) {
        SPECD_TRY(rt_cuda_extend(c, seqs, n_seqs, n_tok, job.n_out, job.out_rows, job.logits,
                                 job.hidden, out ? out->device_logits : NULL, err));
        return commit(c, seqs, n_seqs, err);
    }
    if (c->prof) c->prof->t_dispatch = specd_now_ns();
    specd_threadpool_run(c->pool, fwd_worker, &job);
    SPECD_TRY(commit(c, seqs, n_seqs, err));
    if (c->prof) {
        const int b = rt_prof_bucket(n_tok);
        c->prof->calls[b]++;
        c->prof->tokens[b] += (uint64_t)n_tok;
        c->prof->wall_ns[b] += specd_now_ns() - t_start;
    }
    return SPECD_OK;
}

specd_status specd_context_decode(specd_context *c, int32_t seq, int32_t token, float *logits,
                                  specd_error *err) {
    specd_seq_batch s = {.seq = seq, .n_tokens = 1, .tokens = &token};
    int32_t row = 0;
    specd_extend_out o = {.n_rows = logits ? 1 : 0, .rows = &row, .logits = logits};
    return specd_context_extend(c, &s, 1, &o, err);
}
