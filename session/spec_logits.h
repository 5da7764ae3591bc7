/* Logits intake for the spec session: turns a host's logits block (specd_logits: any dtype,
 * stride and device) into the rows the acceptance engine reads (f32, n_vocab apart, on the host,
 * every value finite).
 *
 * Masks. Host engines mask tokens with -inf (vocabulary padding, grammars) or with their dtype's
 * lowest finite value (PyTorch's torch.finfo(dtype).min). The acceptance engine bans such entries
 * itself too (verifier/accept/xform.c); the session still replaces each by a finite floor first,
 * because its rows also feed policies and statistics that expect finite values. The floor F lies
 * below every unmasked logit by a margin that makes it unreachable under the sequence's
 * transform:
 *     F = m + b_min - b_max - 128 T - 1
 * where m is the row's least unmasked logit, b_min <= 0 <= b_max bound the finite logit biases
 * and T is the temperature (0 when greedy). After biasing and dividing by T, a masked token's z is
 * at least 128 below some unmasked, unbanned token's, so zmax - z > 128: its weight
 * exp(z - zmax) is exactly 0 (specd_fast_exp_neg flushes below -86.6), it cannot win the keyed
 * Gumbel argmax (Gumbel noise spans less than 20), nor the greedy argmax, nor a top-k/top-p/min-p
 * cut with any mass; so it is never sampled and never accepted, as if it were banned. A row whose
 * every token is masked or banned by the bias is SPECD_E_NUMERIC. NaN and +inf stay errors. */
#ifndef SPECD_SESSION_SPEC_LOGITS_H
#define SPECD_SESSION_SPEC_LOGITS_H

#include "specd/spec_batch.h"

#include <stddef.h>

/* What a sequence's transform needs for the mask floor. */
typedef struct specd_mask_rule {
    float temperature;       /* 0 for greedy */
    float bias_min, bias_max; /* over finite biases; bias_min <= 0 <= bias_max */
    const int32_t *banned;   /* tokens the bias bans (-inf), or NULL */
    int32_t n_banned;
} specd_mask_rule;

/* Scratch the intake owns (per spec; calls are not concurrent). Zero-initialise. */
typedef struct specd_logits_scratch {
    float *rows;     /* max_rows x n_vocab */
    int32_t max_rows;
    void *stage;     /* device copies land here, in the source dtype */
    size_t stage_bytes;
} specd_logits_scratch;

void specd_logits_scratch_free(specd_logits_scratch *s);

/* Reads rows [row0, row0 + n_rows) of lg (n_rows <= max_rows) and points *rows at n_rows
 * finite f32 rows of n_vocab: lg's own memory when it already is that, else the scratch. what
 * names the caller in messages ("sequence 3"). rule NULL: not logits (hidden states): nothing is
 * a mask, and -inf is an error like NaN.
 * flat_ok (NULL = none): per row, 1 when NaN/+inf there is not an error but turns the whole row
 * flat (every logit 0): the LoRA-gated mask rows of a self-speculative step, whose logits only
 * seed proposals the base rows verify, so the output cannot change; *n_flat (may be NULL)
 * counts such rows. */
specd_status specd_logits_intake(specd_logits_scratch *s, int32_t max_rows, int32_t n_vocab,
                                 const specd_logits *lg, int32_t row0, int32_t n_rows,
                                 const specd_mask_rule *rule, const char *what,
                                 const uint8_t *flat_ok, int32_t *n_flat, const float **rows,
                                 specd_error *err);

/* For a row processor (specd/processor.h): copies rows [row0, row0 + n_rows) of lg into the
 * scratch as f32 (n_vocab apart; *rows points there, writable until the scratch's next use),
 * every mask (a value at or below the dtype's lowest) as -inf, so a transform cannot lift a
 * masked token; NaN and +inf are left for specd_logits_intake of the result to refuse. */
specd_status specd_logits_copy(specd_logits_scratch *s, int32_t max_rows, int32_t n_vocab,
                               const specd_logits *lg, int32_t row0, int32_t n_rows,
                               const char *what, float **rows, specd_error *err);

/* The lowest finite value of a dtype, as f32: entries at or below it are masks. */
float specd_dtype_lowest(specd_dtype dtype);

#endif
