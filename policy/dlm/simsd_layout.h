/* The target's verification step of SimSD (paper 004 §3.1-3.2; policy/dlm/simsd.c): the block's data
 * and mask rows, their token-level temporal attention mask (eq. 1) and the RoPE copy. Internal to
 * libspecd; pure functions, so the layout is testable without a model
 * (tests/policy/dlm/test_simsd_layout.c) and the same rows feed the policy, the sequential-replay
 * reference and the bench (policy/dlm/simsd_replay.h, bench/simsd).
 *
 * A block of B slots, gamma of them drafted this step (draft step tau = 1..gamma, in the
 * drafter's order), some decided before (earlier rounds of the block), the rest still masked:
 *   decided slot    one data row D (its token), tau 0
 *   drafted slot    a data row D (the draft) and a mask row D~ (its verification slot), tau = r
 *   masked slot     one mask row, tau = gamma: like D~_{o_gamma} it sees the drafts before the
 *                   last and every D~ sees it, so no row but its own sees the last draft, as in
 *                   the paired layout (a label after the last step would let the last draft
 *                   reach every p^(r) two hops away)
 * Data rows first, then mask rows, each in slot order. Eq. (1) over every pair of block rows:
 *   data i sees data j with tau_j <= tau_i and mask j with tau_j > tau_i,
 *   mask i sees data j with tau_j < tau_i and mask j with tau_j >= tau_i,
 * so D~_{o_r} sees the block as it stood at draft step r: the decided slots and the earlier drafts
 * as tokens, the rest as masks. With gamma = B and nothing decided this is the paper's paired
 * layout of 2B rows (§3.1); with gamma < B it is that layout cut to the drafted slots (§3.2). */
#ifndef SPECD_POLICY_SIMSD_LAYOUT_H
#define SPECD_POLICY_SIMSD_LAYOUT_H

#include <stdint.h>

#define SPECD_SIMSD_MAX_B 16
#define SPECD_SIMSD_MAX_ROWS (2 * SPECD_SIMSD_MAX_B)

typedef struct specd_simsd_row {
    int32_t slot;  /* block slot 0..B-1 */
    int32_t token; /* data rows: the token; mask rows: -1 */
    int32_t tau;   /* temporal label (above) */
    int32_t pos;   /* position id */
} specd_simsd_row;

/* The block rows of one verification step. token[i]: slot i's decided token or -1; tau[i]: the
 * draft step (1..gamma) of a slot drafted this step, else 0; draft[i]: its draft. Mask rows carry
 * their slot's position (the RoPE copy), or with rope_copy = 0 their physical place after the
 * data rows (first + row index: the paper's Table 4 ablation, "continuing after the reference
 * context"). Returns the row count (data rows, then mask rows). */
int32_t specd_simsd_rows(int32_t b, int32_t first, const int32_t *token, const int32_t *tau,
                         const int32_t *draft, int rope_copy, specd_simsd_row *rows);

/* Writes the step's visibility matrix (specd_step_layout.visible): n_head + n_rows rows of
 * n_cached + n_head + n_rows bytes, 1 = may attend. Head rows (the pending token, and on a commit
 * step the finished block) are plain causal and never see the block; every block row sees the
 * cache and the head, and the other block rows by eq. (1). is_mask(row) = row.token < 0. */
void specd_simsd_visible(uint8_t *vis, int32_t n_cached, int32_t n_head,
                         const specd_simsd_row *rows, int32_t n_rows);

#endif
