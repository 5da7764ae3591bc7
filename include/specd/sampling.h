/* The sampling transform and keyed (coupled) sampling.
 *
 * One transform serves plain decoding, drafting and verification, so the three cannot drift
 * apart: a draft equals the target's keyed sample exactly when plain decoding would emit it. For
 * a logits row l over V tokens and params (temperature T, logit bias b, top-k, top-p, min-p):
 *   1. l'[x] = l[x] + b[x] for biased tokens (b = -INFINITY bans a token), l'[x] = l[x] otherwise.
 *   2. T == 0: the result is greedy, argmax l' (lowest index wins ties); steps 3-6 do not apply.
 *   3. z[x] = l'[x] / T (IEEE division), zmax = max z, e[x] = exp(z[x] - zmax) with the fixed
 *      polynomial of common/fastmath.h (so CPU and CUDA agree bit for bit).
 *   4. top-k (k > 0): keep the k largest z, ordered by z descending then index ascending.
 *   5. top-p (p < 1): over the top-k survivors in that order, keep the shortest prefix whose
 *      sequential float sum of e reaches p * Z, Z = the lane sum of e over the survivors.
 *   6. min-p (m > 0): keep only tokens with e[x] >= m (e at the maximum is exactly 1).
 * The distribution is P(x) = e[x] / Z over the kept tokens (Z summed over kept tokens in the
 * fixed order: 256 lanes, lane j adds tokens j, j+256, ... in order, then lanes are combined by a
 * pairwise tree j += j + s for s = 128, 64, ..., 1 — the layout of one 256-thread CUDA block).
 *
 * Keyed sampling: the token at (seed, sequence, position) is
 *     argmax over kept x of  z[x] + G(x),   G(x) = -ln(-ln u(x))
 * with u(x) from Philox4x32-10 (Random123) under
 *     key     = { seed & 0xffffffff, seed >> 32 }
 *     counter = { x >> 2, position, sequence, purpose }      word x & 3 of the output
 *     u       = ((word >> 9) + 0.5) * 2^-23                  exact, in (0, 1)
 * and ln from common/fastmath.h; ties go to the lowest index. This is the Gumbel-max trick: the
 * token is distributed as P. It depends only on (seed, sequence, position, row), never on batch
 * composition or thread count, so plain decoding and speculative verification that use it emit
 * identical tokens. Purposes keep the streams of one position apart.
 */
#ifndef SPECD_SAMPLING_H
#define SPECD_SAMPLING_H

#include "specd/api.h"

#include <stddef.h>
#include <stdint.h>

#include "specd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Philox counter word 3: which stream of a position the numbers belong to. */
typedef enum specd_rng_purpose {
    SPECD_RNG_SAMPLE = 0,   /* the target's keyed sample (plain decoding, coupled verify, bonus) */
    SPECD_RNG_DRAFT = 1,    /* a drafter sampling its own proposals (specd_sampler_sample_draft) */
    SPECD_RNG_ACCEPT = 2,   /* the uniform of the min(1, p/q) test; counter word 0 = node */
    SPECD_RNG_RESIDUAL = 3, /* the uniform drawing from max(0, p - q) after a rejection */
    SPECD_RNG_BONUS = 4     /* the uniform drawing REJECTION's bonus token from p */
} specd_rng_purpose;

/* Where a sample sits: its Philox key and counter words. Plain value type. */
typedef struct specd_sample_key {
    uint64_t seed;
    uint32_t sequence;
    uint32_t position; /* absolute position of the token being sampled */
} specd_sample_key;

/* The sampling key of a token at position under (seed, stream): what every sampling decision of
 * a sequence opened with that seed and stream key uses (so a host that samples plain steps
 * itself can reproduce specd's tokens with specd_sampler_sample). The Philox key is the seed
 * itself when stream < 2^32 (v1's keys: stream = sequence id), else a 64-bit mix of seed and
 * stream >> 32; the counter's sequence word is stream & 0xffffffff. */
SPECD_API specd_sample_key specd_stream_sample_key(uint64_t seed, uint64_t stream, uint32_t position);

typedef struct specd_logit_bias {
    int32_t token;
    float bias; /* finite, or -INFINITY to ban the token */
} specd_logit_bias;

typedef struct specd_sampling_params {
    float temperature; /* >= 0; 0 = greedy */
    int32_t top_k;     /* 0 = off */
    float top_p;       /* (0, 1]; 1 = off */
    float min_p;       /* [0, 1); 0 = off */
    const specd_logit_bias *bias; /* borrowed for the create call only (copied); may be NULL */
    size_t n_bias;
} specd_sampling_params;

/* temperature 1, no filters, no bias. */
SPECD_API specd_sampling_params specd_sampling_default_params(void);

/* A sampler: the validated transform plus scratch for rows of up to max_vocab tokens. Calls on
 * one sampler must not run concurrently (they share the scratch); use one sampler per thread. */
typedef struct specd_sampler specd_sampler;

/* Checks params (finite T >= 0, top_p in (0,1], min_p in [0,1), top_k >= 0, bias tokens >= 0 and
 * unique, bias finite or -inf) and max_vocab >= 1. *out: caller owns; specd_sampler_destroy. */
SPECD_API specd_status specd_sampler_create(const specd_sampling_params *params, int32_t max_vocab,
                                  specd_sampler **out, specd_error *err);
SPECD_API void specd_sampler_destroy(specd_sampler *sampler);

/* The keyed sample (purpose SPECD_RNG_SAMPLE) of one logits row of n_vocab floats: what plain
 * decoding emits at key.position. Errors: n_vocab outside [1, max_vocab] or a bias token
 * >= n_vocab (INVALID_ARG), a NaN/Inf logit or every token banned/filtered (NUMERIC). *token is
 * written only on success. */
SPECD_API specd_status specd_sampler_sample(specd_sampler *sampler, const float *logits, int32_t n_vocab,
                                  specd_sample_key key, int32_t *token, specd_error *err);

/* The same draw with the SPECD_RNG_DRAFT stream: a drafter sampling x ~ q for rejection-sampling
 * verification (its noise is independent of the verifier's). */
SPECD_API specd_status specd_sampler_sample_draft(specd_sampler *sampler, const float *logits,
                                        int32_t n_vocab, specd_sample_key key, int32_t *token,
                                        specd_error *err);

/* The transformed distribution P (zeros outside the kept set; one-hot at the argmax when
 * T == 0) into probs[n_vocab]: the q a drafter hands to verification. probs untouched on error. */
SPECD_API specd_status specd_sampler_probs(specd_sampler *sampler, const float *logits, int32_t n_vocab,
                                 float *probs, specd_error *err);

/* Gumbel noise G(x) for one token under key and purpose; exposed so tests and CUDA ports can
 * check the exact bits. */
SPECD_API float specd_sampling_gumbel(specd_sample_key key, specd_rng_purpose purpose, int32_t token);

/* A keyed uniform in (0, 1): word 0 of Philox(counter {index, position, sequence, purpose}).
 * SPECD_RNG_ACCEPT uses index = draft row / tree node; RESIDUAL and BONUS use index 0. */
SPECD_API float specd_sampling_uniform(specd_sample_key key, specd_rng_purpose purpose, uint32_t index);

#ifdef __cplusplus
}
#endif
#endif
