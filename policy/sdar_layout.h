/* The attention shape of an sdar step (policy/sdar.c): a causal head of base rows followed by one
 * bidirectional block, or, on an MRP spec step (paper 002 Alg. 3), by several packed copies of the
 * block. Internal to libspecd; pure functions, so the shape is testable without a model
 * (tests/policy/test_sdar_layout.c). */
#ifndef SPECD_POLICY_SDAR_LAYOUT_H
#define SPECD_POLICY_SDAR_LAYOUT_H

#include <stdint.h>

#define SPECD_SDAR_MAX_B 16 /* a refresh step runs 2B + 1 rows */

/* Writes the step's visibility matrix (specd_step_layout.visible): n_causal + n_block rows of
 * n_cached + n_causal + n_block bytes, 1 = the row may attend there.
 *  - head row r < n_causal: every cached row and the head rows 0..r (plain causal decoding: the
 *    pending row, and on a refresh step the finished block's tokens),
 *  - block row: every cached row, every head row and EVERY block row, before or after it
 *    (SDAR's bidirectional block).
 * No head row sees a block row, so the head's logits and KV are those of plain decoding whatever
 * the block holds. Same as specd_sdar_visible_copies with one copy. */
void specd_sdar_visible(uint8_t *vis, int32_t n_cached, int32_t n_causal, int32_t n_block);

/* The same with n_copies packed copies of the block after the head (MRP's spec step: copy c is the
 * block with c more drafts revealed, every copy at the block's own positions): n_causal +
 * n_copies * n_block rows of n_cached + n_causal + n_copies * n_block bytes.
 *  - head rows as above (they see no copy),
 *  - a row of copy c: every cached row, every head row and every row of copy c (bidirectional
 *    within its copy), and NO row of another copy: each copy is the block state it stands for,
 *    run as if it were the only one, so its logits are those of a step over that state alone.
 * n_copies >= 1. */
void specd_sdar_visible_copies(uint8_t *vis, int32_t n_cached, int32_t n_causal, int32_t n_block,
                               int32_t n_copies);

#endif
