/* Row processors in the spec session (specd/processor.h): set up at open, consulted at layout
 * (admit cuts drafts, forced adds them) and at verify (each scored row transformed under its own
 * path), told of every committed token. Drafter-shaped steps only: open refuses the rest. */
#ifndef SPECD_SESSION_SPEC_PROCESSOR_H
#define SPECD_SESSION_SPEC_PROCESSOR_H

#include "session/spec_internal.h"

/* Takes p's penalties and processor for q (prompt: its prompt), or refuses them where they
 * cannot apply (SPECD_E_UNSUPPORTED) or are out of range. No processor: nothing to do. */
specd_status specd_seq_proc_open(const specd_spec *spec, spec_seq *q, const int32_t *prompt,
                                 int64_t n_prompt, const specd_seq_params *p, specd_error *err);
void specd_seq_proc_release(spec_seq *q);

/* Layout: cuts q's chain (q->draft[0..n_draft)) at the first draft a processor does not admit. */
void specd_seq_proc_admit_chain(spec_seq *q);
/* Layout: drops the tree nodes (q->draft, q->tree_parent, q->q rows when has_q) a processor
 * does not admit, with their subtrees; *n nodes before and after. */
void specd_seq_proc_admit_tree(spec_seq *q, int32_t n_vocab, int32_t *n);
/* Layout: appends forced drafts to q's chain, up to max in all (one-hot q rows when has_q). */
void specd_seq_proc_force(spec_seq *q, int32_t max, int32_t n_vocab);

/* Verify: the step's rows [row0, row0 + n_step_rows) of lg, each transformed under its path,
 * then through the logits intake: *rows as specd_logits_intake gives them. */
specd_status specd_seq_proc_rows(specd_spec *spec, spec_seq *q, const specd_logits *lg,
                                 int32_t row0, const char *what, const float **rows,
                                 specd_error *err);

/* tokens[0..n) joined q's history (already appended to it). */
void specd_seq_proc_commit(spec_seq *q, const int32_t *tokens, int32_t n);

#endif
