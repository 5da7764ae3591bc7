/* Host library API: a host engine that owns the target model drives speculative decoding of many
 * sequences through specd, handing the target's logits over by pointer.
 *
 * One step of one sequence:
 *     specd_spec_seq_layout(spec, seq, &layout)     what the target must run: tokens, positions,
 *                                                   attention rule, LoRA gates, rows to score
 *     ... host runs its target over layout.tokens at layout.pos, appending to the sequence's KV
 *     cache, and gathers the logits of layout.rows (n_rows x n_vocab floats, row-major) ...
 *     specd_spec_seq_verify(spec, seq, logits, &outcome)
 *                                                   the acceptance engine decides; outcome says
 *                                                   which tokens were emitted and which of the
 *                                                   step's KV rows to keep (the rest are dropped)
 * With the "none" policy every step is one plain decode step, through the same code, so an A/B
 * run compares like with like. Sampling is keyed by (seed, seq, position): plain and speculative
 * runs with the same seed emit identical tokens under the greedy and coupled rules.
 *
 * Sequence convention (specd/policy.h): after open, the host's KV cache for seq must hold the
 * prompt minus its last token; the last prompt token is the first input of the first step.
 *
 * Threads: calls for different sequences may not run concurrently on one specd_spec (they share
 * verification scratch); use one specd_spec per thread.
 */
#ifndef SPECD_SPEC_H
#define SPECD_SPEC_H

#include "specd/api.h"

#include <stdint.h>

#include "specd/accept.h"
#include "specd/policy.h"
#include "specd/processor.h"
#include "specd/sampling.h"
#include "specd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct specd_spec specd_spec;

typedef struct specd_spec_params {
    int32_t n_vocab;   /* the target's vocabulary size (required) */
    int32_t max_draft; /* most proposals per step (default 8, at most 64) */
    int32_t max_seqs;  /* sequence ids are 0..max_seqs-1 (default 64) */
    const struct specd_model *target; /* optional: the target when specd runs it (layerskip) */
    const char *target_path;          /* optional: its GGUF path */
    /* Optional: drafts are verified by a specd-verifier daemon (specd/ipc.h) instead of
     * in-process, with the same calls. The step's target logits reach it through a shared-memory
     * buffer (hosts may write them there directly: specd_spec_verifier_logits). Plain steps, and
     * any step the daemon does not answer within the timeout (dead, restarting), are decided
     * in-process with the same keyed sampling and committed to it, so the output is the same
     * either way. Drafter-shaped policies under the greedy or coupled rule only. */
    const char *verifier_endpoint;    /* NULL = verify in-process; ipc://PATH, tcp://... (copied) */
    int32_t verifier_timeout_ms;      /* per request, [1, 60000] (default 1000) */
    uint64_t verifier_tokenizer_hash; /* must match the daemon's --tokenizer-hash (default 0) */
    /* The most rows one step may have (what a host sizes its logits and keep lists for):
     * 0 = 2 * max_draft + 1; more for policies whose steps are wider than their drafts (block
     * diffusion, MRP), up to SPECD_MAX_STEP_ROWS. */
    int32_t max_step_rows;
    /* The target's hidden size: needed (> 0) by policies that verify with hidden states
     * (SPECD_POLICY_WANTS_HIDDEN); 0 = unknown. */
    int32_t n_embd;
    /* Where the contexts a sequence's policy makes for itself live (a draft model's, a head's,
     * a drafter's; specd_device and ordinal, as specd_context_params.device): default
     * SPECD_DEVICE's (specd_context_default_params), so it follows the target's context when
     * both take the default. An unparsable SPECD_DEVICE is refused by specd_spec_create. */
    int32_t device;
    int32_t device_index;
} specd_spec_params;

#define SPECD_MAX_STEP_ROWS 4096

SPECD_API specd_spec_params specd_spec_default_params(void);

/* Caller owns *out (specd_spec_destroy). With a verifier_endpoint: SPECD_E_INVALID_ARG for a
 * malformed endpoint; a daemon that is not up yet, or that refuses our vocabulary or tokenizer, is
 * not an error (a warning; steps are verified in-process until a matching daemon answers). */
SPECD_API specd_status specd_spec_create(const specd_spec_params *params, specd_spec **out,
                               specd_error *err);
SPECD_API void specd_spec_destroy(specd_spec *spec);

#define SPECD_STREAM_KEY_SLOT UINT64_MAX

typedef struct specd_seq_params {
    const char *policy;                 /* registry name (default "none") */
    const specd_policy_ops *policy_ops; /* or the host's own policy; overrides `policy` */
    const char *policy_options;         /* "key=value,..." for the policy; may be NULL */
    void *policy_user;                  /* handed to the policy as env.user (policy ABI 2) */
    specd_sampling_params sampling;     /* the one transform for sampling and verification */
    uint64_t seed;
    /* What keys the sequence's sampling besides the seed (specd_stream_sample_key): give each
     * request its own, stable across the slots and batches it runs in, and its tokens never
     * depend on them. SPECD_STREAM_KEY_SLOT (the default) keys on the sequence id, as v1 did. */
    uint64_t stream_key;
    specd_accept_rule rule; /* default COUPLED (which is greedy at temperature 0) */
    float tau;    /* relaxed acceptance (ratio x (1 + tau)), REJECTION only; > 0 = lossy */
    /* the adaptive guard (default 1): per step, a cost model picks the draft length, or a plain
     * step when speculation would not pay; it starts from what earlier sequences of this spec
     * with the same policy and options learned. Changes how many proposals are made, never the
     * tokens emitted (under greedy and coupled acceptance with a lossless policy; isd with an
     * adapter on every row and tau > 0 are lossy, and rejection sampling agrees in distribution
     * only, so there its choices show in the output). */
    int adaptive;
    int32_t max_tokens; /* stop after this many emitted tokens (default 256) */
    const int32_t *stop_tokens; /* borrowed during open; ids that end the sequence (e.g. EOS) */
    int32_t n_stop_tokens;
    /* presence, frequency and repetition penalties (specd/processor.h; default 0, 0, 1: off),
     * applied by the session at every row it samples or verifies */
    specd_penalties_params penalties;
    /* the host's own row processor (specd/processor.h; apply NULL = none, the default), applied
     * after the penalties; copied at open, its user pointer borrowed until close. With either,
     * the policy must be drafter-shaped and verification in-process (else SPECD_E_UNSUPPORTED). */
    specd_row_processor processor;
} specd_seq_params;

SPECD_API specd_seq_params specd_seq_default_params(void);

/* Opens sequence seq with its prompt (n_prompt >= 1 ids < n_vocab). The prompt is copied. */
SPECD_API specd_status specd_spec_seq_open(specd_spec *spec, int32_t seq, const int32_t *prompt,
                                 int64_t n_prompt, const specd_seq_params *params,
                                 specd_error *err);
/* Releases the sequence's state; a closed or unknown seq is a no-op. */
SPECD_API void specd_spec_seq_close(specd_spec *spec, int32_t seq);

/* Prompt hidden states (policy flag SPECD_POLICY_WANTS_PREFILL_HIDDEN, e.g. mrp): 1 when seq's
 * policy wants the target's final hidden states (after the output norm) of the prompt rows the
 * host prefills. The host then passes them, n_rows x n_embd f32 for rows [row0, row0 + n_rows)
 * of history[0..n_prompt-1), in ascending contiguous chunks from row 0, before the first layout.
 * For other policies the call does nothing. A host that cannot provide them need not: the policy
 * then starts from its first step (with less context). */
SPECD_API int specd_spec_seq_wants_prefill_hidden(const specd_spec *spec, int32_t seq);
SPECD_API specd_status specd_spec_seq_prefill_hidden(specd_spec *spec, int32_t seq,
                                                     const float *hidden, int64_t row0,
                                                     int32_t n_rows, specd_error *err);

/* The target's next step for seq. *out is owned by the spec and valid until the next call for
 * seq. SPECD_E_STATE when the sequence has finished (max_tokens or a stop token). */
SPECD_API specd_status specd_spec_seq_layout(specd_spec *spec, int32_t seq, specd_step_layout *out,
                                   specd_error *err);

/* Verifies the step laid out last: logits holds layout.n_rows rows of n_vocab floats on the host
 * (specd_spec_seq_verify_logits in specd/spec_batch.h takes other dtypes, strides and devices).
 * -inf (or -FLT_MAX) means banned; NaN/+inf logits are SPECD_E_NUMERIC and change nothing (the
 * host may retry the step). *out is owned by the spec and valid until the next call for seq. */
SPECD_API specd_status specd_spec_seq_verify(specd_spec *spec, int32_t seq, const float *logits,
                                   specd_step_outcome *out, specd_error *err);

/* 1 once the sequence has emitted max_tokens or a stop token. */
SPECD_API int specd_spec_seq_done(const specd_spec *spec, int32_t seq);

/* The prompt given at open; borrowed until close. */
SPECD_API const int32_t *specd_spec_seq_prompt(const specd_spec *spec, int32_t seq, int64_t *n_prompt);

/* With a remote verifier: the shared buffer its logits travel in, (max_draft + 1) x n_vocab
 * floats, owned by the spec. A host that writes a step's logits here saves a copy. Else NULL. */
SPECD_API float *specd_spec_verifier_logits(const specd_spec *spec);

/* The most proposals one step may carry (the spec's max_draft). */
SPECD_API int32_t specd_spec_max_draft(const specd_spec *spec);
/* The most rows a laid-out step may have, so the most logits rows a host must be able to return
 * for one sequence, and the longest emitted and keep lists: specd_spec_params.max_step_rows, by
 * default 2 * max_draft + 1 (a self-speculative step carries up to max_draft filled proposals and
 * max_draft + 1 mask rows after the pending token; a drafter step needs only max_draft + 1). */
SPECD_API int32_t specd_spec_max_step_rows(const specd_spec *spec);

/* The tokens emitted so far (not the prompt); borrowed until the next step or close. */
SPECD_API const int32_t *specd_spec_seq_output(const specd_spec *spec, int32_t seq, int64_t *n_out);

#define SPECD_MAX_DRAFT 64

typedef struct specd_seq_stats {
    int64_t n_steps;          /* target forwards */
    int64_t n_emitted;        /* tokens emitted */
    int64_t n_drafts;         /* steps that verified at least one proposal */
    int64_t n_draft_tokens;   /* proposals verified */
    int64_t n_accepted;       /* proposals accepted */
    int64_t accepted_at[SPECD_MAX_DRAFT]; /* accepted proposals by position in the draft */
    int64_t drafted_at[SPECD_MAX_DRAFT];  /* proposals by position in the draft */
    int64_t n_backoffs;       /* times the adaptive guard turned drafting off */
    int64_t n_guard_plain;    /* steps the adaptive guard ran without proposals */
    int64_t n_remote_verified; /* drafting steps decided by the remote verifier */
    int64_t n_remote_fallback; /* drafting steps it did not answer, decided in-process */
    /* the target's work (NFE: n_steps forwards of the target; tokens per forward =
     * n_emitted / n_steps, counted up to the first stop token, after which nothing is emitted) */
    int64_t n_rows;           /* logits rows scored */
    int64_t n_tokens_run;     /* tokens the target ran (the steps' widths) */
    int64_t n_empty_steps;    /* steps that emitted nothing (policy ABI 2 MAY_EMIT_NONE) */
    int64_t n_commit_steps;   /* steps that scored no rows (commit-only) */
    int lossy;                /* 1 if any step used a relaxed rule */
    uint64_t propose_ns;      /* time inside the policy (proposing; for self-speculative
                               * policies their layout and verify, e.g. mrp's head) */
    uint64_t verify_ns;       /* time inside the acceptance engine */
    int64_t n_draft_cut;      /* proposals a row processor's admit cut before verification */
    int64_t n_forced;         /* proposals a row processor forced (verified like the others) */
    int64_t n_shadow_drafts;  /* shadow drafts decided (SPECD_POLICY_SHADOW_DRAFTS: proposals
                               * made on the guard's plain steps, never verified) */
    int64_t n_shadow_accepted; /* their tokens the output matched: what verifying them would
                                * have accepted */
} specd_seq_stats;

SPECD_API specd_status specd_spec_seq_stats(const specd_spec *spec, int32_t seq, specd_seq_stats *out,
                                  specd_error *err);

#ifdef __cplusplus
}
#endif
#endif
