#include "policy/dlm/sdar_layout.h"

#include <stddef.h>
#include <string.h>

int32_t specd_sdar_lead(int64_t n_head_end) {
    return (int32_t)((SPECD_SDAR_CHUNK_ALIGN - n_head_end % SPECD_SDAR_CHUNK_ALIGN) %
                     SPECD_SDAR_CHUNK_ALIGN);
}

int32_t specd_sdar_copies_rows(int32_t n_lead, int32_t n_block, int32_t n_copies, int32_t stride) {
    return n_lead + (n_copies - 1) * stride + n_block;
}

void specd_sdar_visible_copies(uint8_t *vis, int32_t n_cached, int32_t n_causal, int32_t n_lead,
                               int32_t n_block, int32_t n_copies, int32_t stride) {
    const int32_t n_tok = n_causal + specd_sdar_copies_rows(n_lead, n_block, n_copies, stride);
    const size_t width = (size_t)n_cached + (size_t)n_tok;
    for (int32_t r = 0; r < n_tok; r++) {
        uint8_t *row = vis + (size_t)r * width;
        memset(row, 0, width);
        if (r < n_causal) { /* the cache and head rows 0..r */
            memset(row, 1, (size_t)n_cached + (size_t)r + 1);
            continue;
        }
        const int32_t off = r - n_causal - n_lead;
        if (off < 0 || off % stride >= n_block) { /* a filler: itself */
            row[(size_t)n_cached + (size_t)r] = 1;
            continue;
        }
        /* the cache, the whole head, and the rows of its own copy */
        const int32_t copy0 = n_causal + n_lead + off / stride * stride;
        memset(row, 1, (size_t)n_cached + (size_t)n_causal);
        memset(row + (size_t)n_cached + (size_t)copy0, 1, (size_t)n_block);
    }
}

void specd_sdar_visible(uint8_t *vis, int32_t n_cached, int32_t n_causal, int32_t n_block) {
    specd_sdar_visible_copies(vis, n_cached, n_causal, 0, n_block, 1, n_block);
}
