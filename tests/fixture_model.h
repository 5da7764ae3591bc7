/* The real default model for a test: open it (or skip), make contexts, prefill, run a policy's
 * step layout, read the golden prompts, close. Every failure ends the test with a message: a
 * setup failure exits 1, a failure inside a running cmocka test fails that test. Linked into every
 * test that declares NEEDS_MODEL (tests/CMakeLists.txt). */
#ifndef SPECD_TESTS_FIXTURE_MODEL_H
#define SPECD_TESTS_FIXTURE_MODEL_H

#include <stdint.h>

#include "specd/policy.h"
#include "specd/runtime.h"
#include "specd/spec.h"

/* The default model at $SPECD_TEST_MODEL (set by ctest). Exits 77 (skipped) when the variable is
 * unset or names no file; exits 1 when the file does not load. Caller owns the model. */
specd_model *fixture_model_open(void);

/* A context on m with n_seq sequences of n_ctx rows and n_batch tokens per extend (other
 * parameters default). Exits 1 on failure. Caller owns the context. */
specd_context *fixture_context(const specd_model *m, int32_t n_seq, int32_t n_ctx, int32_t n_batch);

/* Replaces seq's cache with tokens[0..n), in extends of the context's n_batch. */
void fixture_prefill(specd_context *ctx, int32_t seq, const int32_t *tokens, int64_t n);

/* Runs a policy's step layout on seq as specd_spec_run does: the layout's adapter on the
 * context, one extend of its rows (every row stays in the cache until the caller trims it);
 * logits (n_rows x n_vocab) receives its scored rows. */
void fixture_run_layout(specd_context *ctx, int32_t seq, const specd_step_layout *l, float *logits);

/* Runs one sequence to its end on specd's runtime (specd_spec_run on ctx's sequence 0): opens
 * spec's sequence 0 with prompt and params, runs it, checks it emitted params->max_tokens tokens,
 * copies them to out, its stats to *stats (when not NULL), closes it. */
void fixture_run_seq(specd_spec *spec, specd_context *ctx, const int32_t *prompt, int64_t n_prompt,
                     const specd_seq_params *params, int32_t *out, specd_seq_stats *stats);

/* Plain decoding's n_gen tokens after prompt (policy none, temperature, seed, no guard), what
 * every lossless policy must emit under the same sampling parameters. */
void fixture_plain_output(specd_context *ctx, const int32_t *prompt, int64_t n_prompt,
                          float temperature, uint64_t seed, int32_t n_gen, int32_t *out);

/* Reads the first n golden prompts (rows of max_len ids) under $SPECD_SOURCE_DIR. Exits 1 when
 * they are missing. */
void fixture_golden_prompts(int n, int max_len, int32_t *ids, int64_t *lens);

/* $SPECD_SOURCE_DIR/rel into out. Exits 1 when the variable is unset or out too small. */
void fixture_source_path(const char *rel, char *out, size_t size);

/* Destroys ctx (may be NULL), then m. */
void fixture_close(specd_model *m, specd_context *ctx);

#endif
