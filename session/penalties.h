/* The three sampling penalties (specd/processor.h, specd_penalties_params) as a row processor:
 * per-sequence counts of the committed tokens, and per row the path's drafts counted on top, so a
 * draft's row is penalised exactly as plain decoding would penalise that position. */
#ifndef SPECD_SESSION_PENALTIES_H
#define SPECD_SESSION_PENALTIES_H

#include "specd/processor.h"

typedef struct specd_penalties specd_penalties;

/* 1 when p changes anything (not the neutral 0, 0, 1). */
int specd_penalties_active(const specd_penalties_params *p);
/* Checks the ranges of specd/processor.h (finite; presence and frequency in [-2, 2];
 * repetition in (0, 10]). */
specd_status specd_penalties_check(const specd_penalties_params *p, specd_error *err);

/* State for one sequence whose prompt is prompt[0..n_prompt) (ids < n_vocab, checked by the
 * caller). Caller owns *out (specd_penalties_destroy). */
specd_status specd_penalties_create(const specd_penalties_params *p, int32_t n_vocab,
                                    const int32_t *prompt, int64_t n_prompt,
                                    specd_penalties **out, specd_error *err);
void specd_penalties_destroy(specd_penalties *pen);

/* The processor over pen (borrowed: pen must outlive its use). */
specd_row_processor specd_penalties_processor(specd_penalties *pen);

#endif
