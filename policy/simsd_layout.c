#include "policy/simsd_layout.h"

#include <stddef.h>
#include <string.h>

void specd_simsd_visible(uint8_t *vis, int32_t n_cached, int32_t n_head, int32_t b,
                         const int32_t *tau) {
    const int32_t n_tok = n_head + 2 * b;
    const size_t width = (size_t)n_cached + (size_t)n_tok;
    for (int32_t r = 0; r < n_tok; r++) {
        uint8_t *row = vis + (size_t)r * width;
        memset(row, 0, width);
        const int32_t prefix = r < n_head ? r + 1 : n_head;
        memset(row, 1, (size_t)n_cached + (size_t)prefix);
        if (r < n_head) continue;
        const int data_row = r < n_head + b;
        const int32_t ti = tau[(r - n_head) % b];
        uint8_t *d = row + n_cached + n_head, *m = d + b;
        for (int32_t j = 0; j < b; j++) {
            const int32_t tj = tau[j];
            d[j] = data_row ? tj <= ti : tj < ti;
            m[j] = data_row ? tj > ti : tj >= ti;
        }
    }
}

void specd_simsd_positions(int32_t *pos, int32_t first, int32_t b, int rope_copy) {
    for (int32_t i = 0; i < b; i++) {
        pos[i] = first + i;
        pos[b + i] = first + (rope_copy ? 0 : b) + i;
    }
}
