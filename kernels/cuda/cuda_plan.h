/* Host-side planning for libspecd_cuda.so's kernels, in plain C so it is unit-tested on machines
 * without a GPU (tests/gpu/test_cuda_plan.c): argument checks that every launcher runs before it
 * launches, the launch shapes it uses, the activation block layout, the visibility bitmask that
 * attention reads, and the scratch sizes a caller allocates.
 *
 * Batch invariance: no shape computed here changes how one output element is reduced. Matmul
 * outputs are (output, row) pairs each reduced by the same fixed tree whatever the pair count;
 * attention cuts each row's visible positions by rank, S to a split with S fixed
 * (SPECD_CUDA_ATTN_SPLIT), never chosen from the shape. */
#ifndef SPECD_KERNELS_CUDA_PLAN_H
#define SPECD_KERNELS_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Launcher results: 0, a refused argument (nothing launched), or a positive cudaError_t. */
#define SPECD_CUDA_OK 0
#define SPECD_CUDA_E_ARGUMENT (-1)

/* Activations for the quantized matmuls: rows of n floats quantized per 32 values into blocks
 * laid out as specd_block_q8_1 (fp16 d, fp16 d * sum(qs), 32 int8), the qs 4-byte aligned so
 * the dot product reads them as ints. Q4_0 and Q8_0 weights use d and qs; Q4_1 also s. */
#define SPECD_CUDA_Q8_BLOCK_BYTES 36
size_t specd_cuda_q8_row_bytes(int64_t n); /* 0 unless n is a positive multiple of 32 */

/* Threads per block of the 1-D kernels, and how many (output, row) pairs a matmul block holds. */
enum {
    SPECD_CUDA_THREADS = 128,
    SPECD_CUDA_QMM_PAIRS_PER_BLOCK = SPECD_CUDA_THREADS / 8, /* 8 lanes per quantized dot */
    SPECD_CUDA_FMM_PAIRS_PER_BLOCK = SPECD_CUDA_THREADS / 32 /* one warp per float dot */
};

/* Blocks for items spread at per_block a block; 0 when items <= 0 or the grid would exceed
 * CUDA's x limit (2^31 - 1). */
uint32_t specd_cuda_grid_for(int64_t items, int32_t per_block);

/* Each returns SPECD_CUDA_OK or SPECD_CUDA_E_ARGUMENT; why (may be NULL) gets a readable reason.
 * Pointers are device pointers, checked for NULL and alignment only. */
int specd_cuda_check_quantize(const float *x, int64_t ld_x, int32_t n_rows, int32_t n,
                              const void *xq, char *why, size_t why_size);
/* w_type: SPECD_DTYPE_Q4_0, Q4_1 or Q8_0 (kernels/cpu/dtype.h ids); n_rows 0 is a no-op. */
int specd_cuda_check_matmul_q(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                              const void *xq, int32_t n_rows, const float *y, int64_t ld_y,
                              char *why, size_t why_size);
/* K-quant weights (Q4_K or Q6_K) against Q8_K activation rows (specd_block_q8_k: float d, 256
 * int8, 16 int16 sums; 292 bytes, 4-byte aligned); n_in a multiple of 256. */
#define SPECD_CUDA_Q8_K_BLOCK_BYTES 292
size_t specd_cuda_q8_k_row_bytes(int64_t n); /* 0 unless n is a positive multiple of 256 */
int specd_cuda_check_quantize_k(const float *x, int64_t ld_x, int32_t n_rows, int32_t n,
                                const void *xq, char *why, size_t why_size);
int specd_cuda_check_matmul_k(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                              const void *xq, int32_t n_rows, const float *y, int64_t ld_y,
                              char *why, size_t why_size);
/* w_type: SPECD_DTYPE_F32 or F16. */
int specd_cuda_check_matmul_f(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                              const float *x, int64_t ld_x, int32_t n_rows, const float *y,
                              int64_t ld_y, char *why, size_t why_size);
int specd_cuda_check_rows(const float *x, int64_t ld_x, const float *y, int64_t ld_y,
                          int32_t n_rows, int32_t n, char *why, size_t why_size);
int specd_cuda_check_rope(const float *x, int64_t ld_x, int32_t n_rows, const int32_t *pos,
                          int32_t n_heads, int32_t head_dim, int32_t n_rot, float freq_base,
                          char *why, size_t why_size);
/* type: F32, F16, Q4_0, Q4_1 or Q8_0. */
int specd_cuda_check_embed(uint32_t type, const void *table, int32_t n_vocab, int32_t n_embd,
                           const int32_t *ids, const float *y, int64_t ld_y, int32_t n_rows,
                           char *why, size_t why_size);

/* Gated LoRA: a [rank][n_in], b [n_out][rank] F32; work holds n_rows * rank floats. */
int specd_cuda_check_lora(const float *a, const float *b, int32_t n_in, int32_t n_out,
                          int32_t rank, const float *x, int64_t ld_x, const float *gate,
                          int32_t n_rows, const float *y, int64_t ld_y, const float *work,
                          size_t work_floats, char *why, size_t why_size);

/* --- attention ------------------------------------------------------------------------------ */
/* The fixed split size over absolute KV positions, and the largest head_dim (a multiple of 32). */
enum { SPECD_CUDA_ATTN_SPLIT = 256, SPECD_CUDA_ATTN_MAX_HEAD_DIM = 256 };

/* Query rows over an F16 KV cache. Head h reads KV head h / (n_heads / n_kv_heads). Element
 * (position j, KV head g, dim d) of K is k[j * k_pos_stride + g * k_head_stride + d]; of V it is
 * v[j * v_pos_stride + g * v_head_stride + d * v_dim_stride] (V row-major or transposed, as the
 * cache stores it). Row r sees position j < n_kv iff bit j % 32 of visible[r * mask_words + j / 32]
 * is set (specd_cuda_pack_visibility); a row that sees nothing gets zeros. q and out are rows of
 * n_heads * head_dim floats with strides ld_q and ld_out. work: specd_cuda_attention_work_floats
 * floats of device scratch for the per-split partials. */
typedef struct specd_cuda_attention_args {
    const float *q;
    int64_t ld_q;
    const uint16_t *k;
    int64_t k_pos_stride, k_head_stride;
    const uint16_t *v;
    int64_t v_pos_stride, v_head_stride, v_dim_stride;
    const uint32_t *visible;
    int32_t mask_words;
    int32_t n_rows, n_heads, n_kv_heads, head_dim, n_kv;
    float scale;
    float *out;
    int64_t ld_out;
    float *work;
    size_t work_floats;
} specd_cuda_attention_args;

int32_t specd_cuda_attention_splits(int32_t n_kv);
/* 0 on overflow or a bad shape. */
size_t specd_cuda_attention_work_floats(int32_t n_rows, int32_t n_heads, int32_t head_dim,
                                        int32_t n_kv);
int specd_cuda_check_attention(const specd_cuda_attention_args *a, char *why, size_t why_size);

/* Words per visibility row for n_pos positions. */
int32_t specd_cuda_mask_words(int32_t n_pos);
/* Packs n_rows rows of n_pos bytes (nonzero: visible; row r at visible + r * ld_visible) into
 * rows of mask_words words (bits past n_pos cleared). Returns SPECD_CUDA_E_ARGUMENT when
 * mask_words < specd_cuda_mask_words(n_pos). */
int specd_cuda_pack_visibility(const uint8_t *visible, size_t ld_visible, int32_t n_rows,
                               int32_t n_pos, uint32_t *words, int32_t mask_words);

#ifdef __cplusplus
}
#endif
#endif
