/* A grammar as a row processor (specd/processor.h): the session masks every row it samples or
 * verifies with the grammar's state after that row's path, cuts drafts the grammar forbids before
 * the target runs, and proposes the tokens the grammar forces (jump-forward drafts, verified like
 * any other). Plain decoding with the same processor emits the same tokens, so a lossless policy
 * stays lossless under the grammar.
 *
 * The grammar applies to the output only: the prompt's tokens in a row's path are skipped. The
 * processor's state is a function of the path the session hands it (it replays what it has not
 * seen), so it needs no commit callback and follows rollbacks.
 *
 * Ownership: the processor borrows its grammar (which must outlive it) and is one sequence's
 * state: pass specd_grammar_processor_ops(p) as specd_seq_params.processor and destroy p after
 * the sequence closes. Grammar drafts can be turned off (jump_forward 0) to measure them. */
#ifndef SPECD_GRAMMAR_PROCESSOR_H
#define SPECD_GRAMMAR_PROCESSOR_H

#include "specd/api.h"

#include <stdint.h>

#include "specd/grammar.h"
#include "specd/processor.h"
#include "specd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct specd_grammar_processor specd_grammar_processor;

typedef struct specd_grammar_processor_stats {
    int64_t n_rows;    /* rows masked */
    int64_t n_cut;     /* drafts cut as forbidden */
    int64_t n_forced;  /* tokens proposed by jump-forward */
    uint64_t mask_ns;  /* time spent masking rows (for the per-token cost) */
} specd_grammar_processor_stats;

/* jump_forward: propose the grammar's forced tokens as drafts (1) or not (0). */
SPECD_API specd_status specd_grammar_processor_create(const specd_grammar *g, int jump_forward,
                                                      specd_grammar_processor **out,
                                                      specd_error *err);
SPECD_API void specd_grammar_processor_destroy(specd_grammar_processor *p);
/* The callbacks, with user = p. */
SPECD_API specd_row_processor specd_grammar_processor_ops(specd_grammar_processor *p);
SPECD_API void specd_grammar_processor_get_stats(const specd_grammar_processor *p,
                                                 specd_grammar_processor_stats *out);

#ifdef __cplusplus
}
#endif
#endif
