/* WeDLM streaming parallel decoding (paper 003, §5.2, Algorithm 1): the window of W slots and the
 * rules that act on it each step. Internal to libspecd; pure functions on a plain value, no model.
 *
 * The window holds W consecutive LOGICAL positions n..n+W-1 in slot order; each slot is a mask or
 * a filled (predicted, uncommitted) token. One step:
 *   (a) specd_wedlm_order      physical rows: filled slots first, masks after, logical positions
 *                              kept as position ids (eqs. 5-6, Alg. 1 line 4)
 *   (b) the causal forward     (the policy)
 *   (c) specd_wedlm_commit_run the leftmost contiguous filled run in LOGICAL order (line 6): its
 *                              KV saw only the prefix and earlier filled slots (cache-valid);
 *                              a filled slot after a mask never saw that mask's token, so its KV is
 *                              dropped and it is recomputed (the prose of §5.2, not line 6 taken
 *                              literally)
 *   (d) specd_wedlm_select     eq. 11 over the masks still in the window (line 10)
 *   (e) specd_wedlm_advance    drop the committed run, append one mask per committed token
 *                              (line 12), so the window keeps W slots. */
#ifndef SPECD_POLICY_WEDLM_SELECT_H
#define SPECD_POLICY_WEDLM_SELECT_H

#include "policy/dlm/dlm_commit.h"
#include "specd/status.h"

#include <stdint.h>

#define SPECD_WEDLM_MAX_W 64

typedef struct specd_wedlm_window {
    int32_t w;                        /* slots, 1..SPECD_WEDLM_MAX_W */
    int64_t first;                    /* logical position of slot 0 */
    int32_t token[SPECD_WEDLM_MAX_W]; /* filled token, -1 for a mask */
} specd_wedlm_window;

/* W masks at logical positions first..first+W-1 (Alg. 1 line 2). */
specd_status specd_wedlm_window_init(specd_wedlm_window *win, int32_t w, int64_t first,
                                     specd_error *err);

/* Step row order: row_slot[r] is the slot at physical row r, row_pos[r] its logical position;
 * filled slots ascending, then masks ascending. Returns the number of filled rows (the masks start
 * at that row). Both arrays hold win->w entries. */
int32_t specd_wedlm_order(const specd_wedlm_window *win, int32_t *row_slot, int64_t *row_pos);

/* Length of the leftmost contiguous filled run: min{i : slot i is a mask}, or w if none. */
int32_t specd_wedlm_commit_run(const specd_wedlm_window *win);

/* Drops the first n slots (committed) and appends n masks after the last logical position. */
specd_status specd_wedlm_advance(specd_wedlm_window *win, int32_t n, specd_error *err);

/* Eq. 11 selection. pos[i] is slot i's prediction (read for masks only), masked[i] != 0 for a
 * mask. H~_i = H_i + lambda * d_i with d_i = i - (leftmost masked slot), the distance in logical
 * positions to the leftmost remaining mask; fill[i] = 1 where H~_i < tau. When none passes, the
 * mask with the smallest H~ (leftmost on ties) is filled, so every step makes progress (the
 * paper's Alg. 1 can fill nothing and stall). *n_fill counts the fills. Fails (outputs untouched)
 * on no mask, a mask with a NaN or negative entropy (SPECD_E_NUMERIC), NaN tau/lambda or
 * lambda < 0. */
specd_status specd_wedlm_select(const specd_dlm_pos *pos, const uint8_t *masked, int32_t n,
                                float tau, float lambda, uint8_t *fill, int32_t *n_fill,
                                specd_error *err);

/* p_cache (eq. 4) and TPF bookkeeping. */
typedef struct specd_wedlm_stats {
    int64_t n_gen;   /* tokens committed (N_gen) */
    int64_t n_fwd;   /* token instances processed by decoding forwards after prefill (N_fwd) */
    int64_t n_steps; /* decoding forwards */
} specd_wedlm_stats;

/* One forward of `rows` rows that committed `committed` tokens. */
void specd_wedlm_stats_step(specd_wedlm_stats *st, int32_t rows, int32_t committed);
/* p_cache = N_gen / N_fwd (eq. 4); 0 before any forward. */
double specd_wedlm_p_cache(const specd_wedlm_stats *st);
/* tokens per forward = N_gen / forwards; 0 before any forward. */
double specd_wedlm_tpf(const specd_wedlm_stats *st);

#endif
