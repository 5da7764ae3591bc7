/* Shadow drafts (SPECD_POLICY_SHADOW_DRAFTS; session/adaptive.h): while the guard keeps a
 * sequence plain, what its cheap drafter would have proposed is kept and matched against the
 * tokens that follow. The emitted tokens are the verifier's own (lossless rules emit exactly what
 * plain decoding would), so a proposal's matched prefix (a tree's matched path) is what verifying
 * it would have accepted, found without running a row. */
#include "common/alloc.h"
#include "common/clock.h"
#include "session/spec_internal.h"

int specd_spec_shadow_alloc(spec_seq *q, int32_t n_nodes) {
    if (!(specd_policy_flags(q->ops) & SPECD_POLICY_SHADOW_DRAFTS) || !q->ops->propose)
        return 1;
    q->shadow_tok = specd_alloc_array((size_t)n_nodes, sizeof(int32_t));
    q->shadow_par = specd_alloc_array((size_t)n_nodes, sizeof(int32_t));
    q->shadow_cap = n_nodes;
    if (!q->shadow_tok || !q->shadow_par) return 0;
    specd_adaptive_use_shadows(&q->guard);
    return 1;
}

void specd_spec_shadow_free(spec_seq *q) {
    specd_free(q->shadow_tok);
    specd_free(q->shadow_par);
    q->shadow_tok = q->shadow_par = NULL;
    q->n_shadow = 0;
}

/* The pending shadow draft's outcome goes to the guard. */
static void resolve(spec_seq *q) {
    specd_adaptive_shadow(&q->guard, q->n_shadow, q->shadow_depth);
    q->stats.n_shadow_drafts++;
    q->stats.n_shadow_accepted += q->shadow_depth;
    q->n_shadow = 0;
}

void specd_spec_shadow_propose(const specd_spec *spec, spec_seq *q) {
    if (!q->shadow_tok || q->n_shadow > 0 || !specd_adaptive_wants_shadow(&q->guard)) return;
    int64_t remaining = q->max_tokens - (q->n_history - q->n_prompt);
    int32_t depth = spec->params.max_draft;
    if (depth > remaining - 1) depth = (int32_t)(remaining - 1);
    if (depth < 1) return;
    int32_t n = 0;
    int has_q = 0;
    specd_error e;
    specd_status st;
    uint64_t t0 = specd_now_ns();
    specd_policy_tell_cost(q->ops, q->policy, &q->guard);
    if (specd_policy_has_tree(q->ops)) {
        st = q->ops->propose_tree(q->policy, q->history, q->n_history, q->shadow_cap, depth,
                                  q->shadow_par, q->shadow_tok, &n, NULL, &has_q, &e);
    } else {
        int32_t most = depth < q->shadow_cap ? depth : q->shadow_cap;
        st = q->ops->propose(q->policy, q->history, q->n_history, most, q->shadow_tok, &n, NULL,
                             &has_q, &e);
        for (int32_t i = 0; i < n && i < q->shadow_cap; i++) q->shadow_par[i] = i - 1;
    }
    q->stats.propose_ns += specd_now_ns() - t0;
    /* a failed or malformed shadow only loses its evidence: the real proposal says why */
    if (st != SPECD_OK || n < 1 || n > q->shadow_cap) return;
    for (int32_t i = 0; i < n; i++)
        if (q->shadow_par[i] < -1 || q->shadow_par[i] >= i) return;
    q->n_shadow = n;
    q->shadow_at = -1;
    q->shadow_depth = 0;
}

void specd_spec_shadow_check(spec_seq *q, const int32_t *emitted, int32_t n) {
    for (int32_t i = 0; i < n && q->n_shadow > 0; i++) {
        int32_t next = -1, has_child = 0;
        for (int32_t c = 0; c < q->n_shadow; c++) {
            if (q->shadow_par[c] != q->shadow_at) continue;
            has_child = 1;
            if (q->shadow_tok[c] == emitted[i]) {
                next = c;
                break;
            }
        }
        if (!has_child) break; /* the whole path matched: resolved below */
        if (next < 0) {
            resolve(q);
            return;
        }
        q->shadow_at = next;
        q->shadow_depth++;
    }
    if (q->n_shadow > 0) {
        int leaf = 1;
        for (int32_t c = 0; c < q->n_shadow && leaf; c++) leaf = q->shadow_par[c] != q->shadow_at;
        if (leaf) resolve(q);
    }
}

void specd_spec_shadow_drop(spec_seq *q) { q->n_shadow = 0; }
