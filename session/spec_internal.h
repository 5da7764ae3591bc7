/* The spec session's state, shared by its files: spec_session.c (sequences, the per-sequence
 * step), spec_batch.c (batched steps, specd/spec_batch.h) and the verifier backends
 * (spec_verifier.c, spec_device.c: session/spec_verifier.h). Not a public header. */
#ifndef SPECD_SESSION_SPEC_INTERNAL_H
#define SPECD_SESSION_SPEC_INTERNAL_H

#include "session/adaptive.h"
#include "session/batch_cost.h"
#include "session/penalties.h"
#include "session/spec_logits.h"
#include "specd/spec_batch.h"
#include "verifier/remote/remote_verify.h"

typedef struct spec_verifier_ops spec_verifier_ops; /* session/spec_verifier.h */

/* A step a batch's one device launch already decided (session/spec_device.h), handed to its
 * sequence's verify. */
typedef enum spec_decision {
    SPEC_UNDECIDED = 0, /* the sequence's verifier decides */
    SPEC_DECIDED,       /* n_emitted tokens in q->emitted (a tree's path in q->tree_path) */
    SPEC_TO_HOST        /* the kernel found the step bad: the engine decides and says why */
} spec_decision;
typedef struct spec_decided {
    spec_decision state;
    int32_t n_emitted, n_accepted;
} spec_decided;

typedef struct spec_seq {
    int open;
    int done;
    int32_t id;
    const specd_policy_ops *ops;
    void *policy;
    const spec_verifier_ops *verifier; /* decides its drafter-shaped steps: cpu, device, remote */
    specd_accept *accept;   /* verification under the sequence's rule and transform */
    specd_sampler *sampler; /* plain steps: the same keyed sample the engine uses */
    specd_accept_rule rule;
    float tau;              /* relaxed acceptance (specd_seq_params.tau), for the device path */
    uint64_t seed;
    uint64_t stream_key;    /* the caller's, or the sequence id */
    specd_sample_key key;   /* seed and sequence words every sampling decision uses */
    specd_mask_rule mask;   /* how masked logits become unreachable (session/spec_logits.h) */
    specd_sampling_params sampling; /* the transform's scalars (bias not kept: n_bias only), for
                                     * verification on the device (session/spec_device.h) */
    int32_t *bias_banned;   /* tokens the bias bans, for mask.banned */
    int32_t max_tokens;
    int32_t *stop;
    int32_t n_stop;

    int32_t *history;       /* prompt + output */
    int64_t n_history, n_prompt, cap_history;

    /* the step in flight */
    int laid_out;
    uint64_t step_gen;     /* counts layouts: a batch knows when a step was laid out again */
    int32_t n_step_tokens; /* rows of the step in flight */
    int32_t n_step_rows;   /* its scored rows: the logits rows verify reads */
    int32_t n_draft;
    int32_t *draft;         /* max_draft */
    float *q;               /* max_draft x n_vocab, drafter shape only */
    int has_q;
    /* has_q with the rows on the CUDA device instead (policy ABI 3 device_q: the `remote`
     * policy's drafter keeps them there), n_draft rows of n_vocab floats, until the next layout;
     * q is then not written: a host reader fetches first (specd_spec_seq_q_to_host) */
    const float *q_dev;
    int32_t *step_tokens, *step_pos, *step_rows; /* max_step_rows */
    /* per scored row: 1 when the layout gated it to the policy's LoRA (a mask row whose
     * logits only seed proposals), so an adapter that yields NaN there costs proposals, not the
     * sequence */
    uint8_t *step_gated;   /* max_step_rows */
    int warned_gated_nan;  /* said once per sequence */
    int warned_catch_up;   /* the policy refused a plain step's row: said once per sequence */
    int warned_bad_q;      /* the drafter's device q failed its checks: said once per sequence */
    int32_t *emitted, *keep;                     /* max_step_rows */
    float *accept_prob;                          /* max_draft */
    /* tree proposals (policy ABI 2 propose_tree): max_step_rows - 1 nodes */
    int tree;               /* the step in flight verifies a tree (not a chain) */
    int32_t *tree_parent, *tree_path;
    uint8_t *visible;       /* the tree step's visibility rows, (cap_history + rows) per row */
    int plain_step;         /* self-speculative policy: the guard made this a plain step */
    /* a keyed chain the policy's layout handed to the session (specd_step_layout.n_chain > 0):
     * the policy's arrays, valid until its next call */
    int32_t n_chain;
    const int32_t *chain_draft, *chain_key, *chain_keep;
    const float *chain_q;
    int32_t chain_bonus;
    uint64_t t_step;        /* layout started (the guard times whole steps) */
    uint64_t own_ns;        /* the step's time inside specd: layout (proposing) and verify */

    /* row processors (specd/processor.h; session/spec_processor.h): the penalties', then the
     * host's */
    specd_row_processor proc[2];
    int32_t n_proc;
    specd_penalties *pen;   /* owned: the penalties processor's state, or NULL */

    /* shadow drafts (SPECD_POLICY_SHADOW_DRAFTS; spec_shadow.c): a plain step's proposal, kept
     * until the tokens that follow tell how much of it verification would have accepted */
    int32_t *shadow_tok, *shadow_par; /* shadow_cap nodes; a chain's parents are i - 1 */
    int32_t shadow_cap, n_shadow;     /* n_shadow 0: none pending */
    int32_t shadow_at, shadow_depth;  /* the node matched so far (-1: none), the path's length */

    specd_adaptive guard;
    uint64_t prior_key;     /* policy and options: which learned model this sequence feeds */
    specd_seq_stats stats;
} spec_seq;

/* What the adaptive guard learned per policy + options, seeding the next sequence. */
enum { N_PRIORS = 16 };
typedef struct guard_prior {
    uint64_t key; /* 0 = free slot */
    specd_adaptive_model model;
} guard_prior;

/* Per-model policy state shared by a spec's sequences (policy ABI 2). */
enum { N_SHARED = 16 };
typedef struct policy_shared {
    const specd_policy_ops *ops; /* NULL = free slot */
    char *options;
    void *state;
} policy_shared;

/* The ABI 2 slots of ops, or zeroes for an ABI 1 policy (whose struct ends before them). */
static inline uint32_t specd_policy_flags(const specd_policy_ops *ops) {
    return ops->abi_version >= 2 ? ops->flags : SPECD_POLICY_NEEDS_Q; /* v1 may write q */
}
/* The guard may make the policy's steps plain: their rows' hidden states catch it up. */
static inline int specd_policy_catches_up(const specd_policy_ops *ops) {
    return (specd_policy_flags(ops) & SPECD_POLICY_HIDDEN_CATCH_UP) != 0;
}
static inline int specd_policy_has_tree(const specd_policy_ops *ops) {
    return ops->abi_version >= 2 && ops->propose_tree != NULL;
}
/* The last proposal's q rows where a drafter left them on a CUDA device (ABI 3 device_q), or
 * NULL. */
static inline const float *specd_policy_device_q(const specd_policy_ops *ops, const void *state) {
    return ops->abi_version >= 3 && ops->device_q ? ops->device_q(state) : NULL;
}
/* A drafter that learns from the target's verified rows (ABI 3 observe_rows). */
static inline int specd_policy_observes_rows(const specd_policy_ops *ops) {
    return ops->abi_version >= 3 && ops->propose != NULL && ops->observe_rows != NULL;
}

/* Hands the guard's measured row cost to a drafter that sizes its proposals by it (ABI 4
 * observe_cost), before a proposal; nothing until the guard has measured one. */
static inline void specd_policy_tell_cost(const specd_policy_ops *ops, void *state,
                                          const specd_adaptive *guard) {
    if (ops->abi_version < 4 || !ops->observe_cost) return;
    const double c = specd_adaptive_row_cost(guard);
    if (c >= 0) ops->observe_cost(state, c);
}

/* Shadow drafts (spec_shadow.c). alloc: 0 when out of memory (a policy without the flag needs
 * nothing); after the guard's init. propose: on a plain step's layout; check: with the tokens a
 * verify emitted; drop: a drafting step makes its own evidence. */
int specd_spec_shadow_alloc(spec_seq *q, int32_t n_nodes);
void specd_spec_shadow_free(spec_seq *q);
void specd_spec_shadow_propose(const specd_spec *spec, spec_seq *q);
void specd_spec_shadow_check(spec_seq *q, const int32_t *emitted, int32_t n);
void specd_spec_shadow_drop(spec_seq *q);

struct specd_spec {
    specd_spec_params params;
    spec_seq *seqs;
    guard_prior priors[N_PRIORS];
    int32_t next_prior; /* round-robin replacement when all slots are taken */
    specd_rverify *rv;  /* the remote verifier, or NULL */
    specd_logits_scratch rv_check; /* the row of CUDA logits its keyed check reads */
    specd_logits_scratch scratch; /* logits converted for the acceptance engine */
    specd_logits_scratch hidden_scratch; /* hidden states converted for policies */

    /* the batch laid out last (specd/spec_batch.h), max_seqs entries each */
    int32_t n_batch;    /* 0 = none */
    specd_batch_seq *batch;
    uint64_t *batch_gen;
    int32_t *batch_ids;
    specd_step_outcome *batch_out;
    spec_decided *batch_decided; /* the batch's device launch, per entry */
    specd_status *batch_status;
    uint64_t batch_t0;        /* the batch's layout started */
    specd_batch_cost cost;    /* what batched forwards cost: the guard's currency */
    policy_shared shared[N_SHARED];
    struct specd_device_verify *device; /* CUDA logits verified on the device, made on first use */
    specd_logits_scratch proc_scratch;  /* rows a sequence's row processors transform */
    uint8_t *proc_dead;                 /* max_step_rows: rows no processor need score */
};


/* Lays out seq's next step (the v1 call's work). */
specd_status specd_spec_seq_layout_step(specd_spec *spec, spec_seq *q, specd_step_layout *out,
                                        specd_error *err);
/* Verifies q's laid-out step from rows (rows[0] at row0 of logits). */
specd_status specd_spec_seq_verify_step(specd_spec *spec, spec_seq *q, const specd_logits *logits,
                                        const specd_logits *hidden, int32_t row0,
                                        specd_step_outcome *out, specd_error *err);
/* The same, with what a batch's device launch decided of the step (NULL: nothing). */
specd_status specd_spec_seq_verify_decided(specd_spec *spec, spec_seq *q,
                                           const specd_logits *logits, const specd_logits *hidden,
                                           int32_t row0, const spec_decided *decided,
                                           specd_step_outcome *out, specd_error *err);
/* Every host reader of q->q calls this first: when q's rows are on the device only (q->q_dev),
 * copies them into q->q and checks them as the drafter's host rows are checked. Rows that fail
 * (or cannot be copied) are unusable q, as host rows failing the client's checks are: the drafts
 * are dropped (n_draft 0, has_q 0; said once per sequence) and the step becomes a plain one
 * decided on its first row. */
void specd_spec_seq_q_to_host(spec_seq *q);
specd_status specd_spec_find_seq(const specd_spec *spec, int32_t seq, spec_seq **out,
                                 specd_error *err);

/* Whether token is one of the sequence's stop tokens (the sequence ends at it). */
static inline int specd_seq_is_stop(const spec_seq *q, int32_t token) {
    for (int32_t i = 0; i < q->n_stop; i++)
        if (q->stop[i] == token) return 1;
    return 0;
}

#endif
