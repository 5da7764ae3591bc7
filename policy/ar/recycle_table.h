/* Token Recycling's adjacency table (Luo et al. 2024): for every token t, the k tokens the target
 * most recently ranked highest after a row whose input was t, best first. The target's own
 * verified rows fill it (each row's top-k replaces its input token's entry), so it costs no
 * forward of its own; one table serves every sequence of a model (the policy's shared state).
 * n_vocab x k int32: 1.5 MiB for a 49,152-token vocabulary at k = 8. */
#ifndef SPECD_POLICY_AR_RECYCLE_TABLE_H
#define SPECD_POLICY_AR_RECYCLE_TABLE_H

#include <stdint.h>

#include "specd/status.h"

enum { SPECD_RECYCLE_MAX_K = 32 };

typedef struct specd_recycle_table {
    int32_t n_vocab;
    int32_t k;
    int32_t *next; /* n_vocab x k successor ids, best first; -1 = empty (an entry fills from 0) */
} specd_recycle_table;

/* An empty table (every entry -1). k in 1..SPECD_RECYCLE_MAX_K. Caller owns *out. */
specd_status specd_recycle_table_create(int32_t n_vocab, int32_t k, specd_recycle_table **out,
                                        specd_error *err);
void specd_recycle_table_destroy(specd_recycle_table *t);

/* token's k successors (best first, -1 past the filled ones), or NULL for an id outside the
 * vocabulary. Borrowed from t. */
const int32_t *specd_recycle_table_entry(const specd_recycle_table *t, int32_t token);

/* Replaces tokens[i]'s entry with the top-k of logits row i (logits + i * row_stride, n_vocab
 * finite floats; n_vocab is the rows' width and may differ from the table's, ids at or past the
 * table's vocabulary are left out). Ids outside the table's vocabulary as inputs are skipped. */
void specd_recycle_table_observe(specd_recycle_table *t, const int32_t *tokens, int32_t n_rows,
                                 const float *logits, int64_t row_stride, int32_t n_vocab);

/* Fills entries that are still empty from the successors seen in a token sequence (prompt
 * bigrams): for each token, the distinct tokens that followed it, the latest first. Entries the
 * target already filled are left alone (its ranking is the better guess). */
void specd_recycle_table_seed(specd_recycle_table *t, const int32_t *tokens, int64_t n);

/* The k largest of x[0..n) in one pass: ids[0..m) by value descending, ties to the lower index,
 * m = min(k, n) returned; k in 1..SPECD_RECYCLE_MAX_K. */
int32_t specd_recycle_topk(const float *x, int32_t n, int32_t k, int32_t *ids);

#endif
