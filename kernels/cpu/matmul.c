#include "kernels/cpu/ops.h"

#include <string.h>

/* Weight rows per tile: 16 rows of 576..1536 Q4_1 columns stay in L1/L2 while every activation
 * row passes over them, which is what makes an extend of k rows cost far less than k decodes. */
enum { TILE_ROWS = 16 };

void specd_quantize_rows(const specd_dtype_traits *vdt_traits, uint32_t vdt, const float *x,
                         int64_t ld_x, int64_t n_rows, int64_t n, void *dst) {
    const size_t rb = specd_dtype_row_bytes(vdt, n);
    for (int64_t r = 0; r < n_rows; r++) {
        char *d = (char *)dst + (size_t)r * rb;
        if (vdt == SPECD_DTYPE_F32)
            memcpy(d, x + r * ld_x, (size_t)n * sizeof(float));
        else
            vdt_traits->from_float(x + r * ld_x, d, n);
    }
}

void specd_matmul_rows(const specd_dtype_traits *w_traits, uint32_t w_type, const void *w,
                       int64_t n_in, int64_t o_begin, int64_t o_end, const void *xq,
                       size_t xq_row_bytes, int64_t n_rows, float *y, int64_t ld_y) {
    const size_t wrb = specd_dtype_row_bytes(w_type, n_in);
    for (int64_t t0 = o_begin; t0 < o_end; t0 += TILE_ROWS) {
        const int64_t t1 = t0 + TILE_ROWS < o_end ? t0 + TILE_ROWS : o_end;
        for (int64_t r = 0; r < n_rows; r++) {
            const void *xr = (const char *)xq + (size_t)r * xq_row_bytes;
            float *yr = y + r * ld_y;
            for (int64_t o = t0; o < t1; o++)
                w_traits->vec_dot(n_in, &yr[o], (const char *)w + (size_t)o * wrb, xr);
        }
    }
}
