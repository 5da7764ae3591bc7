/* The CUDA kernels' host-side planning (kernels/cuda/cuda_plan.h), which runs without a GPU:
 * argument refusals, launch shapes, the attention scratch size and the visibility bitmask. */
#include "test_main.h"

#include "kernels/cpu/dtype.h"
#include "kernels/cuda/cuda_plan.h"

#include <string.h>

/* Device pointers are only checked for NULL and alignment, never read. */
#define DEV(addr) ((void *)(uintptr_t)(addr))

static void test_shapes(void **state) {
    (void)state;
    assert_int_equal(specd_cuda_q8_row_bytes(64), 72);
    assert_int_equal(specd_cuda_q8_row_bytes(33), 0);
    assert_int_equal(specd_cuda_q8_row_bytes(0), 0);
    assert_int_equal(specd_cuda_grid_for(0, 16), 0);
    assert_int_equal(specd_cuda_grid_for(1, 16), 1);
    assert_int_equal(specd_cuda_grid_for(16, 16), 1);
    assert_int_equal(specd_cuda_grid_for(17, 16), 2);
    assert_int_equal(specd_cuda_grid_for((int64_t)INT32_MAX * 16 + 1, 16), 0);
    assert_int_equal(specd_cuda_mask_words(0), 0);
    assert_int_equal(specd_cuda_mask_words(1), 1);
    assert_int_equal(specd_cuda_mask_words(32), 1);
    assert_int_equal(specd_cuda_mask_words(33), 2);
    assert_int_equal(specd_cuda_attention_splits(1), 1);
    assert_int_equal(specd_cuda_attention_splits(SPECD_CUDA_ATTN_SPLIT), 1);
    assert_int_equal(specd_cuda_attention_splits(SPECD_CUDA_ATTN_SPLIT + 1), 2);
    /* 2 rows x 3 heads x 2 splits x (64 + 2) */
    assert_int_equal(specd_cuda_attention_work_floats(2, 3, 64, SPECD_CUDA_ATTN_SPLIT + 1),
                     2 * 3 * 2 * 66);
    assert_int_equal(specd_cuda_attention_work_floats(INT32_MAX, INT32_MAX, 256, INT32_MAX), 0);
}

static void test_matmul_checks(void **state) {
    (void)state;
    char why[256];
    const float *y = DEV(0x3000);
    assert_int_equal(specd_cuda_check_matmul_q(SPECD_DTYPE_Q4_0, DEV(0x1002), 576, 10,
                                               DEV(0x2000), 4, y, 10, why, sizeof why),
                     SPECD_CUDA_OK);
    assert_int_equal(specd_cuda_check_matmul_q(SPECD_DTYPE_Q4_0, DEV(0x1001), 576, 10,
                                               DEV(0x2000), 4, y, 10, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_non_null(strstr(why, "aligned"));
    /* Q4_1's quants are read as ints */
    assert_int_equal(specd_cuda_check_matmul_q(SPECD_DTYPE_Q4_1, DEV(0x1002), 576, 10,
                                               DEV(0x2000), 4, y, 10, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_matmul_q(SPECD_DTYPE_Q8_0, DEV(0x1000), 48, 10,
                                               DEV(0x2000), 4, y, 10, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_non_null(strstr(why, "multiple of 32"));
    assert_int_equal(specd_cuda_check_matmul_q(SPECD_DTYPE_Q4_K, DEV(0x1000), 512, 10,
                                               DEV(0x2000), 4, y, 10, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_matmul_q(SPECD_DTYPE_Q8_0, DEV(0x1000), 64, 10,
                                               DEV(0x2000), 4, y, 9, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_matmul_q(SPECD_DTYPE_Q8_0, DEV(0x1000), 64, 10,
                                               DEV(0x2002), 4, y, 10, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_matmul_q(SPECD_DTYPE_Q8_0, NULL, 64, 10, DEV(0x2000), 4, y,
                                               10, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    /* no rows: nothing to read, nothing refused */
    assert_int_equal(specd_cuda_check_matmul_q(SPECD_DTYPE_Q8_0, NULL, 64, 10, NULL, 0, NULL, 10,
                                               why, sizeof why),
                     SPECD_CUDA_OK);
    assert_int_equal(specd_cuda_q8_k_row_bytes(512), 2 * 292);
    assert_int_equal(specd_cuda_q8_k_row_bytes(576), 0);
    assert_int_equal(specd_cuda_check_matmul_k(SPECD_DTYPE_Q6_K, DEV(0x1002), 512, 10,
                                               DEV(0x2000), 4, y, 10, why, sizeof why),
                     SPECD_CUDA_OK);
    assert_int_equal(specd_cuda_check_matmul_k(SPECD_DTYPE_Q4_K, DEV(0x1002), 576, 10,
                                               DEV(0x2000), 4, y, 10, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_non_null(strstr(why, "multiple of 256"));
    assert_int_equal(specd_cuda_check_matmul_k(SPECD_DTYPE_Q4_0, DEV(0x1002), 512, 10,
                                               DEV(0x2000), 4, y, 10, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_matmul_k(SPECD_DTYPE_Q4_K, DEV(0x1001), 512, 10,
                                               DEV(0x2000), 4, y, 10, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_quantize_k(DEV(0x1000), 512, 3, 512, DEV(0x2000), why,
                                                 sizeof why),
                     SPECD_CUDA_OK);
    assert_int_equal(specd_cuda_check_quantize_k(DEV(0x1000), 512, 3, 576, DEV(0x2000), why,
                                                 sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_matmul_f(SPECD_DTYPE_F16, DEV(0x1002), 100, 7, DEV(0x2000),
                                               100, 3, y, 7, why, sizeof why),
                     SPECD_CUDA_OK);
    assert_int_equal(specd_cuda_check_matmul_f(SPECD_DTYPE_F32, DEV(0x1002), 100, 7, DEV(0x2000),
                                               100, 3, y, 7, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_matmul_f(SPECD_DTYPE_Q8_0, DEV(0x1000), 100, 7, DEV(0x2000),
                                               100, 3, y, 7, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_matmul_f(SPECD_DTYPE_F32, DEV(0x1000), 100, 7, DEV(0x2000),
                                               99, 3, y, 7, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_quantize(DEV(0x1000), 64, 3, 64, DEV(0x2000), why,
                                               sizeof why),
                     SPECD_CUDA_OK);
    assert_int_equal(specd_cuda_check_quantize(DEV(0x1000), 64, 3, 64, DEV(0x2002), why,
                                               sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_quantize(DEV(0x1000), 64, 3, 40, DEV(0x2000), why,
                                               sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
}

static void test_row_op_checks(void **state) {
    (void)state;
    char why[256];
    float *x = DEV(0x1000);
    const int32_t *pos = DEV(0x2000);
    assert_int_equal(specd_cuda_check_rows(x, 576, x, 576, 5, 576, why, sizeof why),
                     SPECD_CUDA_OK);
    assert_int_equal(specd_cuda_check_rows(x, 575, x, 576, 5, 576, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_rope(x, 576, 5, pos, 9, 64, 64, 10000.0f, why, sizeof why),
                     SPECD_CUDA_OK);
    assert_int_equal(specd_cuda_check_rope(x, 576, 5, pos, 9, 64, 63, 10000.0f, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_rope(x, 576, 5, pos, 9, 64, 66, 10000.0f, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_rope(x, 575, 5, pos, 9, 64, 64, 10000.0f, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_rope(x, 576, 5, NULL, 9, 64, 64, 10000.0f, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_embed(SPECD_DTYPE_Q4_1, DEV(0x3000), 100, 576, pos, x, 576,
                                            2, why, sizeof why),
                     SPECD_CUDA_OK);
    assert_int_equal(specd_cuda_check_embed(SPECD_DTYPE_Q4_1, DEV(0x3000), 100, 570, pos, x, 576,
                                            2, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    const float *f = DEV(0x4000);
    assert_int_equal(specd_cuda_check_lora(f, f, 576, 192, 16, x, 576, f, 4, x, 192, f, 64, why,
                                           sizeof why),
                     SPECD_CUDA_OK);
    assert_int_equal(specd_cuda_check_lora(f, f, 576, 192, 16, x, 576, f, 4, x, 192, f, 63, why,
                                           sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_non_null(strstr(why, "work"));
    assert_int_equal(specd_cuda_check_lora(f, f, 576, 192, 0, x, 576, f, 4, x, 192, f, 64, why,
                                           sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_lora(f, f, 576, 192, 16, x, 576, NULL, 4, x, 192, f, 64,
                                           why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_embed(SPECD_DTYPE_Q6_K, DEV(0x3000), 100, 512, pos, x, 576,
                                            2, why, sizeof why),
                     SPECD_CUDA_E_ARGUMENT);
}

static specd_cuda_attention_args valid_attention(void) {
    specd_cuda_attention_args a = {0};
    a.q = DEV(0x1000);
    a.ld_q = 576;
    a.k = DEV(0x2000);
    a.k_pos_stride = 192;
    a.k_head_stride = 64;
    a.v = DEV(0x4000);
    a.v_pos_stride = 1;
    a.v_head_stride = 64 * 1024;
    a.v_dim_stride = 1024;
    a.visible = DEV(0x8000);
    a.mask_words = specd_cuda_mask_words(300);
    a.n_rows = 3;
    a.n_heads = 9;
    a.n_kv_heads = 3;
    a.head_dim = 64;
    a.n_kv = 300;
    a.scale = 0.125f;
    a.out = DEV(0x9000);
    a.ld_out = 576;
    a.work = DEV(0xa000);
    a.work_floats = specd_cuda_attention_work_floats(3, 9, 64, 300);
    return a;
}

static void test_attention_checks(void **state) {
    (void)state;
    char why[256];
    specd_cuda_attention_args a = valid_attention();
    assert_int_equal(specd_cuda_check_attention(&a, why, sizeof why), SPECD_CUDA_OK);
    a.n_kv_heads = 4;
    assert_int_equal(specd_cuda_check_attention(&a, why, sizeof why), SPECD_CUDA_E_ARGUMENT);
    a = valid_attention();
    a.head_dim = 48;
    assert_int_equal(specd_cuda_check_attention(&a, why, sizeof why), SPECD_CUDA_E_ARGUMENT);
    a = valid_attention();
    a.work_floats--;
    assert_int_equal(specd_cuda_check_attention(&a, why, sizeof why), SPECD_CUDA_E_ARGUMENT);
    assert_non_null(strstr(why, "work"));
    a = valid_attention();
    a.mask_words = 9; /* 288 positions < 300 */
    assert_int_equal(specd_cuda_check_attention(&a, why, sizeof why), SPECD_CUDA_E_ARGUMENT);
    a = valid_attention();
    a.visible = DEV(0x8002);
    assert_int_equal(specd_cuda_check_attention(&a, why, sizeof why), SPECD_CUDA_E_ARGUMENT);
    a = valid_attention();
    a.ld_out = 575;
    assert_int_equal(specd_cuda_check_attention(&a, why, sizeof why), SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_check_attention(NULL, why, sizeof why), SPECD_CUDA_E_ARGUMENT);
}

static void test_pack_visibility(void **state) {
    (void)state;
    enum { ROWS = 5, POS = 77, LD = 80, WORDS = 4 }; /* 3 words cover 77; one spare */
    uint8_t vis[ROWS * LD];
    uint64_t s = 12345;
    for (size_t i = 0; i < sizeof vis; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        vis[i] = (uint8_t)((s >> 33) % 3); /* 0, 1 or 2: any nonzero byte is visible */
    }
    uint32_t words[ROWS * WORDS];
    memset(words, 0xff, sizeof words); /* every bit not set by a visible byte must come out 0 */
    assert_int_equal(specd_cuda_pack_visibility(vis, LD, ROWS, POS, words, WORDS),
                     SPECD_CUDA_OK);
    for (int r = 0; r < ROWS; r++)
        for (int j = 0; j < WORDS * 32; j++) {
            const int bit = (int)((words[r * WORDS + j / 32] >> (j % 32)) & 1u);
            assert_int_equal(bit, j < POS ? vis[r * LD + j] != 0 : 0);
        }
    assert_int_equal(specd_cuda_pack_visibility(vis, LD, ROWS, POS, words, 2),
                     SPECD_CUDA_E_ARGUMENT);
    assert_int_equal(specd_cuda_pack_visibility(NULL, LD, ROWS, POS, words, WORDS),
                     SPECD_CUDA_E_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),          cmocka_unit_test(test_matmul_checks),
        cmocka_unit_test(test_row_op_checks),   cmocka_unit_test(test_attention_checks),
        cmocka_unit_test(test_pack_visibility),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
