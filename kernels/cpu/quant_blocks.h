/* Block layouts of the quantized types. These are a file format (GGUF stores them verbatim), so
 * they match ggml byte for byte; the static asserts pin the sizes.
 *
 * Kernels read blocks in place: a block pointer must be 2-byte aligned (4 for Q8_K), which GGUF
 * tensor data (32-byte aligned inside a page-aligned mapping) and specd_alloc buffers are. */
#ifndef SPECD_KERNELS_CPU_QUANT_BLOCKS_H
#define SPECD_KERNELS_CPU_QUANT_BLOCKS_H

#include <stdint.h>

#define SPECD_QK 32    /* elements per Q4_0/Q4_1/Q8_0/Q8_1 block */
#define SPECD_QK_K 256 /* elements per K-quant super-block */

typedef struct {
    uint16_t d;               /* fp16 scale */
    uint8_t qs[SPECD_QK / 2]; /* element j in the low nibble of qs[j], j+16 in the high one */
} specd_block_q4_0;

typedef struct {
    uint16_t d, m; /* fp16 scale and minimum: x = q*d + m */
    uint8_t qs[SPECD_QK / 2];
} specd_block_q4_1;

typedef struct {
    uint16_t d;
    int8_t qs[SPECD_QK];
} specd_block_q8_0;

typedef struct {
    uint16_t d, s; /* fp16 scale and d * sum(qs) */
    int8_t qs[SPECD_QK];
} specd_block_q8_1;

/* 8 sub-blocks of 32; 6-bit scales and mins packed in 12 bytes. */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[SPECD_QK_K / 2];
} specd_block_q4_k;

/* 16 sub-blocks of 16; 6-bit quants (4 low bits in ql, 2 high in qh), 8-bit scales. */
typedef struct {
    uint8_t ql[SPECD_QK_K / 2];
    uint8_t qh[SPECD_QK_K / 4];
    int8_t scales[SPECD_QK_K / 16];
    uint16_t d;
} specd_block_q6_k;

/* Activation type for the K-quants: float scale, quants, sums of each group of 16 quants. */
typedef struct {
    float d;
    int8_t qs[SPECD_QK_K];
    int16_t bsums[SPECD_QK_K / 16];
} specd_block_q8_k;

_Static_assert(sizeof(specd_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(specd_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(specd_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(specd_block_q8_1) == 36, "q8_1 block");
_Static_assert(sizeof(specd_block_q4_k) == 144, "q4_K block");
_Static_assert(sizeof(specd_block_q6_k) == 210, "q6_K block");
_Static_assert(sizeof(specd_block_q8_k) == 292, "q8_K block");

/* Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K super-block: sub-blocks 0..3
 * keep theirs in the low 6 bits of bytes j and j+4; 4..7 split theirs into a nibble of byte j+4
 * and the top 2 bits of bytes j-4 (scale) and j (min). */
static inline void specd_q4_k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#endif
