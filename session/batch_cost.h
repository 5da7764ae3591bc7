/* What a batched step costs, and each sequence's share of it, for the adaptive guard.
 *
 * A host runs one forward over every sequence of a batch, so one sequence's wall clock from its
 * layout to its verify is the whole batch's time: it says nothing about what that sequence's
 * proposals cost. The forward's time is modelled as t = a + b R over the batch's R scored rows
 * (a: the fixed cost of a forward, weights read once; b: a row's marginal cost), fitted by least
 * squares over recent batches (older ones decay). A sequence with r rows in an n-sequence batch
 * is charged
 *     share = a / n + b r + (its own time inside specd: proposing, verifying)
 * so its guard compares what its proposals add to the batch (b per row plus proposing) with its
 * share of a plain batched step (a / n + b), not with a single sequence's forward. While the rows
 * per batch have not varied enough to separate a from b, the time is shared in proportion to rows
 * (a = 0: the cautious reading, every row costs the same). */
#ifndef SPECD_SESSION_BATCH_COST_H
#define SPECD_SESSION_BATCH_COST_H

#include <stdint.h>

typedef struct specd_batch_cost {
    double w, sr, srr, st, srt; /* decayed sums: weight, rows, rows^2, time, rows * time */
    double a, b;                /* the fit (ns, ns per row); valid when fitted */
    int fitted;
} specd_batch_cost;

/* Zero-initialise, or: */
void specd_batch_cost_init(specd_batch_cost *c);
/* One batch's forward (the host's part of its time): rows scored and nanoseconds. */
void specd_batch_cost_observe(specd_batch_cost *c, int32_t rows, double ns);
/* The forward time charged to a sequence with `rows` of the batch's `total_rows`, one of n_seqs,
 * for a batch whose forward took forward_ns. */
double specd_batch_cost_share(const specd_batch_cost *c, int32_t n_seqs, int32_t rows,
                              int32_t total_rows, double forward_ns);
/* The fit's time for `rows` rows: a + b rows; before a and b are separated, the mean time per
 * row times rows (every row costs the same: the cautious reading); 0 with nothing observed. The
 * adaptive guard fits a policy's catch-up with it (rows: the tokens caught up on). */
double specd_batch_cost_predict(const specd_batch_cost *c, double rows);

#endif
