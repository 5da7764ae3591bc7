#include "policy/dlm/simsd_layout.h"

#include <stddef.h>
#include <string.h>

int32_t specd_simsd_rows(int32_t b, int32_t first, const int32_t *token, const int32_t *tau,
                         const int32_t *draft, int rope_copy, specd_simsd_row *rows) {
    int32_t gamma = 0, n = 0;
    for (int32_t i = 0; i < b; i++)
        if (tau[i] > gamma) gamma = tau[i];
    for (int32_t i = 0; i < b; i++) /* data rows */
        if (token[i] >= 0 || tau[i] > 0)
            rows[n++] = (specd_simsd_row){
                .slot = i, .token = tau[i] > 0 ? draft[i] : token[i], .tau = tau[i], .pos = first + i};
    for (int32_t i = 0; i < b; i++) /* mask rows */
        if (token[i] < 0) {
            rows[n] = (specd_simsd_row){.slot = i,
                                        .token = -1,
                                        .tau = tau[i] > 0 ? tau[i] : gamma,
                                        .pos = rope_copy ? first + i : first + n};
            n++;
        }
    return n;
}

void specd_simsd_visible(uint8_t *vis, int32_t n_cached, int32_t n_head,
                         const specd_simsd_row *rows, int32_t n_rows) {
    const int32_t n_tok = n_head + n_rows;
    const size_t width = (size_t)n_cached + (size_t)n_tok;
    for (int32_t r = 0; r < n_tok; r++) {
        uint8_t *row = vis + (size_t)r * width;
        memset(row, 0, width);
        const int32_t prefix = r < n_head ? r + 1 : n_head;
        memset(row, 1, (size_t)n_cached + (size_t)prefix);
        if (r < n_head) continue;
        const specd_simsd_row *me = &rows[r - n_head];
        uint8_t *blk = row + n_cached + n_head;
        for (int32_t j = 0; j < n_rows; j++) {
            const int32_t ti = me->tau, tj = rows[j].tau;
            const int data_i = me->token >= 0, data_j = rows[j].token >= 0;
            blk[j] = data_i ? (data_j ? tj <= ti : tj > ti) : (data_j ? tj < ti : tj >= ti);
        }
    }
}
