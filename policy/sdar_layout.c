#include "policy/sdar_layout.h"

#include <stddef.h>
#include <string.h>

void specd_sdar_visible_copies(uint8_t *vis, int32_t n_cached, int32_t n_causal, int32_t n_block,
                               int32_t n_copies) {
    const int32_t n_tok = n_causal + n_copies * n_block;
    const size_t width = (size_t)n_cached + (size_t)n_tok;
    for (int32_t r = 0; r < n_tok; r++) {
        uint8_t *row = vis + (size_t)r * width;
        memset(row, 0, width);
        if (r < n_causal) { /* the cache and head rows 0..r */
            memset(row, 1, (size_t)n_cached + (size_t)r + 1);
            continue;
        }
        /* the cache, the whole head, and the rows of its own copy */
        const int32_t copy0 = n_causal + (r - n_causal) / n_block * n_block;
        memset(row, 1, (size_t)n_cached + (size_t)n_causal);
        memset(row + (size_t)n_cached + (size_t)copy0, 1, (size_t)n_block);
    }
}

void specd_sdar_visible(uint8_t *vis, int32_t n_cached, int32_t n_causal, int32_t n_block) {
    specd_sdar_visible_copies(vis, n_cached, n_causal, n_block, 1);
}
