/* The launchers of libspecd_cuda.so's per-operation kernels (one .cu file each), reached from
 * libspecd through the table in kernels/cuda/cuda_kernels.h. Every launcher checks its arguments
 * on the host (kernels/cuda/cuda_plan.h), enqueues its kernels on stream (a cudaStream_t; NULL is
 * the legacy default stream) and returns SPECD_CUDA_OK, SPECD_CUDA_E_ARGUMENT (nothing enqueued;
 * specd_cuda_last_refusal says why) or the launch's cudaError_t. Buffers are device memory.
 *
 * Batch invariance: every output element is reduced in an order fixed by the operation's own
 * sizes (n_in, head_dim, the KV position), never by the number of rows; a row computed alone has
 * the bits it has inside any batch. */
#ifndef SPECD_KERNELS_CUDA_OPS_H
#define SPECD_KERNELS_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/cuda_plan.h"
#include "kernels/cuda/verify_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why this thread's last launcher call returned SPECD_CUDA_E_ARGUMENT ("" if it did not). */
const char *specd_cuda_last_refusal(void);
/* The buffer the launchers write that reason into. */
char *specd_cuda_refusal_buffer(size_t *size);

/* n_rows rows of n floats (stride ld_x) to rows of specd_cuda_q8_row_bytes(n) bytes, each block
 * of 32 as the CPU's Q8_1 quantizer makes it (kernels/cpu/quant_32.c): d = amax / 127, quants
 * rintf(x * 127 / amax), fp16 d and fp16 d * sum(quants). */
int specd_cuda_quantize_q8(const float *x, int64_t ld_x, int32_t n_rows, int32_t n, void *xq,
                           void *stream);

/* y[r * ld_y + o] = dot(W row o, xq row r) for Q4_0, Q4_1 or Q8_0 weights of n_in columns (GGUF
 * blocks, kernels/cpu/quant_blocks.h) and activations from specd_cuda_quantize_q8: the CPU's
 * arithmetic (exact integer sums of four products, one fused multiply-add per block and lane,
 * eight lanes summed in a fixed tree), so the same bits as specd_matmul_rows. */
int specd_cuda_matmul_q(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                        const void *xq, int32_t n_rows, float *y, int64_t ld_y, void *stream);

/* Rows to Q8_K super-blocks (kernels/cuda/cuda_plan.h's layout, the CPU's byte for byte) for the
 * K-quant matmul; n a multiple of 256. */
int specd_cuda_quantize_q8_k(const float *x, int64_t ld_x, int32_t n_rows, int32_t n, void *xq,
                             void *stream);

/* y[r * ld_y + o] = dot(W row o, xq row r) for Q4_K or Q6_K weights against Q8_K rows, with the
 * CPU's arithmetic (kernels/cpu/quant_k.c), so the same bits as its vec_dot. */
int specd_cuda_matmul_k(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                        const void *xq, int32_t n_rows, float *y, int64_t ld_y, void *stream);

/* The same for F32 or F16 weights against float rows (rounded to F16 first for F16 weights, as
 * the CPU's vec_dot_type): float products summed in double, per lane then by a fixed warp tree. */
int specd_cuda_matmul_f(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                        const float *x, int64_t ld_x, int32_t n_rows, float *y, int64_t ld_y,
                        void *stream);

/* y = x / sqrt(mean(x^2) + eps) * w per row (w NULL: no weight); y may be x. */
int specd_cuda_rmsnorm(const float *x, int64_t ld_x, const float *w, float *y, int64_t ld_y,
                       int32_t n_rows, int32_t n, float eps, void *stream);

/* In place: row r's n_heads heads of head_dim floats rotate their first n_rot dims by position
 * pos[r] (device int32s), adjacent pairs or NeoX halves, as kernels/cpu/rope.c. */
int specd_cuda_rope(float *x, int64_t ld_x, int32_t n_rows, const int32_t *pos, int32_t n_heads,
                    int32_t head_dim, int32_t n_rot, float freq_base, int neox, void *stream);

/* y = silu(g) * u over n_rows rows of n floats; y may be g or u. */
int specd_cuda_swiglu(const float *g, int64_t ld_g, const float *u, int64_t ld_u, float *y,
                      int64_t ld_y, int32_t n_rows, int32_t n, void *stream);

/* Input rows: row r is token ids[r]'s embedding, dequantized from table (n_vocab rows of n_embd
 * elements of type F32, F16, Q4_0, Q4_1 or Q8_0) as the CPU's to_float, or, where ids[r] < 0, a
 * copy of vectors row r (stride ld_vectors; a float input row, e.g. a hidden state). An id past
 * the vocabulary, or a negative id without vectors, gives a row of NaNs (ids live on the device,
 * so they cannot be refused before the launch). */
int specd_cuda_embed(uint32_t type, const void *table, int32_t n_vocab, int32_t n_embd,
                     const int32_t *ids, const float *vectors, int64_t ld_vectors, float *y,
                     int64_t ld_y, int32_t n_rows, void *stream);

/* Gated LoRA, y[r] += gate[r] * scale * B (A x[r]) for rows whose gate (device floats) is not
 * 0, with the CPU forward pass's arithmetic (model/runtime/forward.c): each of the rank sums of A
 * and each of the n_out sums of B is one float accumulation in index order (one thread each), then
 * y + (gate * scale) * s. A is [rank][n_in], B [n_out][rank], both F32; work: n_rows * rank floats
 * of device scratch for A x. */
int specd_cuda_lora(const float *a, const float *b, int32_t n_in, int32_t n_out, int32_t rank,
                    float scale, const float *x, int64_t ld_x, const float *gate, int32_t n_rows,
                    float *y, int64_t ld_y, float *work, size_t work_floats, void *stream);

/* Attention of n_rows query rows over an F16 KV cache with per-row visibility bits
 * (specd_cuda_attention_args, kernels/cuda/cuda_plan.h): per head, softmax(scale * q.k_j) over
 * the visible positions j, mixed over V. Each row's visible positions are cut by rank, S to a
 * split (S = SPECD_CUDA_ATTN_SPLIT), so a tree row groups its keys as plain decoding does once its
 * path is committed and packed; each split keeps its max, sum of exponentials and weighted sums of
 * V (positions in order), and the splits are merged in order. */
int specd_cuda_attention(const specd_cuda_attention_args *args, void *stream);

/* Small row operations of the runtime's forward pass (model/runtime/forward_cuda.c); each is
 * one IEEE operation or a copy per element, so the CPU's bits. */

/* y = a + b over n_rows rows of n floats; ld_b 0 adds the one row b to every row (a bias); y may
 * be a. */
int specd_cuda_add(const float *a, int64_t ld_a, const float *b, int64_t ld_b, float *y,
                   int64_t ld_y, int32_t n_rows, int32_t n, void *stream);

/* Row r of x (n floats) to F16 at dst + dst_rows[r] * ld_dst (device int32s), rounded as
 * kernels/cpu/fp16.h's specd_fp32_to_fp16: the runtime's K/V rows into its cache. */
int specd_cuda_store_f16(const float *x, int64_t ld_x, int32_t n_rows, int32_t n,
                         const int32_t *dst_rows, uint16_t *dst, int64_t ld_dst, void *stream);

/* y row j = x row rows[j] (device int32s), n floats each. */
int specd_cuda_gather(const float *x, int64_t ld_x, const int32_t *rows, int32_t n_rows,
                      int32_t n, float *y, int64_t ld_y, void *stream);

/* In each of n_planes planes (plane p at base + p * plane_stride), F16 row src[j] (n elements,
 * rows ld apart) is copied to row dst[j], for j in order: a later move reads what earlier ones
 * left, as a sequential loop would. src and dst are device int32s. */
int specd_cuda_move_rows_f16(uint16_t *base, int64_t plane_stride, int32_t n_planes, int64_t ld,
                             int32_t n, const int32_t *src, const int32_t *dst, int32_t n_rows,
                             void *stream);

/* The acceptance engine on the device (kernels/cuda/verify_plan.h): one launch verifies every
 * sequence of a step (GREEDY / COUPLED chains, temperature, bias, top-k, min-p) from a device
 * logits block, with the CPU engine's decisions bit for bit; results land in args->out. */
int specd_cuda_verify(const specd_cuda_verify_args *args, void *stream);

#ifdef __cplusplus
}
#endif
#endif
