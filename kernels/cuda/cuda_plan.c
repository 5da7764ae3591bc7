/* Argument checks, launch shapes and the visibility bitmask (kernels/cuda/cuda_plan.h). */
#include "kernels/cuda/cuda_plan.h"

#include "kernels/cpu/dtype.h"

#include <stdarg.h>
#include <stdio.h>

static int refuse(char *why, size_t why_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(char *why, size_t why_size, const char *fmt, ...) {
    if (why && why_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_size, fmt, ap);
        va_end(ap);
    }
    return SPECD_CUDA_E_ARGUMENT;
}

static int aligned(const void *p, uintptr_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

size_t specd_cuda_q8_row_bytes(int64_t n) {
    if (n <= 0 || n % 32 != 0 || n / 32 > (int64_t)(SIZE_MAX / SPECD_CUDA_Q8_BLOCK_BYTES))
        return 0;
    return (size_t)(n / 32) * SPECD_CUDA_Q8_BLOCK_BYTES;
}

uint32_t specd_cuda_grid_for(int64_t items, int32_t per_block) {
    if (items <= 0 || per_block <= 0) return 0;
    const int64_t blocks = items / per_block + (items % per_block != 0);
    return blocks > INT32_MAX ? 0 : (uint32_t)blocks;
}

int specd_cuda_check_quantize(const float *x, int64_t ld_x, int32_t n_rows, int32_t n,
                              const void *xq, char *why, size_t why_size) {
    if (n_rows < 0) return refuse(why, why_size, "quantize: n_rows %d < 0", n_rows);
    if (!specd_cuda_q8_row_bytes(n))
        return refuse(why, why_size, "quantize: row length %d is not a positive multiple of 32",
                      n);
    if (ld_x < n) return refuse(why, why_size, "quantize: ld_x %lld < n %d", (long long)ld_x, n);
    if (n_rows == 0) return SPECD_CUDA_OK;
    if (!x || !xq) return refuse(why, why_size, "quantize: NULL buffer");
    if (!aligned(xq, 4)) return refuse(why, why_size, "quantize: xq is not 4-byte aligned");
    if (!specd_cuda_grid_for((int64_t)n_rows * (n / 32), SPECD_CUDA_THREADS / 32))
        return refuse(why, why_size, "quantize: %d rows of %d is too many blocks", n_rows, n);
    return SPECD_CUDA_OK;
}

/* Alignment a quantized weight's blocks need: Q4_1's quants sit at a 4-byte offset of a 20-byte
 * block and are read as ints; Q4_0 (18 bytes) and Q8_0 (34 bytes) are read in 16-bit halves. */
static uintptr_t weight_alignment(uint32_t w_type) {
    switch (w_type) {
    case SPECD_DTYPE_Q4_0:
    case SPECD_DTYPE_Q8_0:
        return 2;
    case SPECD_DTYPE_Q4_1:
        return 4;
    default:
        return 0;
    }
}

/* What the matmul_q and matmul_k checks share past the weight type: n_in a whole number of blocks
 * of block elements, the shape, and with rows, the buffers, their alignment (wa bytes for the
 * weights, 4 for xq) and the grid. op names the operation in the reason. */
static int check_qmm(const char *op, int32_t block, uintptr_t wa, const void *w, int32_t n_in,
                     int32_t n_out, const void *xq, int32_t n_rows, const float *y, int64_t ld_y,
                     char *why, size_t why_size) {
    if (n_in <= 0 || n_in % block != 0)
        return refuse(why, why_size, "%s: n_in %d is not a positive multiple of %d", op, n_in,
                      block);
    if (n_out <= 0 || n_rows < 0)
        return refuse(why, why_size, "%s: bad shape n_out %d, n_rows %d", op, n_out, n_rows);
    if (ld_y < n_out)
        return refuse(why, why_size, "%s: ld_y %lld < n_out %d", op, (long long)ld_y, n_out);
    if (n_rows == 0) return SPECD_CUDA_OK;
    if (!w || !xq || !y) return refuse(why, why_size, "%s: NULL buffer", op);
    if (!aligned(w, wa))
        return refuse(why, why_size, "%s: weights are not %u-byte aligned", op, (unsigned)wa);
    if (!aligned(xq, 4)) return refuse(why, why_size, "%s: xq is not 4-byte aligned", op);
    if (!specd_cuda_grid_for((int64_t)n_out * n_rows, SPECD_CUDA_QMM_PAIRS_PER_BLOCK))
        return refuse(why, why_size, "%s: %d x %d outputs is too many blocks", op, n_out, n_rows);
    return SPECD_CUDA_OK;
}

int specd_cuda_check_matmul_q(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                              const void *xq, int32_t n_rows, const float *y, int64_t ld_y,
                              char *why, size_t why_size) {
    const uintptr_t wa = weight_alignment(w_type);
    if (!wa) return refuse(why, why_size, "matmul_q: weight type %u is not Q4_0, Q4_1 or Q8_0",
                           w_type);
    return check_qmm("matmul_q", 32, wa, w, n_in, n_out, xq, n_rows, y, ld_y, why, why_size);
}

size_t specd_cuda_q8_k_row_bytes(int64_t n) {
    if (n <= 0 || n % 256 != 0 || n / 256 > (int64_t)(SIZE_MAX / SPECD_CUDA_Q8_K_BLOCK_BYTES))
        return 0;
    return (size_t)(n / 256) * SPECD_CUDA_Q8_K_BLOCK_BYTES;
}

int specd_cuda_check_quantize_k(const float *x, int64_t ld_x, int32_t n_rows, int32_t n,
                                const void *xq, char *why, size_t why_size) {
    if (n_rows < 0) return refuse(why, why_size, "quantize_k: n_rows %d < 0", n_rows);
    if (!specd_cuda_q8_k_row_bytes(n))
        return refuse(why, why_size,
                      "quantize_k: row length %d is not a positive multiple of 256", n);
    if (ld_x < n)
        return refuse(why, why_size, "quantize_k: ld_x %lld < n %d", (long long)ld_x, n);
    if (n_rows == 0) return SPECD_CUDA_OK;
    if (!x || !xq) return refuse(why, why_size, "quantize_k: NULL buffer");
    if (!aligned(xq, 4)) return refuse(why, why_size, "quantize_k: xq is not 4-byte aligned");
    if (!specd_cuda_grid_for((int64_t)n_rows * (n / 256), SPECD_CUDA_THREADS / 32))
        return refuse(why, why_size, "quantize_k: %d rows of %d is too many blocks", n_rows, n);
    return SPECD_CUDA_OK;
}

int specd_cuda_check_matmul_k(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                              const void *xq, int32_t n_rows, const float *y, int64_t ld_y,
                              char *why, size_t why_size) {
    if (w_type != SPECD_DTYPE_Q4_K && w_type != SPECD_DTYPE_Q6_K)
        return refuse(why, why_size, "matmul_k: weight type %u is not Q4_K or Q6_K", w_type);
    /* Q4_K (144 bytes) and Q6_K (210 bytes) blocks hold fp16 fields at even offsets */
    return check_qmm("matmul_k", 256, 2, w, n_in, n_out, xq, n_rows, y, ld_y, why, why_size);
}

int specd_cuda_check_matmul_f(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                              const float *x, int64_t ld_x, int32_t n_rows, const float *y,
                              int64_t ld_y, char *why, size_t why_size) {
    if (w_type != SPECD_DTYPE_F32 && w_type != SPECD_DTYPE_F16)
        return refuse(why, why_size, "matmul_f: weight type %u is not F32 or F16", w_type);
    if (n_in <= 0 || n_out <= 0 || n_rows < 0)
        return refuse(why, why_size, "matmul_f: bad shape n_in %d, n_out %d, n_rows %d", n_in,
                      n_out, n_rows);
    if (ld_x < n_in || ld_y < n_out)
        return refuse(why, why_size, "matmul_f: strides ld_x %lld, ld_y %lld too small",
                      (long long)ld_x, (long long)ld_y);
    if (n_rows == 0) return SPECD_CUDA_OK;
    if (!w || !x || !y) return refuse(why, why_size, "matmul_f: NULL buffer");
    if (!aligned(w, w_type == SPECD_DTYPE_F32 ? 4 : 2) || !aligned(x, 4) || !aligned(y, 4))
        return refuse(why, why_size, "matmul_f: misaligned buffer");
    if (!specd_cuda_grid_for((int64_t)n_out * n_rows, SPECD_CUDA_FMM_PAIRS_PER_BLOCK))
        return refuse(why, why_size, "matmul_f: %d x %d outputs is too many blocks", n_out,
                      n_rows);
    return SPECD_CUDA_OK;
}

int specd_cuda_check_rows(const float *x, int64_t ld_x, const float *y, int64_t ld_y,
                          int32_t n_rows, int32_t n, char *why, size_t why_size) {
    if (n <= 0 || n_rows < 0)
        return refuse(why, why_size, "bad shape: %d rows of %d", n_rows, n);
    if (ld_x < n || ld_y < n)
        return refuse(why, why_size, "strides ld_x %lld, ld_y %lld < row length %d",
                      (long long)ld_x, (long long)ld_y, n);
    if (n_rows == 0) return SPECD_CUDA_OK;
    if (!x || !y) return refuse(why, why_size, "NULL buffer");
    if (!aligned(x, 4) || !aligned(y, 4)) return refuse(why, why_size, "misaligned buffer");
    return SPECD_CUDA_OK;
}

int specd_cuda_check_rope(const float *x, int64_t ld_x, int32_t n_rows, const int32_t *pos,
                          int32_t n_heads, int32_t head_dim, int32_t n_rot, float freq_base,
                          char *why, size_t why_size) {
    if (n_heads <= 0 || head_dim <= 0 || n_rows < 0)
        return refuse(why, why_size, "rope: bad shape %d heads of %d, %d rows", n_heads,
                      head_dim, n_rows);
    if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > head_dim)
        return refuse(why, why_size, "rope: n_rot %d is not even and in (0, head_dim %d]", n_rot,
                      head_dim);
    if (!(freq_base > 0.0f)) return refuse(why, why_size, "rope: freq_base must be > 0");
    if ((int64_t)n_heads * head_dim > INT32_MAX)
        return refuse(why, why_size, "rope: %d heads x %d is too wide", n_heads, head_dim);
    if ((int64_t)n_heads * head_dim > ld_x)
        return refuse(why, why_size, "rope: ld_x %lld < %d heads x %d", (long long)ld_x, n_heads,
                      head_dim);
    if (n_rows == 0) return SPECD_CUDA_OK;
    if (!x || !pos) return refuse(why, why_size, "rope: NULL buffer");
    if (!specd_cuda_grid_for((int64_t)n_heads * (n_rot / 2), SPECD_CUDA_THREADS) ||
        n_rows > 65535)
        return refuse(why, why_size, "rope: grid too large (%d rows)", n_rows);
    return SPECD_CUDA_OK;
}

int specd_cuda_check_embed(uint32_t type, const void *table, int32_t n_vocab, int32_t n_embd,
                           const int32_t *ids, const float *y, int64_t ld_y, int32_t n_rows,
                           char *why, size_t why_size) {
    uintptr_t a;
    int64_t block;
    switch (type) {
    case SPECD_DTYPE_F32: a = 4, block = 1; break;
    case SPECD_DTYPE_F16: a = 2, block = 1; break;
    case SPECD_DTYPE_Q4_0:
    case SPECD_DTYPE_Q4_1:
    case SPECD_DTYPE_Q8_0: a = weight_alignment(type), block = 32; break;
    default: return refuse(why, why_size, "embed: table type %u is not supported", type);
    }
    if (n_vocab <= 0 || n_embd <= 0 || n_embd % block != 0 || n_rows < 0)
        return refuse(why, why_size, "embed: bad shape vocab %d, width %d, %d rows", n_vocab,
                      n_embd, n_rows);
    if (ld_y < n_embd)
        return refuse(why, why_size, "embed: ld_y %lld < width %d", (long long)ld_y, n_embd);
    if (n_rows == 0) return SPECD_CUDA_OK;
    if (!table || !ids || !y) return refuse(why, why_size, "embed: NULL buffer");
    if (!aligned(table, a) || !aligned(y, 4)) return refuse(why, why_size, "embed: misaligned");
    return SPECD_CUDA_OK;
}

int specd_cuda_check_lora(const float *a, const float *b, int32_t n_in, int32_t n_out,
                          int32_t rank, const float *x, int64_t ld_x, const float *gate,
                          int32_t n_rows, const float *y, int64_t ld_y, const float *work,
                          size_t work_floats, char *why, size_t why_size) {
    if (n_in <= 0 || n_out <= 0 || rank <= 0 || n_rows < 0)
        return refuse(why, why_size, "lora: bad shape in %d, out %d, rank %d, rows %d", n_in,
                      n_out, rank, n_rows);
    if (ld_x < n_in || ld_y < n_out)
        return refuse(why, why_size, "lora: strides ld_x %lld, ld_y %lld too small",
                      (long long)ld_x, (long long)ld_y);
    if (n_rows == 0) return SPECD_CUDA_OK;
    if (!a || !b || !x || !gate || !y || !work) return refuse(why, why_size, "lora: NULL buffer");
    if (!aligned(a, 4) || !aligned(b, 4) || !aligned(x, 4) || !aligned(gate, 4) ||
        !aligned(y, 4) || !aligned(work, 4))
        return refuse(why, why_size, "lora: misaligned buffer");
    if (work_floats < (size_t)n_rows * (size_t)rank)
        return refuse(why, why_size, "lora: work holds %zu floats, %zu needed", work_floats,
                      (size_t)n_rows * (size_t)rank);
    if (!specd_cuda_grid_for((int64_t)n_rows * n_out, SPECD_CUDA_THREADS))
        return refuse(why, why_size, "lora: %d x %d outputs is too many blocks", n_rows, n_out);
    return SPECD_CUDA_OK;
}

/* --- attention ------------------------------------------------------------------------------ */
int32_t specd_cuda_attention_splits(int32_t n_kv) {
    return n_kv <= 0 ? 0 : (n_kv - 1) / SPECD_CUDA_ATTN_SPLIT + 1;
}

/* Per (row, head, split): the split's running max, its sum of exponentials, head_dim sums. */
size_t specd_cuda_attention_work_floats(int32_t n_rows, int32_t n_heads, int32_t head_dim,
                                        int32_t n_kv) {
    if (n_rows <= 0 || n_heads <= 0 || head_dim <= 0 || n_kv <= 0) return 0;
    size_t a;
    if (__builtin_mul_overflow((size_t)n_rows, (size_t)n_heads, &a) ||
        __builtin_mul_overflow(a, (size_t)specd_cuda_attention_splits(n_kv), &a) ||
        __builtin_mul_overflow(a, (size_t)head_dim + 2, &a))
        return 0;
    return a;
}

int specd_cuda_check_attention(const specd_cuda_attention_args *a, char *why, size_t why_size) {
    if (!a) return refuse(why, why_size, "attention: NULL arguments");
    if (a->n_rows < 0 || a->n_heads <= 0 || a->n_kv_heads <= 0 || a->n_kv <= 0)
        return refuse(why, why_size, "attention: bad shape rows %d, heads %d/%d, n_kv %d",
                      a->n_rows, a->n_heads, a->n_kv_heads, a->n_kv);
    if (a->n_heads % a->n_kv_heads != 0)
        return refuse(why, why_size, "attention: %d heads do not share %d KV heads evenly",
                      a->n_heads, a->n_kv_heads);
    if (a->head_dim <= 0 || a->head_dim % 32 != 0 || a->head_dim > SPECD_CUDA_ATTN_MAX_HEAD_DIM)
        return refuse(why, why_size, "attention: head_dim %d is not a multiple of 32 up to %d",
                      a->head_dim, SPECD_CUDA_ATTN_MAX_HEAD_DIM);
    if (a->mask_words < specd_cuda_mask_words(a->n_kv))
        return refuse(why, why_size, "attention: %d mask words cannot cover %d positions",
                      a->mask_words, a->n_kv);
    const int64_t width = (int64_t)a->n_heads * a->head_dim;
    if (a->ld_q < width || a->ld_out < width)
        return refuse(why, why_size, "attention: ld_q %lld / ld_out %lld < %lld",
                      (long long)a->ld_q, (long long)a->ld_out, (long long)width);
    if (a->k_pos_stride < 0 || a->k_head_stride < 0 || a->v_pos_stride < 0 ||
        a->v_head_stride < 0 || a->v_dim_stride < 0)
        return refuse(why, why_size, "attention: negative cache stride");
    if (a->n_rows == 0) return SPECD_CUDA_OK;
    if (!a->q || !a->k || !a->v || !a->visible || !a->out || !a->work)
        return refuse(why, why_size, "attention: NULL buffer");
    if (!aligned(a->q, 4) || !aligned(a->k, 2) || !aligned(a->v, 2) || !aligned(a->visible, 4) ||
        !aligned(a->out, 4) || !aligned(a->work, 4))
        return refuse(why, why_size, "attention: misaligned buffer");
    const size_t need =
        specd_cuda_attention_work_floats(a->n_rows, a->n_heads, a->head_dim, a->n_kv);
    if (!need || a->work_floats < need)
        return refuse(why, why_size, "attention: work holds %zu floats, %zu needed",
                      a->work_floats, need);
    if (a->n_rows > 65535 || a->n_heads > 65535)
        return refuse(why, why_size, "attention: grid too large (%d rows, %d heads)", a->n_rows,
                      a->n_heads);
    return SPECD_CUDA_OK;
}

int32_t specd_cuda_mask_words(int32_t n_pos) { return n_pos <= 0 ? 0 : (n_pos - 1) / 32 + 1; }

int specd_cuda_pack_visibility(const uint8_t *visible, size_t ld_visible, int32_t n_rows,
                               int32_t n_pos, uint32_t *words, int32_t mask_words) {
    if (n_rows < 0 || n_pos < 0 || mask_words < specd_cuda_mask_words(n_pos) ||
        (n_rows > 0 && mask_words > 0 && (!visible || !words)))
        return SPECD_CUDA_E_ARGUMENT;
    for (int32_t r = 0; r < n_rows; r++) {
        uint32_t *row = words + (size_t)r * (size_t)mask_words;
        const uint8_t *src = visible + (size_t)r * ld_visible;
        for (int32_t w = 0; w < mask_words; w++)
            row[w] = 0;
        for (int32_t j = 0; j < n_pos; j++)
            if (src[j]) row[j / 32] |= 1u << (j % 32);
    }
    return SPECD_CUDA_OK;
}
