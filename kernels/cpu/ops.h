/* CPU operations of the transformer runtime, one per file. Each computes every output element by
 * the same arithmetic in the same order whatever the batch or thread split (batch invariance), and
 * that arithmetic is llama.cpp's as its x86 AVX2 build evaluates a one-token decode, operation for
 * operation (summation orders, fused multiply-adds, its vectorised exp), so our logits are its
 * logits bit for bit:
 *   rmsnorm.c    y = (x * 1/sqrt(mean(x^2) + eps)) * w, sum of squares in double as ggml
 *   rope.c       rotary embedding, adjacent pairs ("normal", llama) or halves (NeoX, qwen)
 *   softmax.c    in place, ggml's vectorised exp (vexp.h) in chunks of 8, sum in double
 *   swiglu.c     y = silu(g) * u
 *   attention.c  query rows of one head over an F16 K cache and a transposed F16 V cache
 *   matmul.c     rows of a quantized weight against activations quantized once per row
 * simd: the specd_cpu_path in use (kernels/cpu/cpu_dispatch.h): 0 scalar, 1 AVX2, 2 AVX-512
 * (AVX2 wherever an op has no AVX-512 kernel); checked once, since CPUID traps to the hypervisor in
 * a VM. Every path gives the same bits.
 */
#ifndef SPECD_KERNELS_CPU_OPS_H
#define SPECD_KERNELS_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/dtype.h"

void specd_rmsnorm_f32(const float *x, const float *w, float *y, int64_t n, float eps);

/* The rotation angles of position pos: n_rot / 2 cosines and sines (the same for every layer and
 * head, so a token computes them once). */
void specd_rope_angles(int32_t pos, int32_t n_rot, float freq_base, float *cos_out,
                       float *sin_out);
/* In place on n_heads heads of head_dim floats; the first n_rot dims of each head rotate by the
 * angles of specd_rope_angles. */
void specd_rope_f32(float *x, int32_t n_heads, int32_t head_dim, int32_t n_rot, const float *cs,
                    const float *sn, int neox);
/* The same with the AVX2 kernel where simd (a specd_cpu_path) is not scalar: the same bits. */
void specd_rope_f32_simd(float *x, int32_t n_heads, int32_t head_dim, int32_t n_rot,
                         const float *cs, const float *sn, int neox, int simd);

void specd_softmax_f32(float *x, int64_t n, int simd);

void specd_swiglu_f32(const float *g, const float *u, float *y, int64_t n, int simd);

/* out[head_dim] = sum_j softmax_j(scale * q.k_j) v_j over cache positions j < n_pos that
 * visible marks (NULL: all). K row j is k + j * k_stride halves; V is transposed: dim d's values
 * over positions are vt + d * vt_stride. q and the probabilities are rounded to F16 before their
 * products, as llama.cpp's F16 cache path does. scores: n_pos floats of scratch, probs: n_pos
 * rounded up to a multiple of 32. */
void specd_attention_row(const float *q, const uint16_t *k, size_t k_stride, const uint16_t *vt,
                         size_t vt_stride, const uint8_t *visible, int32_t n_pos, int32_t head_dim,
                         float scale, float *scores, float *probs, float *out, int simd);

/* One query row of specd_attention_rows: q[head_dim], its visibility row (NULL: all) and n_pos,
 * out[head_dim]. */
typedef struct specd_attention_query {
    const float *q;
    const uint8_t *visible;
    int32_t n_pos;
    float *out;
} specd_attention_query;

/* specd_attention_row for n_rows query rows over the same K and V^T caches (one sequence's new
 * tokens, the heads of one KV head): each K and V^T row is converted once for all of them, and
 * every row's output has the bits specd_attention_row gives it alone. work: work_floats floats of
 * scratch, at least specd_attention_rows_work(n_rows, the rows' largest n_pos, head_dim) for the
 * tile; with less (or NULL) the rows go one by one through scores and probs, scratch as for
 * specd_attention_row. */
void specd_attention_rows(const specd_attention_query *rows, int32_t n_rows, const uint16_t *k,
                          size_t k_stride, const uint16_t *vt, size_t vt_stride, int32_t head_dim,
                          float scale, float *work, size_t work_floats, float *scores,
                          float *probs, int simd);
size_t specd_attention_rows_work(int32_t n_rows, int32_t n_pos_max, int32_t head_dim);

/* Activation rows quantized to a weight's vec_dot_type: n_rows rows of n floats (stride ld_x) into
 * dst rows of specd_dtype_row_bytes(vdt, n) bytes. F32 copies. */
void specd_quantize_rows(const specd_dtype_traits *vdt_traits, uint32_t vdt, const float *x,
                         int64_t ld_x, int64_t n_rows, int64_t n, void *dst);

/* y[r * ld_y + o] = dot(W row o, xq row r) for o in [o_begin, o_end), r in [0, n_rows). W has
 * n_in columns of type w_type; xq rows are in W's vec_dot_type. Tiles weight rows so a tile stays
 * in cache across activation rows; the sum for each element is one vec_dot call. */
void specd_matmul_rows(const specd_dtype_traits *w_traits, uint32_t w_type, const void *w,
                       int64_t n_in, int64_t o_begin, int64_t o_end, const void *xq,
                       size_t xq_row_bytes, int64_t n_rows, float *y, int64_t ld_y, int simd);

#endif
