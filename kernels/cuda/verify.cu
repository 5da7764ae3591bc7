/* The acceptance engine on the device (kernels/cuda/verify_plan.h): one launch verifies every
 * sequence of a step from a device logits block. Block (slot, sequence) prepares the slot's key
 * row as verifier/accept/xform.c does (mask, bias, temperature, top-k, top-p, min-p) and decides
 * the target's token there: the argmax (GREEDY, T = 0) or the keyed Gumbel-max sample (COUPLED),
 * a race of z + G over the kept tokens with no sort, keyed on the sequence's stream key and the
 * slot's position, never on the block; under REJECTION it leaves the row's softmax sum instead.
 * The last block of a sequence to finish (an arrival counter) walks the chain or tree as
 * verifier/accept/accept.c's verify_walk does: GREEDY / COUPLED drafts accepted while they equal
 * the target's token; REJECTION's min(1, p / q) tests, residual and bonus draws by the engine's
 * blocked inverse CDF, the whole block reading the rows again (nothing is materialised: a
 * residual's weight is recomputed from p and the rejected siblings' q rows). */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/fixed_math.cuh"
#include "kernels/cuda/verify_plan.h"
/* The host-side checks, compiled into this file rather than listed beside it, so any build of the
 * kernel library from the .cu files alone (scripts/gpu-check's direct build) links. libspecd
 * compiles the same file as C for the host API. */
#include "kernels/cuda/verify_plan.c"

enum { VT = SPECD_CUDA_VERIFY_THREADS, SLOTS = SPECD_CUDA_VERIFY_MAX_SLOTS };
/* Slot flags: the row fails the engine's check (before any decision), or its preparation, or
 * the q row of the draft / node with the slot's index fails the engine's q check. */
enum { F_BAD = 1, F_MASKED = 2, F_PREP = 4, F_BADQ = 8 };
/* Top-p orders its candidates in chunks of at most CAP tokens; the inverse CDF sums blocks of
 * 64 tokens CB blocks at a time. */
enum { CAP = 1024, CB = 1024, MAXK = SPECD_CUDA_VERIFY_MAX_K };
static_assert(CB >= CAP, "top-p keeps a chunk's e values in the block-sum buffer");
/* Scratch words of a slot. */
enum { W_TOKEN, W_FLAGS, W_ZMAX, W_THRESH, W_THR_Z, W_THR_I, W_SUM };
/* Philox purposes (specd_rng_purpose, include/specd/sampling.h). */
enum { RNG_ACCEPT = 2, RNG_RESIDUAL = 3, RNG_BONUS = 4 };

/* The kernel's shared memory, passed to its helpers. */
struct smem {
    float sv[VT];
    int32_t si[VT];
    uint32_t hist[VT];
    int32_t sel[4];
    float f[4];
    uint32_t ckey[CAP];
    int32_t cidx[CAP];
    float sb[CB];
    int32_t sib[MAXK];   /* REJECTION: the rejected siblings so far */
    float rsum[MAXK];    /* and the residual's sum after each */
    int32_t last;
};

/* The prepared row of a slot as the engine's specd_xrow has it (what e and p need). */
struct prepared {
    float zmax;
    int thresh;
    float thr_z;
    int32_t thr_i;
    float sum; /* Z (REJECTION rows only) */
};

/* What a slot's row reads as after the engine's masking and bias, before the temperature. */
struct row_view {
    const char *row;
    int32_t dtype;
    float mask_at;
    const float *bias;
};

static __device__ __forceinline__ float raw_logit(const row_view &v, int32_t x) {
    if (v.dtype == SPECD_CUDA_LOGITS_F32) return ((const float *)v.row)[x];
    const uint16_t h = ((const uint16_t *)v.row)[x];
    if (v.dtype == SPECD_CUDA_LOGITS_F16) return specd_dev_h2f(h);
    return __uint_as_float((uint32_t)h << 16); /* bf16: the high half of an f32 */
}

/* The engine's biased logit: masked to -inf, then the bias added (l + 0 == l for the rest). */
static __device__ __forceinline__ float biased(const row_view &v, float raw, int32_t x) {
    float l = raw <= v.mask_at ? -INFINITY : raw;
    return v.bias ? __fadd_rn(l, v.bias[x]) : l;
}

static __device__ __forceinline__ float zval(float l, float t, int greedy) {
    return greedy ? l : __fdiv_rn(l, t);
}

/* Order-preserving key of a z value (equal floats, +0 and -0 included, give equal keys). */
static __device__ __forceinline__ uint32_t zkey(float z) {
    const uint32_t u = __float_as_uint(z == 0.0f ? 0.0f : z);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
static __device__ __forceinline__ float zkey_float(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* (a, ia) ranks before (b, ib): higher value, then lower index. */
static __device__ __forceinline__ int better(float a, int32_t ia, float b, int32_t ib) {
    return a > b || (a == b && ia < ib);
}

/* The block's best (value, index) pair, left in sv[0], si[0]. */
static __device__ void reduce_best(float *sv, int32_t *si, float v, int32_t i) {
    const int t = threadIdx.x;
    sv[t] = v;
    si[t] = i;
    __syncthreads();
    for (int s = VT / 2; s > 0; s /= 2) {
        if (t < s && better(sv[t + s], si[t + s], sv[t], si[t])) {
            sv[t] = sv[t + s];
            si[t] = si[t + s];
        }
        __syncthreads();
    }
}

/* The 256-lane sum of the engine's fixed order (xform.c specd_lane_sum, tree_reduce): thread j
 * holds lane j, tokens j, j + 256, ... added in order; lanes then fold as acc[j] += acc[j + s]. */
static __device__ float lane_sum(smem &m, float v) {
    const int t = threadIdx.x;
    m.sv[t] = v;
    __syncthreads();
    for (int s = VT / 2; s > 0; s /= 2) {
        if (t < s) m.sv[t] = __fadd_rn(m.sv[t], m.sv[t + s]);
        __syncthreads();
    }
    const float r = m.sv[0];
    __syncthreads();
    return r;
}

static __device__ int32_t block_count(smem &m, int32_t c) {
    const int t = threadIdx.x;
    m.si[t] = c;
    __syncthreads();
    for (int s = VT / 2; s > 0; s /= 2) {
        if (t < s) m.si[t] += m.si[t + s];
        __syncthreads();
    }
    const int32_t r = m.si[0];
    __syncthreads();
    return r;
}

/* Which tokens a cut ranks: finite z, and inside an earlier cut when there is one. */
struct keep_spec {
    int thresh;
    float thr_z;
    int32_t thr_i;
};
static __device__ __forceinline__ int above(float z, int32_t x, float thr_z, int32_t thr_i) {
    return z > thr_z || (z == thr_z && x <= thr_i);
}
static __device__ __forceinline__ int kept(const keep_spec &ks, float z, int32_t x) {
    return z != -INFINITY && (!ks.thresh || above(z, x, ks.thr_z, ks.thr_i));
}

/* The r-th largest z key (r >= 1, at most their count) among the kept tokens whose key is below
 * bound, by a radix select of four 8-bit digits. */
static __device__ uint32_t select_key(smem &m, const row_view &rv, int32_t n, float t,
                                      const keep_spec &ks, uint64_t bound, int32_t r) {
    const int tid = threadIdx.x;
    uint32_t prefix = 0, pmask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        m.hist[tid] = 0;
        __syncthreads();
        for (int32_t x = tid; x < n; x += VT) {
            const float z = zval(biased(rv, raw_logit(rv, x), x), t, 0);
            if (!kept(ks, z, x)) continue;
            const uint32_t key = zkey(z);
            if ((uint64_t)key < bound && (key & pmask) == prefix)
                atomicAdd(&m.hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            int32_t d = 255;
            for (; d > 0; d--) {
                if ((uint32_t)r <= m.hist[d]) break;
                r -= (int32_t)m.hist[d];
            }
            m.sel[0] = d;
            m.sel[1] = r;
        }
        __syncthreads();
        prefix |= (uint32_t)m.sel[0] << shift;
        pmask |= 255u << shift;
        r = m.sel[1];
        __syncthreads();
    }
    return prefix;
}

/* The index of the r-th (r >= 1) kept token, in index order, whose z key is key. */
static __device__ int32_t nth_with_key(smem &m, const row_view &rv, int32_t n, float t,
                                       const keep_spec &ks, uint32_t key, int32_t r) {
    const int tid = threadIdx.x;
    const int32_t chunk = (n + VT - 1) / VT;
    const int32_t x0 = tid * chunk, x1 = x0 + chunk < n ? x0 + chunk : n;
    uint32_t c = 0;
    for (int32_t x = x0; x < x1; x++) {
        const float z = zval(biased(rv, raw_logit(rv, x), x), t, 0);
        c += kept(ks, z, x) && zkey(z) == key;
    }
    m.hist[tid] = c;
    __syncthreads();
    if (tid == 0) {
        int32_t cum = 0, owner = 0;
        for (; owner < VT - 1; owner++) {
            if (cum + (int32_t)m.hist[owner] >= r) break;
            cum += (int32_t)m.hist[owner];
        }
        m.sel[0] = owner;
        m.sel[1] = r - cum;
    }
    __syncthreads();
    if (tid == m.sel[0]) {
        int32_t want = m.sel[1], found = x1 - 1;
        for (int32_t x = x0; x < x1; x++) {
            const float z = zval(biased(rv, raw_logit(rv, x), x), t, 0);
            if (kept(ks, z, x) && zkey(z) == key && --want == 0) {
                found = x;
                break;
            }
        }
        m.sel[2] = found;
    }
    __syncthreads();
    const int32_t found = m.sel[2];
    __syncthreads();
    return found;
}

/* Top-k cut (xform.c apply_top_k): the k-th best finite z in (z descending, index ascending)
 * order, by a radix select on the z keys and then the rank among equal z in index order. */
static __device__ void top_k_cut(smem &m, const row_view &rv, int32_t n, float t, int32_t top_k,
                                 prepared *pr) {
    const keep_spec all = {0, 0.0f, 0};
    const uint32_t key = select_key(m, rv, n, t, all, (uint64_t)1 << 32, top_k);
    const int32_t r = m.sel[1]; /* rank of the cut among the tokens of its key */
    __syncthreads();
    pr->thresh = 1;
    pr->thr_z = zkey_float(key);
    pr->thr_i = nth_with_key(m, rv, n, t, all, key, r);
}

/* How many kept tokens have a z key below bound. */
static __device__ int32_t count_below(smem &m, const row_view &rv, int32_t n, float t,
                                      const keep_spec &ks, uint64_t bound) {
    int32_t c = 0;
    for (int32_t x = threadIdx.x; x < n; x += VT) {
        const float z = zval(biased(rv, raw_logit(rv, x), x), t, 0);
        c += kept(ks, z, x) && (uint64_t)zkey(z) < bound;
    }
    return block_count(m, c);
}

/* The lowest key of the next chunk when more than CAP kept tokens are below bound: the CAP-th
 * largest key kc when the chunk [kc, bound) holds at most CAP tokens, else kc + 1 (the chunk
 * stops above kc's run, which would overflow it), unless kc's run alone exceeds CAP: then kc,
 * with *tie_run its length. */
static __device__ uint32_t chunk_floor(smem &m, const row_view &rv, int32_t n, float t,
                                       const keep_spec &ks, uint64_t bound, int *tie_run) {
    const uint32_t kc = select_key(m, rv, n, t, ks, bound, CAP);
    int32_t ge = 0, eq = 0;
    for (int32_t x = threadIdx.x; x < n; x += VT) {
        const float z = zval(biased(rv, raw_logit(rv, x), x), t, 0);
        if (!kept(ks, z, x)) continue;
        const uint32_t key = zkey(z);
        ge += key >= kc && (uint64_t)key < bound;
        eq += key == kc;
    }
    const int32_t n_ge = block_count(m, ge), n_eq = block_count(m, eq);
    if (n_ge <= CAP) return kc;
    if (n_ge > n_eq) return kc + 1;
    *tie_run = n_eq;
    return kc;
}

/* Adds a run of tie_run tokens of z key lo (one e value) to the running sum m.f[0] one by one:
 * the rank in the run (from 1) at which it reaches target, or 0. */
static __device__ int32_t add_tie_run(smem &m, uint32_t lo, int tie_run, float zmax,
                                      float target) {
    if (threadIdx.x == 0) {
        const float e = specd_dev_fast_exp_neg(__fsub_rn(zkey_float(lo), zmax));
        float cum = m.f[0];
        int32_t hit = 0;
        for (int32_t j = 1; j <= tie_run && !hit; j++) {
            cum = __fadd_rn(cum, e);
            if (cum >= target) hit = j;
        }
        m.f[0] = cum;
        m.sel[3] = hit;
    }
    __syncthreads();
    const int32_t hit = m.sel[3];
    __syncthreads();
    return hit;
}

/* Gathers the kept tokens whose z key is in [lo, bound) into the chunk (m.ckey, m.cidx), in no
 * particular order; returns their count. */
static __device__ int32_t gather_chunk(smem &m, const row_view &rv, int32_t n, float t,
                                       const keep_spec &ks, uint32_t lo, uint64_t bound) {
    if (threadIdx.x == 0) m.sel[2] = 0;
    __syncthreads();
    for (int32_t x = threadIdx.x; x < n; x += VT) {
        const float z = zval(biased(rv, raw_logit(rv, x), x), t, 0);
        if (!kept(ks, z, x)) continue;
        const uint32_t key = zkey(z);
        if (key >= lo && (uint64_t)key < bound) {
            const int32_t at = atomicAdd(&m.sel[2], 1);
            m.ckey[at] = key;
            m.cidx[at] = x;
        }
    }
    __syncthreads();
    return m.sel[2];
}

/* Sorts the chunk's cn (key, index) pairs by key descending, then index ascending: a bitonic
 * sort over the next power of two, the pairs past cn padded to sort last. */
static __device__ void sort_chunk(smem &m, int32_t cn) {
    const int tid = threadIdx.x;
    int32_t width = 1;
    while (width < cn) width *= 2;
    for (int32_t j = cn + tid; j < width; j += VT) {
        m.ckey[j] = 0; /* below every finite z's key: sorts last */
        m.cidx[j] = 0x7fffffff;
    }
    __syncthreads();
    for (int32_t size = 2; size <= width; size *= 2)
        for (int32_t stride = size / 2; stride > 0; stride /= 2) {
            for (int32_t i = tid; i < width / 2; i += VT) {
                const int32_t a = 2 * stride * (i / stride) + i % stride, b = a + stride;
                const int first_better_a = (a & size) == 0;
                const int b_first = m.ckey[b] > m.ckey[a] ||
                                    (m.ckey[b] == m.ckey[a] && m.cidx[b] < m.cidx[a]);
                if (b_first == first_better_a) {
                    const uint32_t k = m.ckey[a];
                    const int32_t ix = m.cidx[a];
                    m.ckey[a] = m.ckey[b];
                    m.cidx[a] = m.cidx[b];
                    m.ckey[b] = k;
                    m.cidx[b] = ix;
                }
            }
            __syncthreads();
        }
}

/* Adds the sorted chunk's e values to the running sum m.f[0] in order (e in parallel, the sum
 * itself sequential): the chunk index at which it reaches target, or -1. */
static __device__ int32_t add_chunk(smem &m, int32_t cn, float zmax, float target) {
    for (int32_t j = threadIdx.x; j < cn; j += VT)
        m.sb[j] = specd_dev_fast_exp_neg(__fsub_rn(zkey_float(m.ckey[j]), zmax));
    __syncthreads();
    if (threadIdx.x == 0) {
        float cum = m.f[0];
        int32_t hit = -1;
        for (int32_t j = 0; j < cn; j++) {
            cum = __fadd_rn(cum, m.sb[j]);
            if (cum >= target) {
                hit = j;
                break;
            }
        }
        m.f[0] = cum;
        m.sel[3] = hit;
    }
    __syncthreads();
    return m.sel[3];
}

/* Top-p cut (xform.c apply_top_p): over the tokens the top-k cut kept, Z' = the 256-lane sum of
 * e = exp(z - zmax), then e added one by one in (z descending, index ascending) order until the
 * running sum reaches top_p * Z'; that token is the cut. The running sum is the engine's
 * sequential float sum, so the order is reproduced exactly, but only as far as the crossing and
 * without sorting the row: the next (up to) CAP tokens below the last chunk's lowest key are
 * picked by a radix select on the z keys and sorted in shared memory (a run of equal z larger
 * than CAP is added without sorting: its tokens share e, and the crossing's rank among them is
 * found in index order). A peaked row crosses in its first chunk. No crossing (rounding): the
 * top-k cut stands, as in the engine. */
static __device__ void top_p_cut(smem &m, const row_view &rv, int32_t n, float t, float top_p,
                                 prepared *pr) {
    const int tid = threadIdx.x;
    const keep_spec ks = {pr->thresh, pr->thr_z, pr->thr_i};
    const float zmax = pr->zmax;
    float acc = 0.0f;
    for (int32_t x = tid; x < n; x += VT) {
        const float z = zval(biased(rv, raw_logit(rv, x), x), t, 0);
        if (kept(ks, z, x)) acc = __fadd_rn(acc, specd_dev_fast_exp_neg(__fsub_rn(z, zmax)));
    }
    const float target = __fmul_rn(top_p, lane_sum(m, acc));
    if (tid == 0) m.f[0] = 0.0f; /* the running sum (thread 0's) */
    uint64_t bound = (uint64_t)1 << 32;
    for (;;) {
        const int32_t left = count_below(m, rv, n, t, ks, bound);
        if (left == 0) return; /* never crossed */
        int tie_run = 0;
        const uint32_t lo = left > CAP ? chunk_floor(m, rv, n, t, ks, bound, &tie_run) : 0;
        if (tie_run) {
            const int32_t hit = add_tie_run(m, lo, tie_run, zmax, target);
            if (hit) {
                const int32_t at = nth_with_key(m, rv, n, t, ks, lo, hit);
                pr->thresh = 1;
                pr->thr_z = zkey_float(lo);
                pr->thr_i = at;
                return;
            }
            bound = lo;
            continue;
        }
        /* the chunk [lo, bound), sorted by (z descending, index ascending), added in order */
        const int32_t cn = gather_chunk(m, rv, n, t, ks, lo, bound);
        sort_chunk(m, cn);
        const int32_t hit = add_chunk(m, cn, zmax, target);
        if (hit >= 0) {
            pr->thresh = 1;
            pr->thr_z = zkey_float(m.ckey[hit]);
            pr->thr_i = m.cidx[hit];
            __syncthreads();
            return;
        }
        __syncthreads();
        bound = lo;
    }
}

/* e of a prepared row (xform.c e_of; 0 outside the kept set): what p and the draws weigh. */
static __device__ __forceinline__ float e_at(const row_view &rv, const prepared &pr, float t,
                                             float min_p, int32_t x) {
    const float z = zval(biased(rv, raw_logit(rv, x), x), t, 0);
    if (pr.thresh && !above(z, x, pr.thr_z, pr.thr_i)) return 0.0f;
    const float e = specd_dev_fast_exp_neg(__fsub_rn(z, pr.zmax));
    if (min_p > 0.0f && !(e >= min_p)) return 0.0f;
    return e;
}

/* specd_sampling_uniform: word 0 of the Philox block {index, position, sequence, purpose}. */
static __device__ __forceinline__ float keyed_uniform(const specd_cuda_verify_seq *sq,
                                                      uint32_t pos, uint32_t purpose,
                                                      uint32_t index) {
    uint32_t w[4] = {index, pos, sq->sequence, purpose};
    specd_dev_philox(w, (uint32_t)sq->seed, (uint32_t)(sq->seed >> 32));
    return specd_dev_uniform(w[0]);
}

/* One Philox block of a slot's SAMPLE stream: words of tokens 4g .. 4g + 3. */
static __device__ __forceinline__ void sample_words(const specd_cuda_verify_seq *sq, uint32_t pos,
                                                    uint32_t g, uint32_t w[4]) {
    w[0] = g;
    w[1] = pos;
    w[2] = sq->sequence;
    w[3] = 0; /* SPECD_RNG_SAMPLE */
    specd_dev_philox(w, (uint32_t)sq->seed, (uint32_t)(sq->seed >> 32));
}

/* A thread's running best of the keyed race. */
struct race_state {
    float best;
    int32_t best_i;
};

/* Folds tokens 4g .. 4g + 3 (z values, -inf past the row) into the race: score z + G of each
 * kept token, higher score then lower index wins. Kept: above the top-k cut when thresh, and
 * e = exp(z - zmax) nonzero and >= min_p when filtering (xform.c e_of). Tokens that cannot reach
 * the best are skipped without Philox or logarithms (pure skips: the winner is the same). */
static __device__ __forceinline__ void race4(const specd_cuda_verify_seq *sq, uint32_t pos,
                                             int32_t g, const float z[4], int thresh,
                                             float thr_z, int32_t thr_i, float min_p, float zmax,
                                             race_state *rs) {
    int live = 0;
    for (int j = 0; j < 4; j++) live |= !(__fadd_rn(z[j], SPECD_DEV_GUMBEL_MAX) < rs->best);
    if (!live) return;
    const int filtered = thresh || min_p > 0.0f;
    uint32_t w[4];
    sample_words(sq, pos, (uint32_t)g, w);
    for (int j = 0; j < 4; j++) {
        const int32_t x = 4 * g + j;
        if (__fadd_rn(z[j], SPECD_DEV_GUMBEL_MAX) < rs->best) continue;
        if (filtered) {
            if (thresh && !(z[j] > thr_z || (z[j] == thr_z && x <= thr_i))) continue;
            const float e = specd_dev_fast_exp_neg(__fsub_rn(z[j], zmax));
            if (min_p > 0.0f && !(e >= min_p)) continue;
            if (e == 0.0f) continue;
        }
        /* G <= -ln(1 - u) <= ln2 (24 - floor(log2 d)), d = (1 - u) 2^24 an odd integer
         * (verifier/accept/row_ops.c fold8): a token below the best by more than that bound plus
         * a 1/64 margin cannot win, and skips its two logarithms. */
        const uint32_t d = 0x00ffffffu - ((w[j] >> 9) << 1);
        const uint32_t ex = (__float_as_uint((float)d) >> 23) & 0xffu;
        const float ub = __fmul_rn((float)(151 - (int32_t)ex), 0.69314719f);
        if (__fadd_rn(__fadd_rn(z[j], ub), 1.0f / 64.0f) < rs->best) continue;
        const float sc = __fadd_rn(z[j], specd_dev_gumbel(specd_dev_uniform(w[j])));
        if (better(sc, x, rs->best, rs->best_i)) {
            rs->best = sc;
            rs->best_i = x;
        }
    }
}

/* A weight function over the row of a slot: e itself (m = 0, the bonus draw), or (m >= 1) the
 * residual after m rejected siblings, as accept.c's residual_update leaves it:
 * res_1 = max(0, e / Z - q_1), res_i = max(0, res_(i-1) / rsum_(i-1) - q_i); q one-hot at the
 * sibling's draft without q rows. */
struct weights {
    row_view rv;
    prepared pr;
    float t, min_p;
    int32_t m;
    const specd_cuda_verify_seq *sq;
    const smem *sm;
    __device__ float at(int32_t y) const {
        const float e = e_at(rv, pr, t, min_p, y);
        if (m == 0) return e;
        float r = __fdiv_rn(e, pr.sum);
        for (int32_t i = 0; i < m; i++) {
            if (i > 0) r = __fdiv_rn(r, sm->rsum[i - 1]);
            const int32_t c = sm->sib[i];
            const float qy = sq->draft_probs ? sq->draft_probs[(size_t)c * (size_t)sq->q_stride + (size_t)y]
                                             : (y == sq->draft[c] ? 1.0f : 0.0f);
            const float d = __fsub_rn(r, qy);
            r = d > 0.0f ? d : 0.0f;
        }
        return r;
    }
};

/* Block sum of the inverse CDF (row_ops.c bsum_body): lane j of 8 adds tokens 64b + j, + 8, ...
 * in order, then lanes fold j += j + 4, j += j + 2, j += j + 1. */
static __device__ float block_sum(const weights &w, int32_t b, int32_t n) {
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const int32_t x0 = b * 64, x1 = x0 + 64 < n ? x0 + 64 : n;
    for (int32_t x = x0; x < x1; x++) acc[(x - x0) & 7] = __fadd_rn(acc[(x - x0) & 7], w.at(x));
    float l4[4];
    for (int j = 0; j < 4; j++) l4[j] = __fadd_rn(acc[j], acc[j + 4]);
    l4[0] = __fadd_rn(l4[0], l4[2]);
    l4[1] = __fadd_rn(l4[1], l4[3]);
    return __fadd_rn(l4[0], l4[1]);
}

/* xform.c specd_cdf_draw: block sums in chunks of CB (the total in block order), the block where
 * the running sum first passes u * total, then the token inside it; -1 when every weight is 0. */
static __device__ int32_t cdf_draw(smem &m, const weights &w, int32_t n, float u) {
    const int tid = threadIdx.x;
    const int32_t nb = (n + 63) / 64;
    if (tid == 0) m.f[1] = 0.0f;
    for (int32_t c0 = 0; c0 < nb; c0 += CB) {
        const int32_t c1 = c0 + CB < nb ? c0 + CB : nb;
        for (int32_t b = c0 + tid; b < c1; b += VT) m.sb[b - c0] = block_sum(w, b, n);
        __syncthreads();
        if (tid == 0) {
            float total = m.f[1];
            for (int32_t b = c0; b < c1; b++) total = __fadd_rn(total, m.sb[b - c0]);
            m.f[1] = total;
        }
        __syncthreads();
    }
    const float total = m.f[1];
    __syncthreads();
    if (!(total > 0.0f)) return -1;
    const float target = __fmul_rn(u, total);
    if (tid == 0) {
        m.f[2] = 0.0f; /* cum */
        m.sel[3] = -1; /* the block found */
    }
    for (int32_t c0 = 0; c0 < nb; c0 += CB) {
        const int32_t c1 = c0 + CB < nb ? c0 + CB : nb;
        if (nb > CB) { /* one chunk: its sums are still there */
            __syncthreads();
            for (int32_t b = c0 + tid; b < c1; b += VT) m.sb[b - c0] = block_sum(w, b, n);
        }
        __syncthreads();
        if (tid == 0) {
            float cum = m.f[2];
            for (int32_t b = c0; b < c1; b++) {
                const float next = __fadd_rn(cum, m.sb[b - c0]);
                if (!(next > target)) {
                    cum = next;
                    continue;
                }
                m.sel[3] = b;
                break;
            }
            m.f[2] = cum;
        }
        __syncthreads();
        if (m.sel[3] >= 0) break;
    }
    const int32_t found = m.sel[3];
    __syncthreads();
    if (found >= 0) {
        if (tid == 0) {
            const int32_t x0 = found * 64, x1 = x0 + 64 < n ? x0 + 64 : n;
            const float rest = __fsub_rn(target, m.f[2]);
            float s = 0.0f;
            int32_t last = -1, tok = -2;
            for (int32_t x = x0; x < x1 && tok == -2; x++) {
                const float wx = w.at(x);
                if (!(wx > 0.0f)) continue;
                s = __fadd_rn(s, wx);
                last = x;
                if (s > rest) tok = x;
            }
            m.sel[2] = tok == -2 ? last : tok;
        }
        __syncthreads();
        const int32_t tok = m.sel[2];
        __syncthreads();
        return tok;
    }
    /* u * total rounded up to total: the last token of positive weight */
    int32_t hi = -1;
    for (int32_t x = tid; x < n; x += VT)
        if (w.at(x) > 0.0f) hi = x;
    m.si[tid] = hi;
    __syncthreads();
    for (int st = VT / 2; st > 0; st /= 2) {
        if (tid < st && m.si[tid + st] > m.si[tid]) m.si[tid] = m.si[tid + st];
        __syncthreads();
    }
    const int32_t tok = m.si[0];
    __syncthreads();
    return tok;
}

/* accept.c check_q on q row c: entries in [0, 1] summing (256 lanes) to 1 within 1e-3, and the
 * drafted token's q above 0. */
static __device__ int q_row_bad(smem &m, const specd_cuda_verify_seq *sq, int32_t c, int32_t n) {
    const float *q = sq->draft_probs + (size_t)c * (size_t)sq->q_stride;
    float acc = 0.0f;
    int bad = 0;
    for (int32_t x = threadIdx.x; x < n; x += VT) {
        const float v = q[x];
        bad |= !(v >= 0.0f && v <= 1.0f);
        acc = __fadd_rn(acc, v);
    }
    const float sum = lane_sum(m, acc);
    const int32_t n_bad = block_count(m, bad);
    return n_bad > 0 || !(fabsf(__fsub_rn(sum, 1.0f)) <= 1e-3f) || !(q[sq->draft[c]] > 0.0f);
}

static __device__ __forceinline__ int32_t parent_of(const specd_cuda_verify_seq *sq, int32_t c) {
    return sq->tree ? sq->parent[c] : c - 1;
}

/* The first child of node v (-1: the root) at or after index from, or -1. */
static __device__ __forceinline__ int32_t next_child(const specd_cuda_verify_seq *sq, int32_t v,
                                                     int32_t from) {
    for (int32_t c = from; c < sq->k; c++)
        if (parent_of(sq, c) == v) return c;
    return -1;
}

static __device__ prepared slot_prepared(const volatile int32_t *w) {
    prepared p;
    p.zmax = __uint_as_float((uint32_t)w[W_ZMAX]);
    p.thresh = w[W_THRESH];
    p.thr_z = __uint_as_float((uint32_t)w[W_THR_Z]);
    p.thr_i = w[W_THR_I];
    p.sum = __uint_as_float((uint32_t)w[W_SUM]);
    return p;
}

/* REJECTION's walk (accept.c verify_walk) by the whole block: at each node the children are
 * tested in index order with min(1, r(x) / q(x)) against the keyed ACCEPT uniform of the child's
 * index; after the last rejection the correction is drawn from the residual (RESIDUAL, or p by
 * BONUS when the residual is empty), at a leaf the bonus token from p (BONUS). */
static __device__ void rejection_walk(smem &m, const specd_cuda_verify_seq *sq,
                                      const volatile int32_t *vs, const char *logits,
                                      int32_t dtype, int64_t stride, int32_t n, float mask_at,
                                      specd_cuda_verify_out *o) {
    const int tid = threadIdx.x;
    const size_t es = dtype == SPECD_CUDA_LOGITS_F32 ? 4 : 2;
    const float t = sq->temperature, tau1 = __fadd_rn(1.0f, sq->relaxed_tau);
    int32_t v = -1, na = 0;
    for (;;) {
        const int32_t s = v + 1;
        if (sq->row[s] < 0) break; /* a chain without a bonus slot ends here */
        const volatile int32_t *sw = vs + (size_t)s * SPECD_CUDA_VERIFY_SLOT_WORDS;
        if (sw[W_FLAGS] & F_PREP) {
            if (tid == 0) {
                o->status = SPECD_CUDA_VERIFY_BAD_PREPARE;
                o->bad_row = sq->row[s];
            }
            return;
        }
        const row_view rv = {logits + (size_t)sq->row[s] * (size_t)stride * es, dtype, mask_at,
                             sq->bias};
        weights w = {rv, slot_prepared(sw), t, sq->min_p, 0, sq, &m};
        const uint32_t pos = sq->pos[s];
        int32_t c = next_child(sq, v, 0), next_v = -1;
        if (c < 0) { /* a leaf: the bonus token from p */
            const int32_t y = cdf_draw(m, w, n, keyed_uniform(sq, pos, RNG_BONUS, 0));
            if (tid == 0) o->tokens[na] = y;
            break;
        }
        for (; c >= 0; c = next_child(sq, v, c + 1)) {
            const int32_t x = sq->draft[c];
            const float rx = w.m ? __fdiv_rn(w.at(x), m.rsum[w.m - 1]) : __fdiv_rn(w.at(x), w.pr.sum);
            const float qx = sq->draft_probs ? sq->draft_probs[(size_t)c * (size_t)sq->q_stride + (size_t)x]
                                             : 1.0f;
            const float num = sq->relaxed_tau > 0.0f ? __fmul_rn(rx, tau1) : rx;
            const float ratio = __fdiv_rn(num, qx);
            const float pr = ratio < 1.0f ? ratio : 1.0f;
            if (keyed_uniform(sq, pos, RNG_ACCEPT, (uint32_t)c) < pr) {
                next_v = c;
                break;
            }
            /* the residual after this rejection, and its lane sum */
            if (tid == 0) m.sib[w.m] = c;
            __syncthreads();
            w.m++;
            float acc = 0.0f;
            for (int32_t y = tid; y < n; y += VT) acc = __fadd_rn(acc, w.at(y));
            const float rs = lane_sum(m, acc);
            if (tid == 0) m.rsum[w.m - 1] = rs;
            __syncthreads();
        }
        if (next_v < 0) {
            int32_t y = cdf_draw(m, w, n, keyed_uniform(sq, pos, RNG_RESIDUAL, 0));
            if (y < 0) { /* empty residual: p by the BONUS uniform */
                w.m = 0;
                y = cdf_draw(m, w, n, keyed_uniform(sq, pos, RNG_BONUS, 0));
            }
            if (tid == 0) o->tokens[na] = y;
            break;
        }
        if (tid == 0) {
            o->path[na] = next_v;
            o->tokens[na] = sq->draft[next_v];
        }
        na++;
        v = next_v;
    }
    if (tid == 0) {
        o->n_accepted = na;
        o->n_emitted = na + (sq->row[v + 1] >= 0 ? 1 : 0);
    }
}

/* A thread's share of pass 1 over its groups of four tokens. */
struct scan_part {
    int bad;       /* a NaN or +inf logit */
    int ovf;       /* a biased logit of +inf */
    int32_t nfin;  /* tokens of finite z */
    float rawmax;  /* the largest raw logit */
    float lmin;    /* the smallest finite biased logit */
    float zbest;   /* the best z, and its index (the lowest on ties) */
    int32_t ibest;
};

/* Pass 1 over tokens 4g .. 4g + 3: the engine's row check and preparation (xform.c
 * specd_row_check, prepare) on each, and their z values (-inf past the row). */
static __device__ __forceinline__ void scan_group(const row_view &rv, int32_t n, float t,
                                                  int greedy, int32_t g, float z[4],
                                                  scan_part *sp) {
    for (int j = 0; j < 4; j++) {
        const int32_t x = 4 * g + j;
        if (x >= n) {
            z[j] = -INFINITY;
            continue;
        }
        const float raw = raw_logit(rv, x);
        sp->bad |= (raw != raw) | (raw == INFINITY);
        sp->rawmax = raw > sp->rawmax ? raw : sp->rawmax;
        const float l = biased(rv, raw, x);
        sp->ovf |= l == INFINITY;
        if (l > -INFINITY && l < sp->lmin) sp->lmin = l;
        z[j] = zval(l, t, greedy);
        sp->nfin += z[j] != -INFINITY;
        if (z[j] > sp->zbest) {
            sp->zbest = z[j];
            sp->ibest = x;
        }
    }
}

/* The block's OR of the threads' bits. */
static __device__ uint32_t block_or(smem &m, uint32_t bits) {
    const int t = threadIdx.x;
    m.hist[t] = bits;
    __syncthreads();
    for (int s = VT / 2; s > 0; s /= 2) {
        if (t < s) m.hist[t] |= m.hist[t + s];
        __syncthreads();
    }
    const uint32_t r = m.hist[0];
    __syncthreads();
    return r;
}

/* The engine's verdict on a row before anything is decided from it: a NaN or +inf logit
 * (F_BAD), every token masked (F_MASKED), or a preparation that fails (F_PREP: a biased logit of
 * +inf, no finite z, or, under a temperature, a z range that overflows); 0 when it is sound. */
static __device__ __forceinline__ int32_t row_flags(uint32_t bits, float rmax, float mask_at,
                                                    float zmax, float row_lmin, float t,
                                                    int greedy) {
    if (bits & 1u) return F_BAD;
    if (rmax <= mask_at) return F_MASKED;
    if ((bits & 2u) || zmax == -INFINITY) return F_PREP;
    if (!greedy && (!isfinite(zmax) || !isfinite(__fdiv_rn(row_lmin, t)))) return F_PREP;
    return 0;
}

/* What pass 1 leaves of a slot's row, the same in every thread of the block. */
struct row_scan {
    float zmax;    /* the best z and its index: the argmax */
    int32_t imax;
    int32_t n_fin; /* tokens of finite z */
    int32_t flags; /* row_flags */
};

/* Pass 1: the engine's row check and preparation, in groups of four tokens (one Philox block);
 * when race_now, the keyed race over every finite z runs in the same pass (into rs). */
static __device__ row_scan scan_row(smem &m, const specd_cuda_verify_seq *sq, const row_view &rv,
                                    int32_t n, uint32_t pos, int greedy, int race_now,
                                    race_state *rs) {
    const int tid = threadIdx.x;
    const float t = sq->temperature;
    scan_part sp = {0, 0, 0, -INFINITY, INFINITY, -INFINITY, 0x7fffffff};
    for (int32_t g = tid; 4 * g < n; g += VT) {
        float z[4];
        scan_group(rv, n, t, greedy, g, z, &sp);
        if (race_now) race4(sq, pos, g, z, 0, 0.0f, 0, 0.0f, 0.0f, rs);
    }
    row_scan r;
    reduce_best(m.sv, m.si, sp.zbest, sp.ibest);
    r.zmax = m.sv[0];
    r.imax = m.si[0];
    __syncthreads();
    reduce_best(m.sv, m.si, sp.rawmax, 0);
    const float rmax = m.sv[0];
    __syncthreads();
    const uint32_t bits = block_or(m, (uint32_t)(sp.bad | (sp.ovf << 1)));
    reduce_best(m.sv, m.si, -sp.lmin, 0);
    const float row_lmin = -m.sv[0];
    __syncthreads();
    r.n_fin = block_count(m, sp.nfin);
    r.flags = row_flags(bits, rmax, rv.mask_at, r.zmax, row_lmin, t, greedy);
    return r;
}

/* The race's winner over the block: the best score, then the lowest index. */
static __device__ int32_t race_winner(smem &m, const race_state &rs) {
    reduce_best(m.sv, m.si, rs.best, rs.best_i);
    const int32_t token = m.si[0];
    __syncthreads();
    return token;
}

/* Pass 2's keyed sample over the tokens a cut row keeps: the race starts at the maximum's score,
 * as the CPU's does. */
static __device__ int32_t keyed_sample(smem &m, const specd_cuda_verify_seq *sq,
                                       const row_view &rv, int32_t n, uint32_t pos,
                                       const prepared &pr, int32_t imax) {
    const float t = sq->temperature;
    uint32_t w[4];
    sample_words(sq, pos, (uint32_t)imax >> 2, w);
    race_state rs = {__fadd_rn(pr.zmax, specd_dev_gumbel(specd_dev_uniform(w[imax & 3]))), imax};
    for (int32_t g = threadIdx.x; 4 * g < n; g += VT) {
        float z[4];
        for (int j = 0; j < 4; j++) {
            const int32_t x = 4 * g + j;
            z[j] = x < n ? zval(biased(rv, raw_logit(rv, x), x), t, 0) : -INFINITY;
        }
        race4(sq, pos, g, z, pr.thresh, pr.thr_z, pr.thr_i, sq->min_p, pr.zmax, &rs);
    }
    return race_winner(m, rs);
}

/* REJECTION: the prepared row's softmax sum Z, in the engine's lane order. */
static __device__ float softmax_sum(smem &m, const row_view &rv, const prepared &pr, float t,
                                    float min_p, int32_t n) {
    float acc = 0.0f;
    for (int32_t x = threadIdx.x; x < n; x += VT) acc = __fadd_rn(acc, e_at(rv, pr, t, min_p, x));
    return lane_sum(m, acc);
}

/* A slot's block decides its row (xform.c specd_row_check, prepare): *flags (row_flags), *pr the
 * prepared row, and the target's token there, the argmax (GREEDY, T = 0) or the keyed sample;
 * under REJECTION the argmax stands in and pr->sum holds the row's softmax sum. */
static __device__ int32_t decide_slot(smem &m, const specd_cuda_verify_seq *sq,
                                      const row_view &rv, int32_t n, uint32_t pos, int greedy,
                                      int rejection, int32_t *flags, prepared *pr) {
    const float t = sq->temperature, min_p = sq->min_p;
    const int cut_k = sq->top_k > 0 && sq->top_k < n;
    const int cut_p = sq->top_p < 1.0f;
    /* Without top-k, top-p and min-p the keyed sample is the argmax of z + G over every finite z
     * whatever zmax is, so the race runs in pass 1 from -inf (the CPU starts it at the maximum's
     * score: the same winner) and the row is read once. */
    const int race_now = !greedy && !rejection && !cut_k && !cut_p && !(min_p > 0.0f);
    race_state rs = {-INFINITY, 0x7fffffff};
    const row_scan sc = scan_row(m, sq, rv, n, pos, greedy, race_now, &rs);
    const prepared whole = {sc.zmax, 0, 0.0f, 0, 1.0f};
    *pr = whole;
    *flags = sc.flags;
    if (race_now) return race_winner(m, rs);
    if (sc.flags != 0 || greedy) return sc.imax;
    /* Pass 2 (top-k, top-p, min-p, REJECTION): the cuts need the whole row. */
    if (cut_k && sc.n_fin >= sq->top_k) top_k_cut(m, rv, n, t, sq->top_k, pr);
    if (cut_p) top_p_cut(m, rv, n, t, sq->top_p, pr);
    if (rejection) {
        pr->sum = softmax_sum(m, rv, *pr, t, min_p, n);
        return sc.imax;
    }
    return keyed_sample(m, sq, rv, n, pos, *pr, sc.imax);
}

/* Publishes a slot's decision in its scratch words (slot) and counts its arrival (count): true,
 * in every thread, in the block of the sequence's last slot to arrive, which then walks it. */
static __device__ int publish_slot(smem &m, const specd_cuda_verify_seq *sq, int32_t *slot,
                                   uint32_t *count, int32_t token, int32_t flags,
                                   const prepared &pr) {
    if (threadIdx.x == 0) {
        slot[W_TOKEN] = token;
        slot[W_FLAGS] = flags;
        slot[W_ZMAX] = (int32_t)__float_as_uint(pr.zmax);
        slot[W_THRESH] = pr.thresh;
        slot[W_THR_Z] = (int32_t)__float_as_uint(pr.thr_z);
        slot[W_THR_I] = pr.thr_i;
        slot[W_SUM] = (int32_t)__float_as_uint(pr.sum);
        __threadfence();
        const uint32_t n_part = (uint32_t)sq->k + (sq->row[sq->k] >= 0 ? 1u : 0u);
        m.last = atomicAdd(count, 1u) == n_part - 1;
    }
    __syncthreads();
    return m.last;
}

/* The engine's checks before any decision, over the slots (vs) the sequence's blocks published:
 * every row read (F_BAD, F_MASKED), then every q row (F_BADQ). Thread 0 writes the status; true
 * when the walk may go on. */
static __device__ int sequence_sound(const specd_cuda_verify_seq *sq, const volatile int32_t *vs,
                                     specd_cuda_verify_out *o) {
    const int32_t k = sq->k;
    int32_t status = SPECD_CUDA_VERIFY_OK, bad_row = -1;
    for (int32_t j = 0; j <= k && status == SPECD_CUDA_VERIFY_OK; j++) {
        if (sq->row[j] < 0) continue;
        if (vs[(size_t)j * SPECD_CUDA_VERIFY_SLOT_WORDS + W_FLAGS] & (F_BAD | F_MASKED)) {
            status = SPECD_CUDA_VERIFY_BAD_ROW;
            bad_row = sq->row[j];
        }
    }
    for (int32_t j = 0; j < k && status == SPECD_CUDA_VERIFY_OK; j++) {
        if (vs[(size_t)j * SPECD_CUDA_VERIFY_SLOT_WORDS + W_FLAGS] & F_BADQ) {
            status = SPECD_CUDA_VERIFY_BAD_Q;
            bad_row = j;
        }
    }
    if (threadIdx.x == 0) {
        o->status = status;
        o->bad_row = bad_row;
    }
    return status == SPECD_CUDA_VERIFY_OK;
}

/* GREEDY and COUPLED's walk (accept.c verify_walk), by one thread: from the root, each slot's
 * token is emitted and the child whose draft equals it accepted, until none does (the token was
 * the correction, or a leaf's bonus) or the chain ends without a bonus slot. */
static __device__ void token_walk(const specd_cuda_verify_seq *sq, const volatile int32_t *vs,
                                  specd_cuda_verify_out *o) {
    int32_t v = -1, na = 0;
    for (;;) {
        const int32_t j = v + 1;
        if (sq->row[j] < 0) break; /* no bonus slot: the walk ends at its last accepted draft */
        const volatile int32_t *sw = vs + (size_t)j * SPECD_CUDA_VERIFY_SLOT_WORDS;
        if (sw[W_FLAGS] & F_PREP) {
            o->status = SPECD_CUDA_VERIFY_BAD_PREPARE;
            o->bad_row = sq->row[j];
            return;
        }
        const int32_t tok = sw[W_TOKEN];
        o->tokens[na] = tok;
        int32_t next_v = -1;
        for (int32_t c = next_child(sq, v, 0); c >= 0 && next_v < 0; c = next_child(sq, v, c + 1))
            if (sq->draft[c] == tok) next_v = c;
        if (next_v < 0) break;
        o->path[na] = next_v;
        na++;
        v = next_v;
    }
    o->n_accepted = na;
    o->n_emitted = na + (sq->row[v + 1] >= 0 ? 1 : 0);
}

/* Block (slot s, sequence q): decide the slot's row, publish it; the sequence's last block to
 * arrive checks the sequence and walks it. */
static __global__ void verify_kernel(const char *logits, int32_t dtype, int64_t stride,
                                     int32_t n, float mask_at,
                                     const specd_cuda_verify_seq *seqs, int32_t *slots,
                                     uint32_t *counts, specd_cuda_verify_out *out) {
    __shared__ smem m;
    const int32_t q = (int32_t)blockIdx.y, s = (int32_t)blockIdx.x;
    const specd_cuda_verify_seq *sq = &seqs[q];
    const int32_t k = sq->k;
    if (s > k || sq->row[s] < 0) return; /* past this sequence's slots, or no bonus slot */
    const size_t es = dtype == SPECD_CUDA_LOGITS_F32 ? 4 : 2;
    const row_view rv = {logits + (size_t)sq->row[s] * (size_t)stride * es, dtype, mask_at,
                         sq->bias};
    const int greedy = sq->rule == SPECD_CUDA_VERIFY_GREEDY || sq->temperature == 0.0f;
    /* a plain step (no draft) is the keyed sample under every rule, as the host's is */
    const int rejection = sq->rule == SPECD_CUDA_VERIFY_REJECTION && !greedy && k > 0;
    int32_t flags;
    prepared pr;
    const int32_t token = decide_slot(m, sq, rv, n, sq->pos[s], greedy, rejection, &flags, &pr);
    /* The engine checks every q row it is given before it decides anything, under every rule
     * (only REJECTION reads them); slot s checks the q row of draft (node) s. */
    if (sq->draft_probs && s < k && q_row_bad(m, sq, s, n))
        flags |= F_BADQ;
    int32_t *slot = slots + ((size_t)q * SLOTS + (size_t)s) * SPECD_CUDA_VERIFY_SLOT_WORDS;
    if (!publish_slot(m, sq, slot, &counts[q], token, flags, pr)) return;
    __threadfence();
    const volatile int32_t *vs = slots + (size_t)q * SLOTS * SPECD_CUDA_VERIFY_SLOT_WORDS;
    specd_cuda_verify_out *o = &out[q];
    if (!sequence_sound(sq, vs, o)) return;
    if (rejection)
        rejection_walk(m, sq, vs, logits, dtype, stride, n, mask_at, o);
    else if (threadIdx.x == 0)
        token_walk(sq, vs, o);
}

extern "C" int specd_cuda_verify(const specd_cuda_verify_args *a, void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (specd_cuda_check_verify(a, why, why_size) != SPECD_CUDA_OK) return SPECD_CUDA_E_ARGUMENT;
    char *scr = (char *)a->scratch;
    specd_cuda_verify_seq *seqs = (specd_cuda_verify_seq *)scr;
    int32_t *slots = (int32_t *)(scr + specd_cuda_verify_scratch_slots_offset(a->n_seqs));
    uint32_t *counts = (uint32_t *)(scr + specd_cuda_verify_scratch_counts_offset(a->n_seqs));
    cudaStream_t st = SPECD_CUDA_STREAM(stream);
    cudaError_t e = cudaMemcpyAsync(seqs, a->seqs, (size_t)a->n_seqs * sizeof *seqs,
                                    cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess) e = cudaMemsetAsync(counts, 0, (size_t)a->n_seqs * sizeof *counts, st);
    if (e != cudaSuccess) return (int)e;
    const dim3 grid((unsigned)specd_cuda_verify_grid_slots(a), (unsigned)a->n_seqs);
    verify_kernel<<<grid, VT, 0, st>>>((const char *)a->logits, a->dtype, a->row_stride,
                                        a->n_vocab, a->mask_at, seqs, slots, counts, a->out);
    return specd_cuda_launch_status();
}
