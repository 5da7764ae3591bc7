/* WeDLM streaming decoding rules (paper 003, §5.2, Alg. 1): see wedlm_select.h. */
#include "policy/dlm/wedlm_select.h"

#include "common/status_internal.h"

#include <math.h>
#include <string.h>

specd_status specd_wedlm_window_init(specd_wedlm_window *win, int32_t w, int64_t first,
                                     specd_error *err) {
    if (!win || w < 1 || w > SPECD_WEDLM_MAX_W || first < 0)
        return specd_fail(err, SPECD_E_INVALID_ARG, "wedlm: window %d must be in 1..%d", (int)w,
                          SPECD_WEDLM_MAX_W);
    win->w = w;
    win->first = first;
    for (int32_t i = 0; i < SPECD_WEDLM_MAX_W; i++)
        win->token[i] = -1;
    return SPECD_OK;
}

int32_t specd_wedlm_order(const specd_wedlm_window *win, int32_t *row_slot, int64_t *row_pos) {
    int32_t r = 0;
    for (int32_t pass = 0; pass < 2; pass++) /* pass 0: filled, pass 1: masks */
        for (int32_t i = 0; i < win->w; i++)
            if ((win->token[i] >= 0) == (pass == 0)) {
                row_slot[r] = i;
                row_pos[r] = win->first + i;
                r++;
            }
    int32_t filled = 0;
    for (int32_t i = 0; i < win->w; i++)
        filled += win->token[i] >= 0;
    return filled;
}

int32_t specd_wedlm_commit_run(const specd_wedlm_window *win) {
    int32_t n = 0;
    while (n < win->w && win->token[n] >= 0)
        n++;
    return n;
}

specd_status specd_wedlm_advance(specd_wedlm_window *win, int32_t n, specd_error *err) {
    if (!win || n < 0 || n > win->w)
        return specd_fail(err, SPECD_E_INVALID_ARG, "wedlm: cannot advance by %d", (int)n);
    memmove(win->token, win->token + n, (size_t)(win->w - n) * sizeof win->token[0]);
    for (int32_t i = win->w - n; i < win->w; i++)
        win->token[i] = -1;
    win->first += n;
    return SPECD_OK;
}

specd_status specd_wedlm_select(const specd_dlm_pos *pos, const uint8_t *masked, int32_t n,
                                float tau, float lambda, uint8_t *fill, int32_t *n_fill,
                                specd_error *err) {
    if (!pos || !masked || !fill || !n_fill || n < 1 || isnan(tau) || !(lambda >= 0.0f))
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "wedlm select: bad window (n %d), tau %g or lambda %g", (int)n,
                          (double)tau, (double)lambda);
    int32_t left = -1;
    for (int32_t i = 0; i < n; i++) {
        if (!masked[i]) continue;
        if (!(pos[i].entropy >= 0.0f) || isinf(pos[i].entropy)) /* NaN fails the >= */
            return specd_fail(err, SPECD_E_NUMERIC, "wedlm select: slot %d entropy %g", (int)i,
                              (double)pos[i].entropy);
        if (left < 0) left = i;
    }
    if (left < 0) return specd_fail(err, SPECD_E_STATE, "wedlm select: no mask among %d", (int)n);
    int32_t k = 0, best = -1;
    double best_h = 0.0;
    for (int32_t i = 0; i < n; i++) {
        fill[i] = 0;
        if (!masked[i]) continue;
        const double ht = (double)pos[i].entropy + (double)lambda * (double)(i - left); /* eq. 11 */
        if (ht < (double)tau) {
            fill[i] = 1;
            k++;
        }
        if (best < 0 || ht < best_h) {
            best = i;
            best_h = ht;
        }
    }
    if (k == 0) {
        fill[best] = 1;
        k = 1;
    }
    *n_fill = k;
    return SPECD_OK;
}

void specd_wedlm_stats_step(specd_wedlm_stats *st, int32_t rows, int32_t committed) {
    st->n_fwd += rows > 0 ? rows : 0;
    st->n_gen += committed > 0 ? committed : 0;
    st->n_steps++;
}

double specd_wedlm_p_cache(const specd_wedlm_stats *st) {
    return st->n_fwd > 0 ? (double)st->n_gen / (double)st->n_fwd : 0.0;
}

double specd_wedlm_tpf(const specd_wedlm_stats *st) {
    return st->n_steps > 0 ? (double)st->n_gen / (double)st->n_steps : 0.0;
}
