/* The acceptance engine on the device (kernels/cuda/verify_plan.h): one launch verifies every
 * sequence of a step from a device logits block. Block (slot, sequence) prepares the slot's key
 * row as verifier/accept/xform.c does (mask, bias, temperature, top-k, min-p) and decides the
 * target's token there: the argmax (GREEDY, T = 0) or the keyed Gumbel-max sample (COUPLED), a
 * race of z + G over the kept tokens with no sort, keyed on the sequence's stream key and the
 * slot's position, never on the block. The last block of a sequence to finish (an arrival
 * counter) walks the chain: drafts accepted while they equal the target's token, then the
 * correction or the bonus token, as specd_accept_chain_keyed does. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/fixed_math.cuh"
#include "kernels/cuda/verify_plan.h"
/* The host-side checks, compiled into this file rather than listed beside it, so any build of the
 * kernel library from the .cu files alone (scripts/gpu-check's direct build) links. libspecd
 * compiles the same file as C for the host API. */
#include "kernels/cuda/verify_plan.c"

enum { VT = SPECD_CUDA_VERIFY_THREADS, SLOTS = SPECD_CUDA_VERIFY_MAX_SLOTS };
/* Slot flags: the row fails the engine's check (before any decision), or its preparation. */
enum { F_BAD = 1, F_MASKED = 2, F_PREP = 4 };

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

/* Top-k cut (xform.c apply_top_k): the k-th best finite z in (z descending, index ascending)
 * order, by a radix select on the z keys and then the rank among equal z in index order. */
static __device__ void top_k_cut(const row_view &rv, int32_t n, float t, int32_t top_k,
                                 uint32_t *hist, int32_t *sel, float *thr_z, int32_t *thr_i) {
    const int tid = threadIdx.x;
    uint32_t prefix = 0, pmask = 0;
    int32_t r = top_k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist[tid] = 0;
        __syncthreads();
        for (int32_t x = tid; x < n; x += VT) {
            const float z = zval(biased(rv, raw_logit(rv, x), x), t, 0);
            if (z == -INFINITY) continue;
            const uint32_t key = zkey(z);
            if ((key & pmask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            int32_t d = 255;
            for (; d > 0; d--) {
                if ((uint32_t)r <= hist[d]) break;
                r -= (int32_t)hist[d];
            }
            sel[0] = d;
            sel[1] = r;
        }
        __syncthreads();
        prefix |= (uint32_t)sel[0] << shift;
        pmask |= 255u << shift;
        r = sel[1];
        __syncthreads();
    }
    /* r: rank of the cut among the tokens whose z equals the cut's, in index order */
    const float cz = zkey_float(prefix);
    const int32_t chunk = (n + VT - 1) / VT;
    const int32_t x0 = tid * chunk, x1 = x0 + chunk < n ? x0 + chunk : n;
    uint32_t c = 0;
    for (int32_t x = x0; x < x1; x++) c += zval(biased(rv, raw_logit(rv, x), x), t, 0) == cz;
    hist[tid] = c;
    __syncthreads();
    if (tid == 0) {
        int32_t cum = 0, owner = 0;
        for (; owner < VT - 1; owner++) {
            if (cum + (int32_t)hist[owner] >= r) break;
            cum += (int32_t)hist[owner];
        }
        sel[0] = owner;
        sel[1] = r - cum;
    }
    __syncthreads();
    if (tid == sel[0]) {
        int32_t want = sel[1], found = x1 - 1;
        for (int32_t x = x0; x < x1; x++)
            if (zval(biased(rv, raw_logit(rv, x), x), t, 0) == cz && --want == 0) {
                found = x;
                break;
            }
        *thr_i = found;
        *thr_z = cz;
    }
    __syncthreads();
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

static __global__ void verify_kernel(const char *logits, int32_t dtype, int64_t stride,
                                     int32_t n, float mask_at,
                                     const specd_cuda_verify_seq *seqs, int32_t *slots,
                                     uint32_t *counts, specd_cuda_verify_out *out) {
    __shared__ float sv[VT];
    __shared__ int32_t si[VT];
    __shared__ uint32_t hist[VT];
    __shared__ int32_t sel[2];
    __shared__ float cut_z;
    __shared__ int32_t cut_i;
    __shared__ int32_t last;
    const int32_t q = (int32_t)blockIdx.y, s = (int32_t)blockIdx.x;
    const specd_cuda_verify_seq *sq = &seqs[q];
    const int32_t k = sq->k;
    if (s > k || sq->row[s] < 0) return; /* past this sequence's slots, or no bonus slot */
    const int tid = threadIdx.x;
    const int32_t row = sq->row[s];
    const size_t es = dtype == SPECD_CUDA_LOGITS_F32 ? 4 : 2;
    const row_view rv = {logits + (size_t)row * (size_t)stride * es, dtype, mask_at, sq->bias};
    const int greedy = sq->rule == SPECD_CUDA_VERIFY_GREEDY || sq->temperature == 0.0f;
    const float t = sq->temperature;

    /* Pass 1: the engine's row check and preparation (xform.c specd_row_check, prepare), in
     * groups of four tokens (one Philox block). Without top-k and min-p the keyed sample is the
     * argmax of z + G over every finite z whatever zmax is, so the race runs in this same pass
     * from -inf (the CPU starts it at the maximum's score: the same winner) and the row is read
     * once. */
    const float min_p = sq->min_p;
    const int cut_k = sq->top_k > 0 && sq->top_k < n;
    const int race_now = !greedy && !cut_k && !(min_p > 0.0f);
    const uint32_t pos = sq->pos[s];
    int bad = 0, ovf = 0;
    int32_t nfin = 0;
    float rawmax = -INFINITY, lmin = INFINITY, zbest = -INFINITY;
    int32_t ibest = 0x7fffffff;
    race_state rs = {-INFINITY, 0x7fffffff};
    for (int32_t g = tid; 4 * g < n; g += VT) {
        float z[4];
        for (int j = 0; j < 4; j++) {
            const int32_t x = 4 * g + j;
            if (x >= n) {
                z[j] = -INFINITY;
                continue;
            }
            const float raw = raw_logit(rv, x);
            bad |= (raw != raw) | (raw == INFINITY);
            rawmax = raw > rawmax ? raw : rawmax;
            const float l = biased(rv, raw, x);
            ovf |= l == INFINITY;
            if (l > -INFINITY && l < lmin) lmin = l;
            z[j] = zval(l, t, greedy);
            nfin += z[j] != -INFINITY;
            if (z[j] > zbest) {
                zbest = z[j];
                ibest = x;
            }
        }
        if (race_now) race4(sq, pos, g, z, 0, 0.0f, 0, 0.0f, 0.0f, &rs);
    }
    reduce_best(sv, si, zbest, ibest);
    const float zmax = sv[0];
    const int32_t imax = si[0];
    __syncthreads();
    reduce_best(sv, si, rawmax, 0);
    const float rmax = sv[0];
    __syncthreads();
    hist[tid] = (uint32_t)(bad | (ovf << 1));
    __syncthreads();
    for (int st = VT / 2; st > 0; st /= 2) {
        if (tid < st) hist[tid] |= hist[tid + st];
        __syncthreads();
    }
    const uint32_t bits = hist[0];
    __syncthreads();
    reduce_best(sv, si, -lmin, 0);
    const float row_lmin = -sv[0];
    __syncthreads();
    si[tid] = nfin;
    __syncthreads();
    for (int st = VT / 2; st > 0; st /= 2) {
        if (tid < st) si[tid] += si[tid + st];
        __syncthreads();
    }
    const int32_t n_fin = si[0];
    __syncthreads();
    int32_t flags = 0;
    if (bits & 1u)
        flags = F_BAD;
    else if (rmax <= mask_at)
        flags = F_MASKED;
    else if ((bits & 2u) || zmax == -INFINITY)
        flags = F_PREP;
    else if (!greedy && (!isfinite(zmax) || !isfinite(__fdiv_rn(row_lmin, t))))
        flags = F_PREP;

    int32_t token = imax;
    if (race_now) {
        reduce_best(sv, si, rs.best, rs.best_i);
        token = si[0];
        __syncthreads();
    } else if (flags == 0 && !greedy) {
        /* Pass 2 (top-k, min-p): the cut needs the whole row, then the race over the kept
         * tokens starts at the maximum's score as the CPU's does. */
        const int thresh = cut_k && n_fin >= sq->top_k;
        if (thresh) top_k_cut(rv, n, t, sq->top_k, hist, sel, &cut_z, &cut_i);
        const float thr_z = thresh ? cut_z : 0.0f;
        const int32_t thr_i = thresh ? cut_i : 0;
        uint32_t w[4];
        sample_words(sq, pos, (uint32_t)imax >> 2, w);
        rs.best = __fadd_rn(zmax, specd_dev_gumbel(specd_dev_uniform(w[imax & 3])));
        rs.best_i = imax;
        for (int32_t g = tid; 4 * g < n; g += VT) {
            float z[4];
            for (int j = 0; j < 4; j++) {
                const int32_t x = 4 * g + j;
                z[j] = x < n ? zval(biased(rv, raw_logit(rv, x), x), t, 0) : -INFINITY;
            }
            race4(sq, pos, g, z, thresh, thr_z, thr_i, min_p, zmax, &rs);
        }
        reduce_best(sv, si, rs.best, rs.best_i);
        token = si[0];
        __syncthreads();
    }

    /* Publish the slot; the sequence's last slot to arrive walks the chain. */
    int32_t *slot = slots + ((size_t)q * SLOTS + (size_t)s) * 2;
    if (tid == 0) {
        slot[0] = token;
        slot[1] = flags;
        __threadfence();
        const uint32_t n_part = (uint32_t)k + (sq->row[k] >= 0 ? 1u : 0u);
        last = atomicAdd(&counts[q], 1u) == n_part - 1;
    }
    __syncthreads();
    if (!last || tid != 0) return;
    __threadfence();
    const volatile int32_t *vs = slots + (size_t)q * SLOTS * 2;
    specd_cuda_verify_out *o = &out[q];
    o->status = SPECD_CUDA_VERIFY_OK;
    o->bad_row = -1;
    for (int32_t j = 0; j <= k; j++) {
        if (sq->row[j] < 0) continue;
        if (vs[2 * j + 1] & (F_BAD | F_MASKED)) {
            o->status = SPECD_CUDA_VERIFY_BAD_ROW;
            o->bad_row = sq->row[j];
            return;
        }
    }
    int32_t na = 0;
    for (int32_t j = 0; j <= k; j++) {
        if (sq->row[j] < 0) break; /* no bonus slot: the walk ends at its last accepted draft */
        if (vs[2 * j + 1] & F_PREP) {
            o->status = SPECD_CUDA_VERIFY_BAD_PREPARE;
            o->bad_row = sq->row[j];
            return;
        }
        const int32_t tok = vs[2 * j];
        o->tokens[na] = tok;
        if (j < k && sq->draft[j] == tok) {
            na++;
            continue;
        }
        break;
    }
    o->n_accepted = na;
    o->n_emitted = na + (na < k || sq->row[k] >= 0 ? 1 : 0);
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
