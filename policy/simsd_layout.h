/* The target's verification step of SimSD (paper 004 §3.1-3.2; policy/simsd.c): the paired
 * data / mask rows of one block, their token-level temporal attention mask (eq. 1) and the RoPE
 * copy. Internal to libspecd; pure functions, so the layout is testable without a model
 * (tests/policy/test_simsd_layout.c) and the same rows feed the policy and the precision tool
 * (tests/policy/test_simsd_model.c, bench/simsd). */
#ifndef SPECD_POLICY_SIMSD_LAYOUT_H
#define SPECD_POLICY_SIMSD_LAYOUT_H

#include <stdint.h>

#define SPECD_SIMSD_MAX_B 16

/* Step rows: n_head causal head rows (the pending token, and on a commit step the finished
 * block's tokens), then the B data rows D (slot i holds the draft of block slot i), then the B
 * mask rows D~ (slot i's verification slot). tau[i] in 1..B is slot i's draft step (the drafter
 * decided slot i at its step tau[i]; a permutation). Writes the visibility matrix
 * (specd_step_layout.visible): n_head + 2B rows of n_cached + n_head + 2B bytes:
 *  - head row r: every cached row and head rows 0..r (plain causal decoding),
 *  - every block row: every cached row and every head row (the prefix, tau 0), and
 *    D_i: D_j with tau_j <= tau_i and D~_j with tau_j > tau_i,
 *    D~_i: D_j with tau_j < tau_i and D~_j with tau_j >= tau_i   (eq. 1).
 * So D~_i sees the block as it stood when the drafter decided slot i: the earlier drafts as
 * tokens, the rest as masks. */
void specd_simsd_visible(uint8_t *vis, int32_t n_cached, int32_t n_head, int32_t b,
                         const int32_t *tau);

/* Position ids of the 2B block rows (D then D~) of a block whose slot 0 is at logical position
 * first: D_i at first + i; D~_i at first + i with the RoPE copy (§3.1: each mask row reuses its
 * data row's position), else at first + B + i (the paper's Table 4 ablation: "physically
 * continued" positions). */
void specd_simsd_positions(int32_t *pos, int32_t first, int32_t b, int rope_copy);

#endif
