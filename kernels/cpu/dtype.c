/* Type tables: the scalar reference table and the fastest one this CPU runs (AVX2/FMA kernels
 * where they exist, chosen at run time; the rest shared with the reference). */
#include "kernels/cpu/dtype.h"

#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/dtype_internal.h"
#include "kernels/cpu/quant_blocks.h"

#include <stddef.h>

/* index = position in type_ids */
static const uint32_t type_ids[] = {
    SPECD_DTYPE_F32,  SPECD_DTYPE_F16,  SPECD_DTYPE_Q4_0, SPECD_DTYPE_Q4_1, SPECD_DTYPE_Q8_0,
    SPECD_DTYPE_Q8_1, SPECD_DTYPE_Q4_K, SPECD_DTYPE_Q6_K, SPECD_DTYPE_Q8_K, SPECD_DTYPE_BF16,
};
#define N_TYPES (sizeof type_ids / sizeof type_ids[0])

static const specd_dtype_traits scalar_table[N_TYPES] = {
    {"F32", 1, 4, specd_f32_to_float, specd_f32_from_float, specd_f32_vec_dot, SPECD_DTYPE_F32},
    {"F16", 1, 2, specd_f16_to_float, specd_f16_from_float, specd_f16_vec_dot, SPECD_DTYPE_F16},
    {"Q4_0", SPECD_QK, sizeof(specd_block_q4_0), specd_q4_0_to_float, specd_q4_0_from_float,
     specd_q4_0_vec_dot, SPECD_DTYPE_Q8_0},
    {"Q4_1", SPECD_QK, sizeof(specd_block_q4_1), specd_q4_1_to_float, specd_q4_1_from_float,
     specd_q4_1_vec_dot, SPECD_DTYPE_Q8_1},
    {"Q8_0", SPECD_QK, sizeof(specd_block_q8_0), specd_q8_0_to_float, specd_q8_0_from_float,
     specd_q8_0_vec_dot, SPECD_DTYPE_Q8_0},
    {"Q8_1", SPECD_QK, sizeof(specd_block_q8_1), specd_q8_1_to_float, specd_q8_1_from_float,
     specd_q8_1_vec_dot, SPECD_DTYPE_Q8_1},
    {"Q4_K", SPECD_QK_K, sizeof(specd_block_q4_k), specd_q4_k_to_float, NULL, specd_q4_k_vec_dot,
     SPECD_DTYPE_Q8_K},
    {"Q6_K", SPECD_QK_K, sizeof(specd_block_q6_k), specd_q6_k_to_float, NULL, specd_q6_k_vec_dot,
     SPECD_DTYPE_Q8_K},
    {"Q8_K", SPECD_QK_K, sizeof(specd_block_q8_k), specd_q8_k_to_float, specd_q8_k_from_float, NULL,
     SPECD_DTYPE_Q8_K},
    {"BF16", 1, 2, specd_bf16_to_float, specd_bf16_from_float, specd_bf16_vec_dot,
     SPECD_DTYPE_BF16},
};

static const specd_dtype_traits avx2_table[N_TYPES] = {
    {"F32", 1, 4, specd_f32_to_float, specd_f32_from_float, specd_f32_vec_dot_avx2,
     SPECD_DTYPE_F32},
    {"F16", 1, 2, specd_f16_to_float, specd_f16_from_float, specd_f16_vec_dot_avx2,
     SPECD_DTYPE_F16},
    {"Q4_0", SPECD_QK, sizeof(specd_block_q4_0), specd_q4_0_to_float_avx2, specd_q4_0_from_float,
     specd_q4_0_vec_dot_avx2, SPECD_DTYPE_Q8_0},
    {"Q4_1", SPECD_QK, sizeof(specd_block_q4_1), specd_q4_1_to_float_avx2, specd_q4_1_from_float,
     specd_q4_1_vec_dot_avx2, SPECD_DTYPE_Q8_1},
    {"Q8_0", SPECD_QK, sizeof(specd_block_q8_0), specd_q8_0_to_float_avx2,
     specd_q8_0_from_float_avx2, specd_q8_0_vec_dot_avx2, SPECD_DTYPE_Q8_0},
    {"Q8_1", SPECD_QK, sizeof(specd_block_q8_1), specd_q8_1_to_float, specd_q8_1_from_float_avx2,
     specd_q8_1_vec_dot, SPECD_DTYPE_Q8_1},
    {"Q4_K", SPECD_QK_K, sizeof(specd_block_q4_k), specd_q4_k_to_float, NULL,
     specd_q4_k_vec_dot_avx2, SPECD_DTYPE_Q8_K},
    {"Q6_K", SPECD_QK_K, sizeof(specd_block_q6_k), specd_q6_k_to_float, NULL,
     specd_q6_k_vec_dot_avx2, SPECD_DTYPE_Q8_K},
    {"Q8_K", SPECD_QK_K, sizeof(specd_block_q8_k), specd_q8_k_to_float, specd_q8_k_from_float, NULL,
     SPECD_DTYPE_Q8_K},
    {"BF16", 1, 2, specd_bf16_to_float, specd_bf16_from_float, specd_bf16_vec_dot_avx2,
     SPECD_DTYPE_BF16},
};

static int type_index(uint32_t type) {
    for (size_t i = 0; i < N_TYPES; i++)
        if (type_ids[i] == type) return (int)i;
    return -1;
}

int specd_cpu_has_avx2(void) {
    specd_cpu_path path;
    specd_cpu_path_get(&path, NULL, 0); /* a refused SPECD_CPU_PATH fails context creation */
    return path >= SPECD_CPU_AVX2;
}

const specd_dtype_traits *specd_dtype_traits_scalar(uint32_t type) {
    int i = type_index(type);
    return i < 0 ? NULL : &scalar_table[i];
}

const specd_dtype_traits *specd_dtype_traits_get(uint32_t type) {
    int i = type_index(type);
    if (i < 0) return NULL;
    return specd_cpu_has_avx2() ? &avx2_table[i] : &scalar_table[i];
}

size_t specd_dtype_row_bytes(uint32_t type, int64_t n) {
    const specd_dtype_traits *t = specd_dtype_traits_scalar(type);
    if (!t || n < 0 || n % t->block_size != 0) return 0;
    size_t bytes;
    if (__builtin_mul_overflow((size_t)(n / t->block_size), t->block_bytes, &bytes)) return 0;
    return bytes;
}
