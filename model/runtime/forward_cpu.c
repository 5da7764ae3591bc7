/* The CPU backend's kernels (cpu_backend.h): every thread of the pool runs the whole recipe
 * (recipe.c) on its own rt_run, splitting each op by rows, or a matmul by output columns, and
 * meeting the others at a barrier where the recipe ends a phase (ggml's scheme). */
#include "model/runtime/cpu_backend.h"

#include "common/clock.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/matmul_fast.h"
#include "kernels/cpu/ops.h"

#include <math.h>
#include <string.h>
#include <time.h>

/* One thread's view of the step. */
typedef struct cpu_run {
    const rt_step *s;
    specd_context *c;
    int ith, nth;
    float *att_work; /* this thread's attention tile scratch */
    rt_prof_thread *pt;
} cpu_run;

static cpu_run *cpu(rt_run *r) {
    return (cpu_run *)r;
}

/* this thread's CPU time (SPECD_PROFILE=cpu) */
static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* SPECD_PROFILE: charges the time since this thread's last mark to op (pt NULL: off). */
static void mark(rt_run *r, int op) {
    rt_prof_thread *pt = cpu(r)->pt;
    if (!pt) return;
    const uint64_t now = pt->cpu_time ? thread_cpu_ns() : specd_now_ns();
    pt->cur[op] += now - pt->last;
    pt->last = now;
}

/* The phase before ends as op; waiting for the other threads counts as PR_BARRIER. */
static void sync_threads(rt_run *r, int op) {
    mark(r, op);
    specd_threadpool_barrier(cpu(r)->c->pool);
    mark(r, PR_BARRIER);
}

/* Contiguous share [*b, *e) of n items for thread ith of nth. */
static inline void share_of(int64_t n, int ith, int nth, int64_t *b, int64_t *e) {
    *b = n * ith / nth;
    *e = n * (ith + 1) / nth;
}

/* The units way + ways x row of this thread's contiguous share of ways x n: a run of rows. */
static rt_span share(rt_run *r, int32_t n, int32_t ways, int32_t way) {
    const cpu_run *t = cpu(r);
    int64_t ub, ue;
    share_of((int64_t)ways * n, t->ith, t->nth, &ub, &ue);
    /* the first row whose unit is >= ub, and the first whose unit is >= ue */
    const int64_t r0 = (ub - way + ways - 1) / ways, r1 = (ue - way + ways - 1) / ways;
    return (rt_span){(int32_t)(r0 > 0 ? r0 : 0), (int32_t)(r1 > 0 ? r1 : 0)};
}

static float *buf(const cpu_run *t, rt_buf b) {
    const specd_context *c = t->c;
    switch (b) {
    case RT_BUF_X: return c->x;
    case RT_BUF_XN: return c->xn;
    case RT_BUF_TMP: return c->tmp;
    case RT_BUF_Q: return c->q;
    case RT_BUF_K: return c->k;
    case RT_BUF_V: return c->v;
    case RT_BUF_ATT: return c->att;
    case RT_BUF_G: return c->g;
    case RT_BUF_U: return c->u;
    case RT_BUF_LOGITS: return t->s->host_logits;
    }
    return NULL;
}

static float *row(const cpu_run *t, rt_buf b, int64_t r) {
    return buf(t, b) + r * rt_buf_width(t->c, b);
}

static const rt_matrix *matrix(const specd_context *c, int32_t l, int proj) {
    return proj == RT_HEAD ? &c->model->output : &c->model->layers[l].w[proj];
}

/* Token embeddings (get_rows) or the rows' input vectors, and the rows' RoPE angles, the same
 * in every layer. */
static int embed(rt_run *r, rt_span s) {
    const cpu_run *t = cpu(r);
    specd_context *c = t->c;
    const specd_model_info *in = &c->model->info;
    const rt_matrix *te = &c->model->tok_embd;
    const int64_t E = in->n_embd;
    const size_t row_bytes = specd_dtype_row_bytes(te->type, E);
    for (int64_t i = s.r0; i < s.r1; i++) {
        /* token ids were validated against n_vocab */
        if (c->tok[i].embd)
            memcpy(c->x + i * E, c->tok[i].embd, (size_t)E * sizeof(float));
        else
            te->traits->to_float((const char *)te->data + (size_t)c->tok[i].token * row_bytes,
                                 c->x + i * E, E);
        specd_rope_angles(c->tok[i].pos, in->n_rot, in->rope_freq_base,
                          c->rope_cos + i * (in->n_rot / 2), c->rope_sin + i * (in->n_rot / 2));
    }
    return 0;
}

static int rmsnorm(rt_run *r, rt_span s, rt_buf src, rt_buf dst, int32_t l, rt_vec v,
                   int32_t n_heads) {
    const cpu_run *t = cpu(r);
    const float eps = t->c->model->info.rms_eps, *w = rt_model_vec(t->c->model, l, v);
    const int64_t hd = rt_buf_width(t->c, src) / n_heads;
    for (int64_t i = s.r0; i < s.r1; i++) {
        const float *x = row(t, src, i);
        float *y = row(t, dst, i);
        for (int32_t h = 0; h < n_heads; h++)
            specd_rmsnorm_f32(x + h * hd, w, y + h * hd, hd, eps);
    }
    return 0;
}

static int add_vec(rt_run *r, rt_span s, rt_buf dst, int32_t l, rt_vec v) {
    const cpu_run *t = cpu(r);
    const float *b = rt_model_vec(t->c->model, l, v);
    const int64_t n = rt_buf_width(t->c, dst);
    for (int64_t i = s.r0; i < s.r1; i++) {
        float *y = row(t, dst, i);
        for (int64_t j = 0; j < n; j++)
            y[j] += b[j];
    }
    return 0;
}

static int add(rt_run *r, rt_span s, rt_buf a, rt_buf dst) {
    const cpu_run *t = cpu(r);
    const int64_t n = rt_buf_width(t->c, dst);
    for (int64_t i = s.r0; i < s.r1; i++) {
        const float *x = row(t, a, i);
        float *y = row(t, dst, i);
        for (int64_t j = 0; j < n; j++)
            y[j] = x[j] + y[j];
    }
    return 0;
}

static int rope(rt_run *r, rt_span s, rt_buf b, int32_t n_heads) {
    const cpu_run *t = cpu(r);
    const specd_context *c = t->c;
    const specd_model_info *in = &c->model->info;
    const int neox = in->arch != SPECD_ARCH_LLAMA;
    const int64_t half = in->n_rot / 2;
    for (int64_t i = s.r0; i < s.r1; i++)
        specd_rope_f32_simd(row(t, b, i), n_heads, in->head_dim, in->n_rot, c->rope_cos + i * half,
                            c->rope_sin + i * half, neox, c->simd);
    return 0;
}

/* K rows as they are, V transposed (its dots in attention run along positions). */
static int store_kv(rt_run *r, rt_span s, int32_t l, rt_buf b) {
    const cpu_run *t = cpu(r);
    const specd_context *c = t->c;
    const int64_t NKV = (int64_t)c->kv_dim;
    for (int64_t i = s.r0; i < s.r1; i++) {
        const rt_token *tk = &c->tok[i];
        const size_t pos = (size_t)(tk->l0 + tk->i);
        const float *x = row(t, b, i);
        if (b == RT_BUF_K) {
            uint16_t *kc = rt_kv_k(c, tk->seq, l) + pos * c->kv_dim;
            for (int64_t j = 0; j < NKV; j++)
                kc[j] = specd_fp32_to_fp16(x[j]);
        } else {
            uint16_t *vt = rt_kv_vt(c, tk->seq, l) + pos;
            for (int64_t j = 0; j < NKV; j++)
                vt[(size_t)j * (size_t)c->p.n_ctx] = specd_fp32_to_fp16(x[j]);
        }
    }
    return 0;
}

/* Quantizes rows of src for matrix m into c->xq: fast rows where the fast numerics have a
 * kernel for m's type, llama.cpp's vec_dot rows otherwise. Q, K and V share one quantization:
 * their types share a vec_dot type (checked at load), and every type of the Q8_0/Q8_1 family
 * has a fast kernel, so they agree here too. */
static void quantize(const cpu_run *t, rt_span s, const rt_matrix *m, rt_buf src, int fast) {
    const specd_context *c = t->c;
    const int64_t ld = rt_buf_width(c, src);
    const float *x = buf(t, src);
    fast = fast && specd_fast_row_bytes(m->type, m->n_in) != 0;
    for (int64_t i = s.r0; i < s.r1; i++) {
        char *dst = (char *)c->xq + (size_t)i * c->xq_stride;
        if (fast)
            specd_fast_quantize_row(x + i * ld, m->n_in, dst, c->simd);
        else
            specd_quantize_rows(m->vtraits, m->traits->vec_dot_type, x + i * ld, ld, 1, m->n_in,
                                dst);
    }
}

/* This thread's share of y = W x for all n rows (W's output columns split across threads). */
static void matmul_share(const cpu_run *t, int32_t n, const rt_matrix *m, rt_buf dst, int fast) {
    const specd_context *c = t->c;
    int64_t b, e;
    share_of(m->n_out, t->ith, t->nth, &b, &e);
    if (b >= e) return;
    float *y = buf(t, dst);
    const int64_t ld_y = rt_buf_width(c, dst);
    if (fast && specd_fast_row_bytes(m->type, m->n_in) != 0)
        specd_matmul_rows_fast(m->type, m->data, m->n_in, b, e, c->xq, c->xq_stride, n, y, ld_y,
                               c->simd);
    else
        specd_matmul_rows(m->traits, m->type, m->data, m->n_in, b, e, c->xq, c->xq_stride, n, y,
                          ld_y, c->simd);
}

static int prepare_llama(rt_run *r, rt_span s, int32_t l, int proj, rt_buf src) {
    quantize(cpu(r), s, matrix(cpu(r)->c, l, proj), src, 0);
    return 0;
}

static int prepare_fast(rt_run *r, rt_span s, int32_t l, int proj, rt_buf src) {
    quantize(cpu(r), s, matrix(cpu(r)->c, l, proj), src, 1);
    return 0;
}

static int matmul_llama(rt_run *r, int32_t n, int32_t l, int proj, rt_buf src, rt_buf dst) {
    (void)src; /* prepare quantized it into xq */
    matmul_share(cpu(r), n, matrix(cpu(r)->c, l, proj), dst, 0);
    return 0;
}

static int matmul_fast(rt_run *r, int32_t n, int32_t l, int proj, rt_buf src, rt_buf dst) {
    (void)src;
    matmul_share(cpu(r), n, matrix(cpu(r)->c, l, proj), dst, 1);
    return 0;
}

/* y += gate * (alpha / r) * B (A x) for each row with a non-zero gate. */
static int lora(rt_run *r, rt_span s, int32_t l, int proj, rt_buf src, rt_buf dst) {
    const cpu_run *t = cpu(r);
    const specd_context *c = t->c;
    const specd_lora *lo = c->lora;
    const rt_lora_pair *pr = &lo->pairs[(size_t)l * RT_N_PROJ + (size_t)proj];
    const int64_t n_in = lo->n_in[proj], n_out = lo->n_out[proj], rank = lo->rank;
    float *ax = c->lora_scratch + (size_t)t->ith * (size_t)c->lora_rank_cap;
    for (int64_t i = s.r0; i < s.r1; i++) {
        const float gate = c->tok[i].gate;
        if (gate == 0.0f) continue;
        const float *x = row(t, src, i);
        float *y = row(t, dst, i);
        for (int64_t k = 0; k < rank; k++) {
            const float *ar = pr->a + k * n_in;
            float sum = 0.0f;
            for (int64_t j = 0; j < n_in; j++)
                sum += ar[j] * x[j];
            ax[k] = sum;
        }
        const float cg = gate * lo->scale;
        for (int64_t o = 0; o < n_out; o++) {
            const float *br = pr->b + o * rank;
            float sum = 0.0f;
            for (int64_t k = 0; k < rank; k++)
                sum += br[k] * ax[k];
            y[o] += cg * sum;
        }
    }
    return 0;
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

static int attention(rt_run *r, int32_t l) {
    const cpu_run *t = cpu(r);
    specd_context *c = t->c;
    const int ith = t->ith, nth = t->nth;
    const int64_t n = t->s->n_tok;
    const specd_model_info *in = &c->model->info;
    const int32_t G = in->n_head / in->n_head_kv, hd = in->head_dim;
    const int64_t NQ = (int64_t)in->n_head * hd;
    const size_t n_ctx = (size_t)c->p.n_ctx;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scores = c->scores + (size_t)ith * n_ctx;
    float *probs = c->probs + (size_t)ith * c->probs_stride;
    int64_t n_runs = 0;
    for (int64_t i = 0; i < n; i++)
        n_runs += i == 0 || c->tok[i].seq != c->tok[i - 1].seq;
    const int64_t units = n_runs * in->n_head_kv;
    const int64_t min_split = (2 * (int64_t)nth + units - 1) / units;
    int64_t total = 0;
    for (int64_t t0 = 0, t1; t0 < n; t0 = t1) {
        for (t1 = t0 + 1; t1 < n && c->tok[t1].seq == c->tok[t0].seq; t1++) {
        }
        total += in->n_head_kv * att_split((t1 - t0) * G, min_split);
    }
    int64_t ib, ie, idx = 0;
    share_of(total, ith, nth, &ib, &ie);
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
                    const int64_t i = t0 + qi / G;
                    const int64_t h = (int64_t)kvh * G + qi % G;
                    const rt_token *tk = &c->tok[i];
                    rows[qi - q0] = (specd_attention_query){.q = c->q + i * NQ + h * hd,
                                                            .visible = tk->visible,
                                                            .n_pos = tk->n_pos,
                                                            .out = c->att + i * NQ + h * hd};
                }
                specd_attention_rows(rows, (int32_t)(q1 - q0), rt_kv_k(c, seq, l) + kvh * hd,
                                     c->kv_dim, rt_kv_vt(c, seq, l) + (size_t)kvh * hd * n_ctx,
                                     n_ctx, hd, scale, t->att_work, c->att_work_stride, scores,
                                     probs, c->simd);
            }
    }
    return 0;
}

static int swiglu(rt_run *r, rt_span s) {
    const cpu_run *t = cpu(r);
    const int64_t F = t->c->model->info.n_ff;
    for (int64_t i = s.r0; i < s.r1; i++) {
        float *g = row(t, RT_BUF_G, i);
        specd_swiglu_f32(g, row(t, RT_BUF_U, i), g, F, t->c->simd);
    }
    return 0;
}

static int gather(rt_run *r, rt_span s, rt_buf src, rt_buf dst) {
    const cpu_run *t = cpu(r);
    const size_t bytes = (size_t)rt_buf_width(t->c, src) * sizeof(float);
    for (int64_t j = s.r0; j < s.r1; j++)
        memcpy(row(t, dst, j), row(t, src, t->s->out_rows[j]), bytes);
    return 0;
}

static int hidden(rt_run *r, rt_span s) {
    const cpu_run *t = cpu(r);
    const int64_t E = t->c->model->info.n_embd;
    if (t->s->hidden)
        for (int64_t j = s.r0; j < s.r1; j++)
            memcpy(t->s->hidden + j * E, row(t, RT_BUF_XN, j), (size_t)E * sizeof(float));
    return 0;
}

#define CPU_OPS                                                                                    \
    .share = share, .mark = mark, .sync = sync_threads, .embed = embed, .rmsnorm = rmsnorm,        \
    .add_vec = add_vec, .add = add, .rope = rope, .store_kv = store_kv, .lora = lora,              \
    .attention = attention, .swiglu = swiglu, .gather = gather, .hidden = hidden

const rt_ops rt_cpu_ops_llama = {
    .name = "cpu (llama numerics)", .prepare = prepare_llama, .matmul = matmul_llama, CPU_OPS};
const rt_ops rt_cpu_ops_fast = {
    .name = "cpu (fast numerics)", .prepare = prepare_fast, .matmul = matmul_fast, CPU_OPS};

static void worker(void *arg, int ith, int nth) {
    const rt_step *s = arg;
    specd_context *c = s->c;
    cpu_run t = {.s = s,
                 .c = c,
                 .ith = ith,
                 .nth = nth,
                 .att_work = c->att_work + (size_t)ith * c->att_work_stride};
    if (c->prof) {
        rt_prof_thread *pt = t.pt = &c->prof->th[ith];
        pt->cur = pt->ns[rt_prof_bucket(s->n_tok)];
        pt->cpu_time = c->prof->cpu_time;
        if (pt->cpu_time) {
            pt->last = thread_cpu_ns();
        } else {
            pt->last = specd_now_ns();
            pt->cur[PR_WAKE] += pt->last - c->prof->t_dispatch;
        }
    }
    (void)rt_forward_recipe(c->ops, (rt_run *)&t, s); /* the CPU's ops do not fail */
}

specd_status rt_cpu_extend(const rt_step *s, specd_error *err) {
    (void)err;
    specd_context *c = s->c;
    if (c->prof) c->prof->t_dispatch = specd_now_ns();
    specd_threadpool_run(c->pool, worker, (void *)s);
    return SPECD_OK;
}
