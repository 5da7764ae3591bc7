/* Policy ABI: how a proposal method plugs into specd.
 *
 * A policy is a struct of function pointers that begins with an ABI version (as sqlite3_module
 * and llama_sampler_i do). Each slot says whether it is required. Callers go through the session
 * (specd/spec.h), which skips NULL optional slots.
 *
 * Versions. The session reads the slots of the version a policy declares and no further, as
 * sqlite3_module's iVersion: a policy compiled against ABI 1 (abi_version = 1, the struct ending
 * at `rollback`) still loads; the slots after it (marked "ABI 2") are read only when
 * abi_version >= 2. A version newer than the library's is refused (SPECD_E_MISMATCH). Structs
 * the session hands to a policy (specd_policy_env, specd_step_layout) only grow at their end, and
 * the session zeroes what a policy of an older version does not know.
 * ABI 2 adds: tree-shaped proposals (propose_tree), per-model shared state created once per spec (shared_create / shared_destroy;
 * env.shared), the host's user pointer (env.user), and flags (SPECD_POLICY_NEEDS_Q: the session
 * allocates q only for policies that set it), and keyed chains the session verifies for a
 * self-speculative layout (specd_step_layout.n_chain: explicit key rows per draft, optional
 * bonus row).
 * ABI 3 adds observe_rows: a drafter-shaped policy sees the target's logits of each verified
 * step's rows (Token Recycling's adjacency table learns from them); and device_q / fetch_q: a
 * drafter whose q rows stay on a CUDA device hands them to the session where they lie. Its slots
 * are read only when abi_version >= 3, so ABI 1 and ABI 2 policies load unchanged.
 *
 * Two shapes fit:
 *  - Drafter policies (draft model, n-gram, layer-skip) implement `propose`: given the sequence so
 *    far, suggest up to max_draft tokens (and optionally the distributions q they were sampled
 *    from). The session lays out the target's step as [pending token | drafts] under causal
 *    attention and verifies the drafts with the acceptance engine's chain rule.
 *  - Self-speculative policies (ISD, R-ISD) implement `layout` and `verify`: they lay out the
 *    target's own step (filled proposals + mask rows, positions, LoRA gates, rows to score), then
 *    read the target's logits back, verify earlier proposals through the acceptance engine and make
 *    new ones from the mask rows.
 * Exactly one shape per policy: `propose`, or both `layout` and `verify`.
 *
 * Sequence convention: history[0..n_history) are the tokens decided so far (prompt + output). The
 * target's KV cache holds history[0..n_history-1); the last decided token, the "pending" token,
 * is the first input of the next step. Its row at position n_history-1 produces the distribution
 * of the next token.
 */
#ifndef SPECD_POLICY_H
#define SPECD_POLICY_H

#include "specd/api.h"

#include <stddef.h>
#include <stdint.h>

#include "specd/accept.h"
#include "specd/sampling.h"
#include "specd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPECD_POLICY_ABI_VERSION 4u

/* specd_policy_ops.flags (ABI 2) */
#define SPECD_POLICY_NEEDS_Q 1u /* propose may write draft distributions q (sampled drafts) */
/* verify may emit nothing (a block policy filling private state out of order), and layout may
 * score no rows (a commit-only step: the host runs the tokens to commit their KV, and verify gets
 * no logits) */
#define SPECD_POLICY_MAY_EMIT_NONE 2u
/* verify needs the target's final hidden states of the scored rows (residual heads, MRP):
 * verify_hidden is called instead of verify; the spec needs n_embd. Without
 * SPECD_POLICY_HIDDEN_CATCH_UP the adaptive guard never makes such a policy's step a plain one
 * (the policy would miss that row's hidden state). */
#define SPECD_POLICY_WANTS_HIDDEN 4u
/* the policy also wants the prompt's hidden states: the host hands the final hidden states of
 * the rows it prefills (history[0..n_prompt-1)) to specd_spec_seq_prefill_hidden, which calls
 * prefill_hidden. A host that does not (or cannot) leaves the policy without them: the policy
 * must then work from its first step's rows on (with less context). Needs WANTS_HIDDEN. */
#define SPECD_POLICY_WANTS_PREFILL_HIDDEN 8u
/* the adaptive guard may make the policy's steps plain when its steps do not pay: the session
 * then runs the target alone (no layout, no verify) and hands the plain step's final hidden
 * state to prefill_hidden as a history row (row0 = the step's position, prompt = the history
 * after the step), so the policy catches up when its steps resume. A host that passes no hidden
 * state for a plain step leaves a gap in those rows, which the policy must survive. Needs
 * WANTS_PREFILL_HIDDEN. */
#define SPECD_POLICY_HIDDEN_CATCH_UP 16u
/* drafter shape: propose (and propose_tree) cost next to nothing, need no catch-up and depend
 * only on the history handed in (and state the policy updates itself). While the adaptive guard
 * keeps the sequence plain, the session may then call them on plain steps ("shadow drafts": no
 * rows run, nothing verified) and count how much of each proposal the tokens that follow would
 * have accepted, so the guard sees when drafting would pay again without paying a probe. Their
 * q output is not read. */
#define SPECD_POLICY_SHADOW_DRAFTS 128u

struct specd_model;
struct specd_lora;

/* What a policy is created with. All pointers are borrowed for the policy's lifetime. */
typedef struct specd_policy_env {
    int32_t n_vocab;                 /* the target's vocabulary size */
    int32_t max_draft;               /* most tokens one step may propose (>= 1) */
    const struct specd_model *target; /* the target model when specd runs it, else NULL */
    const char *target_path;         /* its GGUF path when known, else NULL */
    /* The sequence's verification setup, for self-speculative policies that verify their own
     * proposals (drafter policies are verified by the session and may ignore these). */
    specd_sampling_params sampling;  /* bias borrowed for the create call only */
    specd_accept_rule rule;
    float tau;
    uint64_t seed;
    uint32_t seq_key;                /* the sampling key's sequence word (specd_stream_sample_key;
                                      * seed above is already the stream's) */
    /* ABI 2 */
    void *shared;  /* what shared_create made for this spec, policy and options; else NULL (also
                    * when a caller creates the policy outside a spec: create must then make what
                    * it needs itself) */
    void *user;    /* the host's pointer (specd_seq_params.policy_user), opaque to specd */
    int32_t max_step_rows; /* the most rows a step may have (specd_spec_max_step_rows) */
    /* Appended (ABI 2): where the contexts the policy makes for itself live (draft models, heads,
     * drafters). device_set 0 (a zeroed env) = specd_context_default_params()'s device
     * (SPECD_DEVICE); else device (specd_device) and device_index, as in specd_context_params.
     * The session sets them from specd_spec_params.device. */
    int32_t device_set;
    int32_t device;
    int32_t device_index;
} specd_policy_env;

/* The target's step, as laid out by a self-speculative policy. Arrays are owned by the policy
 * state and stay valid until its next call. */
typedef struct specd_step_layout {
    int32_t n_tokens;
    const int32_t *tokens;    /* n_tokens ids */
    const int32_t *pos;       /* n_tokens position ids */
    const uint8_t *visible;   /* NULL = causal; else n_tokens rows of (n_cached + n_tokens) bytes */
    const float *lora_gate;   /* NULL = base weights for every row */
    const struct specd_lora *lora; /* the adapter gated rows use (owned by the policy), or NULL */
    int32_t n_rows;           /* rows whose logits the policy needs back */
    const int32_t *rows;      /* n_rows indices into the step's tokens */
    /* ABI v2 (appended, so v1 policies that fill the fields above still fit; the session zeroes
     * the struct before a policy's layout): the adapter's PEFT directory (owned by the policy),
     * or NULL. A host that runs its own target loads it and applies it to exactly the rows whose
     * lora_gate is non-zero; a layout with a lora_gate needs it (base weights give other
     * logits). */
    const char *lora_path;
    /* Float-vector input rows (residual heads, soft tokens, trained mask embeddings): n_tokens
     * rows of the target's n_embd floats, or NULL. A row whose input_embd_rows flag is non-zero (every row
     * when the flags are NULL) enters the target as that vector instead of its token's
     * embedding (specd_seq_batch.embd). */
    const float *input_embd;
    const uint8_t *input_embd_rows;
    /* A keyed chain the session verifies (policy ABI 2, self-speculative shape; SimSD's layout).
     * n_chain > 0 says the step's drafts are the next n_chain tokens of the sequence, in order
     * (draft i at position n_history + i, whose sampling key it uses), and names per draft the
     * scored row whose logits are the target's distribution there: its key row, any of rows[]
     * (e.g. SimSD's masked twin rows, which carry the draft rows' positions; rows may repeat,
     * come in any order or be left unread). The session verifies them with the sequence's rule
     * through specd_accept_chain_keyed and the policy's verify (or verify_hidden) is not called
     * for that step; the policy learns the outcome from advance. At the first rejection the
     * correction is drawn from that draft's key row and the rest are dropped; when every draft
     * is accepted the bonus token is drawn from chain_bonus, or, with SPECD_CHAIN_NO_BONUS,
     * nothing more is emitted (the last draft becomes the pending token). KV: chain_keep[0] is
     * committed always (the pending token's row, or -1 for none) and chain_keep[1 + i] (the row
     * that holds draft i, or -1) when draft i is emitted and is not the last emitted token (which
     * becomes the next step's pending token, so its KV must not be in the cache yet). Zeroed
     * (n_chain = 0, as a policy that does not know these fields leaves it): the policy verifies
     * its own step. */
    int32_t n_chain;            /* 0..max_draft */
    const int32_t *chain_draft; /* n_chain ids */
    const int32_t *chain_key;   /* n_chain indices into rows[] (logits rows) */
    const float *chain_q;       /* n_chain x n_vocab probabilities the drafts were drawn from, or
                                 * NULL: deterministic drafts (q one-hot) */
    int32_t chain_bonus;        /* index into rows[] of the bonus row, or SPECD_CHAIN_NO_BONUS */
    const int32_t *chain_keep;  /* n_chain + 1 step-token indices or -1 (see above) */
} specd_step_layout;

/* What one verified step decided. Arrays are owned by the policy (or session) state. */
typedef struct specd_step_outcome {
    int32_t n_emitted;        /* tokens appended to the sequence (>= 1) */
    const int32_t *emitted;
    int32_t n_keep;           /* step rows whose KV entries are committed, ascending */
    const int32_t *keep;      /* the rest are dropped */
    int32_t n_drafted;        /* proposals verified in this step */
    int32_t n_accepted;       /* of which accepted */
    int lossy;                /* 1 when a relaxed (tau > 0) rule decided this step */
} specd_step_outcome;

typedef struct specd_policy_ops {
    uint32_t abi_version; /* required: SPECD_POLICY_ABI_VERSION */
    const char *name;     /* required: registry name */
    const char *options_help; /* optional: one line on the "key=value,..." options it takes */

    /* required: parses options ("" or NULL = defaults); a bad option is SPECD_E_INVALID_ARG naming
     * it. *state is owned by the policy and released by destroy. */
    specd_status (*create)(const specd_policy_env *env, const char *options, void **state,
                           specd_error *err);
    /* required; NULL state is a no-op */
    void (*destroy)(void *state);

    /* drafter shape: writes up to max_draft tokens to draft[] (and, when q is not NULL and the
     * policy samples, their distributions to q[i * n_vocab ...], setting *has_q). Proposing
     * nothing (*n_draft = 0) is allowed: the step is then a plain decode step. */
    specd_status (*propose)(void *state, const int32_t *history, int64_t n_history,
                            int32_t max_draft, int32_t *draft, int32_t *n_draft, float *q,
                            int *has_q, specd_error *err);

    /* self-speculative shape */
    specd_status (*layout)(void *state, const int32_t *history, int64_t n_history,
                           specd_step_layout *out, specd_error *err);
    specd_status (*verify)(void *state, const float *logits, specd_step_outcome *out,
                           specd_error *err);

    /* optional: the sequence now ends with these tokens (after a verified step) */
    void (*advance)(void *state, const int32_t *history, int64_t n_history);
    /* optional: forget everything after history[0..n_history) */
    void (*rollback)(void *state, int64_t n_history);

    /* ---- ABI 2 (read only when abi_version >= 2) ---- */
    uint32_t flags; /* SPECD_POLICY_* */
    /* optional: state every sequence of one spec with the same policy and options shares (a
     * draft model's weights, an adapter), made on the first such open and released by
     * shared_destroy when the spec is destroyed. env is the first sequence's (its per-sequence
     * fields mean nothing here); *shared is handed to create as env.shared. */
    specd_status (*shared_create)(const specd_policy_env *env, const char *options,
                                  void **shared, specd_error *err);
    void (*shared_destroy)(void *shared); /* required with shared_create */
    /* optional, drafter shape: a tree of proposals, called instead of propose. Writes
     * *n_nodes <= max_nodes nodes in topological order: parent[i] is -1 (a child of the pending
     * token) or an earlier node, token[i] its id; no node deeper than max_depth (children of the
     * pending token have depth 1). With q (SPECD_POLICY_NEEDS_Q) and a sampling policy, node i's
     * distribution goes to q[i * n_vocab ...] (*has_q = 1). The session lays the tree out as one
     * step (each node sees its ancestors; positions by depth) and verifies it with the
     * acceptance engine's tree rule (specd/accept.h); a tree that is a chain is verified as one.
     * *n_nodes = 0 is a plain step. */
    specd_status (*propose_tree)(void *state, const int32_t *history, int64_t n_history,
                                 int32_t max_nodes, int32_t max_depth, int32_t *parent,
                                 int32_t *token, int32_t *n_nodes, float *q, int *has_q,
                                 specd_error *err);
    /* required with SPECD_POLICY_WANTS_HIDDEN (self-speculative shape): verify with the scored
     * rows' logits and their final hidden states (after the output norm), n_rows x n_embd f32 in
     * the same row order */
    specd_status (*verify_hidden)(void *state, const float *logits, const float *hidden,
                                  int32_t n_embd, specd_step_outcome *out, specd_error *err);
    /* required with SPECD_POLICY_WANTS_PREFILL_HIDDEN (read only when that flag is set, so ABI 2
     * policies without it never have this slot read): the final hidden states (after the output
     * norm) of prompt rows [row0, row0 + n_rows), n_rows x n_embd f32, in order and before the
     * first layout; prompt[0..n_prompt) is the whole prompt (row j's next token is
     * prompt[j + 1]). Chunks arrive in ascending, contiguous order from row 0. With
     * SPECD_POLICY_HIDDEN_CATCH_UP also after the prompt: a plain step's row, prompt being the
     * history so far. */
    specd_status (*prefill_hidden)(void *state, const int32_t *prompt, int64_t n_prompt,
                                   const float *hidden, int64_t row0, int32_t n_rows,
                                   int32_t n_embd, specd_error *err);

    /* ---- ABI 3 (read only when abi_version >= 3) ---- */
    /* optional, drafter shape (propose / propose_tree; a self-speculative policy already reads
     * the logits in verify): what the target said of the rows of a step just verified, called
     * after the step is decided and after advance. Every scored row of the step comes, in the
     * step's row order: the pending token's row first, then the drafts' (chain order, or the
     * tree's node order), rejected ones included: each row's logits are still the target's
     * next-token distribution after that row's own prefix. A plain step (no drafts) hands its one
     * row. tokens[i] is row i's input token, logits + i * row_stride its n_vocab logits: host f32,
     * finite (masked entries raised to the session's floor, session/spec_logits.h), borrowed for
     * the call. Not called for a step whose logits never reached the host: one decided on a CUDA
     * device (specd_logits.device == SPECD_DEVICE_CUDA, verified there) or through a verifier
     * daemon's CUDA pool; the host-memory path to a verifier daemon does call it. Time spent here
     * counts as the policy's (specd_seq_stats.propose_ns). */
    void (*observe_rows)(void *state, const int32_t *tokens, int32_t n_rows, const float *logits,
                         int64_t row_stride, int32_t n_vocab);
    /* optional, both or neither (else SPECD_E_MISMATCH), drafter shape with
     * SPECD_POLICY_NEEDS_Q: q rows a proposal left on a CUDA device instead of writing them
     * into q (the `remote` policy under specd-drafter --q-device cuda). device_q: the last
     * proposal's rows (n_draft rows of n_vocab floats on the session's CUDA device, not checked
     * yet; valid until the next propose or destroy), or NULL when q was written as usual. The
     * session verifies on the device from there, reading them in place, and calls fetch_q only
     * when a host reader needs them: copy them into q (room for max_draft rows) and check them
     * as host rows are checked; an error means they are unusable, and the session drops the
     * step's drafts (a plain step; said once per sequence). */
    const float *(*device_q)(const void *state);
    specd_status (*fetch_q)(void *state, float *q, specd_error *err);

    /* ---- ABI 4 (read only when abi_version >= 4) ---- */
    /* optional, drafter shape: what one more proposal costs relative to a plain one-row step
     * (>= 0; the adaptive guard's c1 / c0: its row in the forward, proposing and verifying it),
     * as the guard measured it for this sequence on this machine and model. Called before each
     * proposal (shadow drafts included) once the guard has measured it; never with the guard off
     * or before its first measurement. A policy that sizes its proposals by cost (recycle's
     * tree=auto) uses it in place of a fixed rule: a verified row is nearly free on a GPU and costs
     * a tenth to a half of a step on a CPU, more at long contexts. */
    void (*observe_cost)(void *state, double row_cost);
} specd_policy_ops;

/* --- registry ------------------------------------------------------------------------------ */
/* Built-in policies (a host passes its own ops to the session directly, so the registry stays
 * constant). NULL when no policy has that name. */
SPECD_API const specd_policy_ops *specd_policy_find(const char *name);
/* Number of registered policies and the i-th (for listings). */
SPECD_API int32_t specd_policy_count(void);
SPECD_API const specd_policy_ops *specd_policy_at(int32_t i);


/* --- declared options ---------------------------------------------------------------------- */
/* Each built-in policy declares the "key=value,..." options it takes once, as a table: the
 * parser fills the policy's options struct from it and the CLI prints it (`--policy-opts help`).
 * Kept outside specd_policy_ops, so policies built against ABI 2 are unchanged. */
typedef enum specd_option_kind {
    SPECD_OPTION_INT,    /* int32_t, range-checked */
    SPECD_OPTION_FLOAT,  /* float, range-checked */
    SPECD_OPTION_BOOL,   /* int32_t, 0 or 1 */
    SPECD_OPTION_ENUM,   /* int32_t: the value's index in choices */
    SPECD_OPTION_STRING, /* char[size], non-empty */
    SPECD_OPTION_PATH    /* as STRING; names a file or directory */
} specd_option_kind;

/* specd_policy_option.flags */
#define SPECD_OPTION_MAX_IS_DRAFT 1u  /* the upper bound is the spec's max_draft, not max */
#define SPECD_OPTION_MAX_IS_LAYERS 2u /* the upper bound is the target's n_layer, not max */
/* the default depends on the model, adapter or spec: dflt describes it and the policy sets the
 * field before parsing (the parser leaves it alone unless the key is given) */
#define SPECD_OPTION_DEFAULT_DERIVED 4u
#define SPECD_OPTION_REQUIRED 8u /* the policy refuses to run without it */
/* the host's tokenizer fingerprint (hex of specd_model's tokenizer hash): a host that knows it
 * passes it when the caller did not */
#define SPECD_OPTION_HOST_TOKENIZER_HASH 16u
/* a PATH row naming an artifact the policy is trained for (mrp's head, an adapter):
 * specd_policy_default_options refuses, naming the key, when the caller gives none and no
 * artifact matches the target, rather than let the policy run untrained */
#define SPECD_OPTION_ARTIFACT_NEEDED 32u

typedef struct specd_policy_option {
    const char *key;
    specd_option_kind kind;
    size_t offset;       /* where the value goes in the policy's options struct */
    size_t size;         /* STRING and PATH: the buffer's capacity (NUL included) */
    const char *dflt;    /* the default as text (parsed like a given value), or NULL: none */
    double min, max;     /* INT and FLOAT: inclusive range */
    const char *choices; /* ENUM: "a|b|c" */
    const char *help;    /* one line */
    uint32_t flags;      /* SPECD_OPTION_* */
    /* PATH rows: the artifact specd ships for this key, relative to its artifacts directory
     * ("adapters/NAME", "mrp/NAME"), used when the caller names none and the artifact's record
     * names the loaded target (specd_policy_default_options); artifact_env: the environment
     * variable that names another, or NULL */
    const char *artifact;
    const char *artifact_env;
} specd_policy_option;

/* The mask token of the mask-row policies (isd, risd, wedlm, sdar, simsd) when neither mask= nor
 * the GGUF (tokenizer.ggml.mask_token_id) names one. SmolLM2 (and other StarCoder-vocabulary
 * models) define no mask token; id 0 is <|endoftext|>, a special token that never occurs inside
 * the chat text the policies decode, so it marks "unknown future token" without colliding with
 * real content. */
#define SPECD_POLICY_DEFAULT_MASK 0

/* specd_policy_ops.flags (ABI 2) that change nothing in the session: figures a host may print
 * for the policy's runs */
/* block or window fills: p_cache (WeDLM eq. 4: tokens emitted / token rows run) describes them */
#define SPECD_POLICY_FIGURE_P_CACHE 32u
/* strided mask-row proposals: the expected tokens per forward from the measured per-position
 * acceptance (specd/isd.h, specd_isd_tpf_formula) applies */
#define SPECD_POLICY_FIGURE_STRIDED_TPF 64u

/* The option table of the built-in policy called name (*n rows), or NULL (*n = 0) when there is
 * no such policy. A policy with no options has a table of 0 rows (not NULL). */
SPECD_API const specd_policy_option *specd_policy_options_table(const char *name, int32_t *n);

/* The target fingerprint of the GGUF at gguf_path: what an artifact's record (target.json)
 * names as the model it was trained over. It hashes the tokenizer, the architecture and shape,
 * and every norm weight (F32 at every quantization), so two quantizations of one model share it
 * and another model, or a finetune, does not. Reads no matrix. */
SPECD_API specd_status specd_policy_target_fingerprint(const char *gguf_path, uint64_t *out,
                                                       specd_error *err);

/* The options to run policy with on the target whose fingerprint is target_fingerprint: options
 * (may be NULL) plus key=PATH for each artifact row (specd_policy_option.artifact) the caller
 * left out whose artifact matches the target (specd_policy_option.artifact_env names one
 * explicitly). A row flagged SPECD_OPTION_ARTIFACT_NEEDED with no such artifact fails with
 * SPECD_E_INVALID_ARG naming the policy and the key ("policy mrp needs head=PATH: ..."). Writes
 * the result to out (cap bytes; SPECD_E_INVALID_ARG when it does not fit); an unknown policy
 * gets options unchanged (creating it reports that). */
SPECD_API specd_status specd_policy_default_options(const char *policy,
                                                    uint64_t target_fingerprint,
                                                    const char *options, char *out, size_t cap,
                                                    specd_error *err);

#ifdef __cplusplus
}
#endif
#endif
