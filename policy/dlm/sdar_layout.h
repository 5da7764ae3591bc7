/* The attention shape of an sdar step (policy/dlm/sdar.c): a causal head of base rows followed by one
 * bidirectional block, or, on an MRP spec step (paper 002 Alg. 3), by several packed copies of the
 * block. Internal to libspecd; pure functions, so the shape is testable without a model
 * (tests/policy/dlm/test_sdar_layout.c). */
#ifndef SPECD_POLICY_SDAR_LAYOUT_H
#define SPECD_POLICY_SDAR_LAYOUT_H

#include <stdint.h>

#define SPECD_SDAR_MAX_B 16 /* a refresh step runs 2B + 1 rows */

/* Where a block state must sit in the cache for its logits to be reproducible bit for bit by a
 * packed copy of it (pack=aligned). The CPU attention keeps llama.cpp's positional groupings
 * (kernels/cpu/attention.c, softmax.c): the softmax sums its exponentials in float over 8-column
 * chunks from column 0 (then in double across chunks), and the probability-weighted V sum keeps
 * 4 x 8 float lanes by column mod 32, each in ascending column order; masked columns add exact
 * zeros. So a copy reproduces the lone state's sums when (a) its first column is a multiple of
 * SPECD_SDAR_CHUNK_ALIGN in both (no chunk mixes the copy with the head's columns, which do not
 * move) and (b) copies start SPECD_SDAR_COPY_ALIGN columns apart (same V lanes). The rows in the
 * gaps are fillers. */
#define SPECD_SDAR_CHUNK_ALIGN 8
#define SPECD_SDAR_COPY_ALIGN 32

/* Writes the step's visibility matrix (specd_step_layout.visible): n_causal + n_block rows of
 * n_cached + n_causal + n_block bytes, 1 = the row may attend there.
 *  - head row r < n_causal: every cached row and the head rows 0..r (plain causal decoding: the
 *    pending row, and on a refresh step the finished block's tokens),
 *  - block row: every cached row, every head row and EVERY block row, before or after it
 *    (SDAR's bidirectional block).
 * No head row sees a block row, so the head's logits and KV are those of plain decoding whatever
 * the block holds. Same as specd_sdar_visible_copies with no lead and one copy. */
void specd_sdar_visible(uint8_t *vis, int32_t n_cached, int32_t n_causal, int32_t n_block);

/* Fillers after the head so that a block after a head ending at column n_head_end (exclusive:
 * n_cached + n_causal) starts at a multiple of SPECD_SDAR_CHUNK_ALIGN: 0..7. */
int32_t specd_sdar_lead(int64_t n_head_end);

/* Step rows after the head: n_lead fillers, then n_copies copies of n_block rows whose starts are
 * `stride` rows apart (stride >= n_block; n_copies >= 1). */
int32_t specd_sdar_copies_rows(int32_t n_lead, int32_t n_block, int32_t n_copies, int32_t stride);

/* The same with n_lead filler rows after the head and n_copies packed copies of the block (MRP's
 * spec step: copy c is the block with c more drafts revealed, every copy at the block's own
 * positions), copy c at step rows n_causal + n_lead + c * stride .. + n_block, fillers between
 * copies when stride > n_block. n_causal + specd_sdar_copies_rows(...) rows of n_cached plus that
 * many bytes.
 *  - head rows as above (they see no copy),
 *  - a row of copy c: every cached row, every head row and every row of copy c (bidirectional
 *    within its copy), and NO row of another copy nor a filler: each copy is the block state it
 *    stands for, run as if it were the only one,
 *  - a filler row: itself only (its output is not read; it sees a key so that its K and V are
 *    finite, since masked columns are weighted by 0 and 0 x inf is not 0). */
void specd_sdar_visible_copies(uint8_t *vis, int32_t n_cached, int32_t n_causal, int32_t n_lead,
                               int32_t n_block, int32_t n_copies, int32_t stride);

#endif
