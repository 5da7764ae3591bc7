/* The acceptance engine: decides which draft tokens the target accepts. It holds no IPC and no
 * CUDA, so every rule is unit-testable on plain arrays (docs/design.md).
 *
 * Rules (specd_accept_rule):
 *  - GREEDY: the target's token at a position is argmax of the biased logits (lowest index wins
 *    ties); a draft is accepted iff it equals it. Temperature is ignored.
 *  - COUPLED: the target's token is its keyed sample (include/specd/sampling.h: argmax of
 *    z + Gumbel(seed, sequence, position, token)), exactly what plain decoding with the same seed
 *    emits; a draft is accepted iff it equals it. Speculative output is token-identical to plain
 *    decoding. q is not needed (it is checked when given, then ignored). T == 0 is greedy.
 *  - REJECTION: speculative sampling (Leviathan et al.; paper 000 Algorithm 1): draft x drawn from
 *    q is accepted iff u < min(1, p(x) / q(x)) with u the keyed SPECD_RNG_ACCEPT uniform; on
 *    rejection the token is drawn from normalize(max(0, p - q)), and when every draft is accepted
 *    the bonus token from the last row's p, each by one keyed uniform (SPECD_RNG_RESIDUAL,
 *    SPECD_RNG_BONUS; counter word 0 = 0) through the blocked inverse CDF that
 *    verifier/accept/xform.h defines (64-token block sums in a fixed order, then a scan), which a
 *    CUDA port reproduces bit for bit. Lossless when each draft was drawn from its q independently of the
 *    verifier's streams (use specd_sampler_sample_draft or any independent RNG). q absent means a
 *    deterministic drafter (q one-hot at the draft). With relaxed_tau > 0 the ratio becomes
 *    min(1, (1 + tau) p / q) (paper 000 section 4.3): not lossless, and every result says so.
 *
 * Rows: target_logits has one row per scored context: row 0 scores the first draft position,
 * row i + 1 the position after draft i (chain) or after node i (tree). Logits are raw; the
 * handle's sampling transform turns them into p. A logit of -inf or at most -FLT_MAX (PyTorch's
 * mask value) masks its token: it is banned exactly as a -inf logit bias bans it (probability 0,
 * never sampled nor accepted), at any temperature; a row with every token masked or banned is
 * SPECD_E_NUMERIC, and NaN and +inf are SPECD_E_NUMERIC. Draft distributions q are probabilities (rows
 * that sum to 1 within 1e-3, entries finite and >= 0).
 *
 * Outputs: every call writes its results only on SPECD_OK; on failure the result struct and its
 * arrays are untouched. Calls on one handle must not run concurrently (shared scratch); no call
 * allocates.
 */
#ifndef SPECD_ACCEPT_H
#define SPECD_ACCEPT_H

#include "specd/api.h"

#include <stdbool.h>
#include <stdint.h>

#include "specd/sampling.h"
#include "specd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one accept-rule enum: the IPC API (specd/ipc.h) uses it as is, and the wire's AcceptRule
 * (ipc/specd.proto) has the same values, which ipc/frame.c checks at compile time. Zero is the
 * default, COUPLED, in all three. */
typedef enum specd_accept_rule {
    SPECD_ACCEPT_COUPLED = 0,
    SPECD_ACCEPT_GREEDY = 1,
    SPECD_ACCEPT_REJECTION = 2
} specd_accept_rule;

#define SPECD_ACCEPT_MAX_K 4096

typedef struct specd_accept_params {
    specd_accept_rule rule;
    specd_sampling_params sampling; /* the target's transform (bias copied at create) */
    int32_t max_k;       /* most draft tokens per chain / nodes per tree, 1..SPECD_ACCEPT_MAX_K */
    int32_t max_vocab;   /* largest n_vocab a call may pass; sizes the scratch */
    float relaxed_tau;   /* 0 = exact; > 0 (REJECTION only) = lossy relaxed acceptance */
} specd_accept_params;

/* COUPLED, default sampling, max_k 16, max_vocab 0 (must be set), tau 0. */
SPECD_API specd_accept_params specd_accept_default_params(void);

typedef struct specd_accept specd_accept;

/* *out: caller owns; release with specd_accept_destroy. Fails on a bad rule, max_k, max_vocab,
 * sampling params, or tau < 0 / non-finite / > 0 with a rule other than REJECTION. */
SPECD_API specd_status specd_accept_create(const specd_accept_params *params, specd_accept **out,
                                 specd_error *err);
SPECD_API void specd_accept_destroy(specd_accept *acc);

/* ---- chain: k draft tokens ------------------------------------------------------------------ */
typedef struct specd_chain_input {
    int32_t k;                   /* 1..max_k */
    const int32_t *draft;        /* k ids in [0, n_vocab) */
    const float *draft_probs;    /* k rows of q_vocab probabilities, or NULL (deterministic) */
    int32_t q_vocab;             /* must equal n_vocab when draft_probs is given */
    const float *target_logits;  /* k + 1 rows of n_vocab floats */
    int32_t n_vocab;             /* 1..max_vocab */
    specd_sample_key key;        /* key.position: absolute position of draft[0] */
} specd_chain_input;

typedef struct specd_chain_result {
    int32_t *tokens;      /* caller's array of >= k + 1: the n_emitted emitted ids */
    float *accept_prob;   /* caller's array of >= k, or NULL: acceptance probability of each
                           * examined draft (REJECTION: min(1, (1+tau) p/q); others 1 or 0);
                           * -1 for drafts after the first rejection */
    int32_t n_accepted;   /* accepted drafts, 0..k */
    int32_t n_emitted;    /* n_accepted + 1 (a correction or the bonus token); a keyed chain
                           * without a bonus row emits n_accepted when all k are accepted */
    bool lossy;           /* produced with relaxed_tau > 0 */
} specd_chain_result;

SPECD_API specd_status specd_accept_chain(specd_accept *acc, const specd_chain_input *in,
                                specd_chain_result *out, specd_error *err);

/* ---- keyed chain: explicit key rows and positions per draft, optional bonus (SimSD-shaped) ----
 * The same chain rule with the rows named instead of implied. Draft i is verified against row
 * key_row[i] of target_logits (its key row: the row whose distribution is the target's at draft
 * i's position), and on its rejection the correction is drawn from that row as usual (residual
 * under REJECTION, the keyed sample under GREEDY / COUPLED). Rows may come in any order, be
 * shared or be left unread: a layout that scores a draft's position on a separate row (SimSD's
 * masked twin rows, which carry the draft rows' positions) names that row. When every draft is
 * accepted the bonus token is drawn from bonus_row, or, with SPECD_CHAIN_NO_BONUS, nothing is
 * drawn and n_emitted == n_accepted == k (a step whose layout scores no row after its last draft).
 * Sampling keys: draft i and the token drawn at slot i use key.position = positions[i] (the
 * bonus token positions[k]), or key.position + i when positions is NULL, so drafts decided out
 * of position order key each decision on its own position. With key_row = NULL (row i),
 * bonus_row = k and positions = NULL this is specd_accept_chain exactly.
 * in->target_logits has keys->n_rows rows (in->k + 1 is not required). */
#define SPECD_CHAIN_NO_BONUS (-1)

typedef struct specd_chain_keys {
    int32_t n_rows;             /* rows in target_logits (>= 1); every row index is below it */
    const int32_t *key_row;     /* k row indices, or NULL: draft i's key row is i */
    int32_t bonus_row;          /* the bonus token's row, or SPECD_CHAIN_NO_BONUS */
    const uint32_t *positions;  /* k key positions (k + 1 with a bonus row), or NULL */
} specd_chain_keys;

/* out->tokens needs k + 1 entries with a bonus row, else k. */
SPECD_API specd_status specd_accept_chain_keyed(specd_accept *acc, const specd_chain_input *in,
                                                const specd_chain_keys *keys,
                                                specd_chain_result *out, specd_error *err);

/* ---- tree / multi-draft ------------------------------------------------------------------- */
/* Nodes in topological order: parent[i] is -1 (a child of the root, i.e. of the last committed
 * token) or an earlier node. Siblings are tried in index order with recursive rejection sampling
 * (REJECTION): accept child j with min(1, r(x_j) / q_j(x_j)), else r <- normalize(max(0, r - q_j)),
 * starting from r = p; if every child is rejected the token is drawn from r. Lossless when each
 * node's token was drawn from its q independently given its parent path. GREEDY / COUPLED walk
 * to the child equal to the target's token (first such child). A node at depth d (children of the
 * root have depth 0) sits at position key.position + d. */
typedef struct specd_tree_input {
    int32_t n_nodes;             /* 1..max_k */
    const int32_t *parent;       /* n_nodes */
    const int32_t *token;        /* n_nodes ids in [0, n_vocab) */
    const float *draft_probs;    /* n_nodes rows of q_vocab: the q node i was drawn from, or NULL */
    int32_t q_vocab;
    const float *target_logits;  /* n_nodes + 1 rows: row 0 the root, row i + 1 after node i */
    int32_t n_vocab;
    specd_sample_key key;
} specd_tree_input;

typedef struct specd_tree_result {
    int32_t *path;        /* caller's array of >= n_nodes: accepted node indices, root first */
    int32_t *tokens;      /* caller's array of >= n_nodes + 1: emitted ids */
    int32_t n_accepted;   /* length of path */
    int32_t n_emitted;    /* n_accepted + 1 */
    bool lossy;
} specd_tree_result;

SPECD_API specd_status specd_accept_tree(specd_accept *acc, const specd_tree_input *in,
                               specd_tree_result *out, specd_error *err);

/* ---- position-wise (diffusion blocks, MRP speculative mode, paper 002 section 3.3) ------------ */
/* Each of n positions is checked on its own: accept[i] = 1 iff the target's token for row i
 * equals draft[i]. The target's token is the GREEDY argmax, or the keyed sample (COUPLED and
 * REJECTION alike: there is no q/p test without a causal chain). */
typedef struct specd_positionwise_input {
    int32_t n;                   /* 1..max_k */
    const int32_t *draft;        /* n ids */
    const float *target_logits;  /* n rows of n_vocab */
    int32_t n_vocab;
    const uint32_t *positions;   /* absolute position of each row, or NULL: key.position + i */
    specd_sample_key key;
} specd_positionwise_input;

typedef struct specd_positionwise_result {
    uint8_t *accept;      /* caller's array of >= n */
    int32_t *target;      /* caller's array of >= n, or NULL: the target's token per row */
    int32_t n_accepted;   /* number of ones in accept */
} specd_positionwise_result;

SPECD_API specd_status specd_accept_positionwise(specd_accept *acc, const specd_positionwise_input *in,
                                       specd_positionwise_result *out, specd_error *err);

#ifdef __cplusplus
}
#endif
#endif
