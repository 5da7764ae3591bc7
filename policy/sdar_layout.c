#include "policy/sdar_layout.h"

#include <stddef.h>
#include <string.h>

void specd_sdar_visible(uint8_t *vis, int32_t n_cached, int32_t n_causal, int32_t n_block) {
    const int32_t n_tok = n_causal + n_block;
    const size_t width = (size_t)n_cached + (size_t)n_tok;
    for (int32_t r = 0; r < n_tok; r++) {
        uint8_t *row = vis + (size_t)r * width;
        const int32_t upto = r < n_causal ? r + 1 : n_tok; /* step rows 0..upto-1 */
        memset(row, 1, (size_t)n_cached + (size_t)upto);
        memset(row + (size_t)n_cached + (size_t)upto, 0, (size_t)(n_tok - upto));
    }
}
