/* The acceptance engine: handle, input validation and the three verification shapes. A chain is
 * verified as a tree whose node i has parent i - 1, so both share one walk (verify_walk). */
#include "specd/accept.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/fastmath.h"
#include "common/philox.h"
#include "common/status_internal.h"
#include "verifier/accept/accept_bias.h"
#include "verifier/accept/accept_internal.h"
#include "verifier/accept/xform.h"

/* How far a q row's sum may stray from 1 (drafters compute it in float). */
#define Q_SUM_TOLERANCE 1e-3f

struct specd_accept {
    specd_accept_rule rule;
    float tau;
    int32_t max_k;
    specd_xform xf;
    int32_t nb;         /* blocks per row at max_vocab */
    float *bmax;        /* (max_k + 1) x nb block maxima */
    float *rmax, *rmin; /* max_k + 1 */
    float *resid;       /* max_vocab: the running residual distribution, or bonus weights */
    float *bsum;        /* block sums for the inverse-CDF draw */
    int32_t *parent;    /* max_k: the chain as a tree */
    int32_t *first;     /* max_k + 1: first child of root (0) and of node i (i + 1) */
    int32_t *next;      /* max_k: next sibling */
    int32_t *path;      /* max_k */
    int32_t *tokens;    /* max_k + 1 */
    float *prob;        /* max_k */
    uint8_t *flag;      /* max_k */
    int32_t *rowmap;    /* max_k + 1: a keyed chain's logits row per walk slot */
    specd_accept_mutant mutant; /* always NONE outside the statistical suite's power check */
};

void specd_accept_debug_mutate(specd_accept *a, specd_accept_mutant mutant) { a->mutant = mutant; }

void specd_accept_bias(const specd_accept *a, const specd_logit_bias **bias, size_t *n) {
    *n = a->xf.n_bias;
    *bias = a->xf.n_bias ? a->xf.bias : NULL;
}

specd_accept_params specd_accept_default_params(void) {
    specd_accept_params p;
    memset(&p, 0, sizeof p);
    p.rule = SPECD_ACCEPT_COUPLED;
    p.sampling = specd_sampling_default_params();
    p.max_k = 16;
    return p;
}

void specd_accept_destroy(specd_accept *a) {
    if (!a) return;
    specd_xform_release(&a->xf);
    specd_free(a->bmax);
    specd_free(a->rmax);
    specd_free(a->rmin);
    specd_free(a->resid);
    specd_free(a->bsum);
    specd_free(a->parent);
    specd_free(a->first);
    specd_free(a->next);
    specd_free(a->path);
    specd_free(a->tokens);
    specd_free(a->prob);
    specd_free(a->flag);
    specd_free(a->rowmap);
    specd_free(a);
}

specd_status specd_accept_create(const specd_accept_params *p, specd_accept **out,
                                 specd_error *err) {
    if (!p || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "params or out is NULL");
    if (p->rule != SPECD_ACCEPT_GREEDY && p->rule != SPECD_ACCEPT_REJECTION &&
        p->rule != SPECD_ACCEPT_COUPLED)
        return specd_fail(err, SPECD_E_INVALID_ARG, "rule %d is not a specd_accept_rule",
                          (int)p->rule);
    if (p->max_k < 1 || p->max_k > SPECD_ACCEPT_MAX_K)
        return specd_fail(err, SPECD_E_INVALID_ARG, "max_k %d outside [1, %d]", (int)p->max_k,
                          SPECD_ACCEPT_MAX_K);
    if (!(p->relaxed_tau >= 0.0f) || !isfinite(p->relaxed_tau))
        return specd_fail(err, SPECD_E_INVALID_ARG, "relaxed_tau %g: must be finite and >= 0",
                          (double)p->relaxed_tau);
    if (p->relaxed_tau > 0.0f && p->rule != SPECD_ACCEPT_REJECTION)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "relaxed_tau applies to the REJECTION rule only");
    specd_accept *a = specd_alloc_array(1, sizeof *a);
    if (!a) return specd_fail(err, SPECD_E_NOMEM, "accept handle");
    specd_sampling_params sp = p->sampling;
    if (p->rule == SPECD_ACCEPT_GREEDY) sp.temperature = 0.0f; /* argmax of the biased logits */
    specd_status st = specd_xform_init(&a->xf, &sp, p->max_vocab, err);
    if (st != SPECD_OK) {
        specd_free(a);
        return st;
    }
    a->rule = p->rule;
    a->tau = p->relaxed_tau;
    a->max_k = p->max_k;
    a->nb = specd_n_blocks(p->max_vocab);
    size_t rows = (size_t)p->max_k + 1, k = (size_t)p->max_k;
    size_t nbmax;
    if (!specd_mul_ok(rows, (size_t)a->nb, &nbmax)) nbmax = SIZE_MAX;
    a->bmax = specd_alloc_array(nbmax, sizeof *a->bmax);
    a->rmax = specd_alloc_array(rows, sizeof *a->rmax);
    a->rmin = specd_alloc_array(rows, sizeof *a->rmin);
    a->resid = specd_alloc_array((size_t)p->max_vocab, sizeof *a->resid);
    a->bsum = specd_alloc_array((size_t)a->nb, sizeof *a->bsum);
    a->parent = specd_alloc_array(k, sizeof *a->parent);
    a->first = specd_alloc_array(rows, sizeof *a->first);
    a->next = specd_alloc_array(k, sizeof *a->next);
    a->path = specd_alloc_array(k, sizeof *a->path);
    a->tokens = specd_alloc_array(rows, sizeof *a->tokens);
    a->prob = specd_alloc_array(k, sizeof *a->prob);
    a->flag = specd_alloc_array(k, sizeof *a->flag);
    a->rowmap = specd_alloc_array(rows, sizeof *a->rowmap);
    if (!a->bmax || !a->rmax || !a->rmin || !a->resid || !a->bsum || !a->parent || !a->first || !a->next ||
        !a->path || !a->tokens || !a->prob || !a->flag || !a->rowmap) {
        specd_accept_destroy(a);
        return specd_fail(err, SPECD_E_NOMEM, "accept scratch for max_k %d, max_vocab %d",
                          (int)p->max_k, (int)p->max_vocab);
    }
    for (int32_t i = 0; i < p->max_k; i++) a->parent[i] = i - 1;
    *out = a;
    return SPECD_OK;
}

/* ---- validation --------------------------------------------------------------------------- */

static specd_status check_tokens(const specd_accept *a, const int32_t *tok, int32_t n,
                                 int32_t n_vocab, const char *what, specd_error *err) {
    for (int32_t i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= n_vocab)
            return specd_fail(err, SPECD_E_INVALID_ARG, "%s %d: token %d outside [0, %d)", what,
                              (int)i, (int)tok[i], (int)n_vocab);
    (void)a;
    return SPECD_OK;
}

/* Checks the rows the walk will read: walk slot s reads logits row rowmap[s] (s without a
 * rowmap; -1 = a slot that reads nothing), and its block maxima and extremes go to slot s. */
static specd_status check_rows(specd_accept *a, const float *logits, const int32_t *rowmap,
                               int32_t slots, int32_t n_vocab, specd_error *err) {
    for (int32_t s = 0; s < slots; s++) {
        int32_t r = rowmap ? rowmap[s] : s;
        if (r < 0) continue;
        SPECD_TRY(specd_row_check(logits + (size_t)r * (size_t)n_vocab, n_vocab, "target_logits",
                                  r, a->bmax + (size_t)s * (size_t)a->nb, &a->rmax[s],
                                  &a->rmin[s], err));
    }
    return SPECD_OK;
}

/* q rows: finite, >= 0, summing to 1, and giving the drafted token a nonzero probability. */
static specd_status check_q(const float *q, int32_t rows, int32_t n_vocab, const int32_t *tok,
                            specd_error *err) {
    for (int32_t r = 0; r < rows; r++) {
        const float *row = q + (size_t)r * (size_t)n_vocab;
        float s;
        if (specd_prob_row_sum(row, n_vocab, &s)) {
            for (int32_t x = 0; x < n_vocab; x++)
                if (!(row[x] >= 0.0f && row[x] <= 1.0f))
                    return specd_fail(err, SPECD_E_NUMERIC,
                                      "draft_probs row %d token %d: %g is not a probability",
                                      (int)r, (int)x, (double)row[x]);
        }
        if (!(fabsf(s - 1.0f) <= Q_SUM_TOLERANCE))
            return specd_fail(err, SPECD_E_NUMERIC, "draft_probs row %d sums to %g, not 1",
                              (int)r, (double)s);
        if (!(row[tok[r]] > 0.0f))
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "draft %d: token %d has q = 0, so it cannot have been drawn from q",
                              (int)r, (int)tok[r]);
    }
    return SPECD_OK;
}

static specd_status check_common(specd_accept *a, int32_t n, const char *count_name,
                                 int32_t n_vocab, specd_error *err) {
    if (n < 1 || n > a->max_k)
        return specd_fail(err, SPECD_E_INVALID_ARG, "%s %d outside [1, max_k %d]", count_name,
                          (int)n, (int)a->max_k);
    return specd_xform_check_vocab(&a->xf, n_vocab, err);
}

/* ---- the walk ----------------------------------------------------------------------------- */

typedef struct walk_in {
    int32_t n;
    const int32_t *parent, *token;
    const float *q, *logits;
    int32_t n_vocab;
    specd_sample_key key;
    /* keyed chains (specd_accept_chain_keyed), else NULL: the logits row of walk slot s (-1 for
     * the slot after the last draft = no bonus token), and the key position of slot s */
    const int32_t *rowmap;
    const uint32_t *pos;
} walk_in;

/* Prepares the row that walk slot `slot` reads (the children of node slot - 1 are tested on it). */
static specd_status prepare_row(specd_accept *a, const walk_in *w, int32_t slot, specd_xrow *r,
                                specd_error *err) {
    int32_t row = w->rowmap ? w->rowmap[slot] : slot;
    return specd_xform_prepare(&a->xf, w->logits + (size_t)row * (size_t)w->n_vocab, w->n_vocab,
                               a->bmax + (size_t)slot * (size_t)a->nb, a->rmax[slot],
                               a->rmin[slot], "target_logits", row, r, err);
}

/* resid <- max(0, resid / rsum - q_j) (or from p on the first rejection); returns the new sum. */
static float residual_update(specd_accept *a, const walk_in *w, specd_xrow *r, int first,
                             float rsum, int32_t j) {
    const int32_t n = w->n_vocab;
    float *res = a->resid;
    if (first) {
        specd_xrow_weights(&a->xf, r, specd_xrow_sum(&a->xf, r), res); /* p = e / Z */
    } else if (a->mutant != SPECD_MUTANT_NO_RENORMALISE) {
        for (int32_t y = 0; y < n; y++) res[y] = res[y] / rsum;
    }
    if (a->mutant == SPECD_MUTANT_RESIDUAL_IS_P) return specd_lane_sum(res, n);
    if (w->q) {
        const float *q = w->q + (size_t)j * (size_t)n;
        for (int32_t y = 0; y < n; y++) {
            float d = res[y] - q[y];
            res[y] = d > 0.0f ? d : 0.0f;
        }
    } else {
        float d = res[w->token[j]] - 1.0f;
        res[w->token[j]] = d > 0.0f ? d : 0.0f;
    }
    return specd_lane_sum(res, n);
}

/* A token drawn from weights a->resid by the keyed inverse CDF (purpose, counter word 0 = 0). */
static int32_t draw_resid(specd_accept *a, int32_t n, specd_sample_key key,
                          specd_rng_purpose purpose) {
    return specd_cdf_draw(a->resid, n, specd_sampling_uniform(key, purpose, 0), a->bsum);
}

/* Walks from the root; writes a->path, a->tokens, a->prob (per node, -1 if never examined). */
static specd_status verify_walk(specd_accept *a, const walk_in *w, int32_t *n_accepted,
                                specd_error *err) {
    const int32_t n = w->n;
    for (int32_t i = 0; i <= n; i++) a->first[i] = -1;
    for (int32_t i = n - 1; i >= 0; i--) {
        a->next[i] = a->first[w->parent[i] + 1];
        a->first[w->parent[i] + 1] = i;
        a->prob[i] = -1.0f;
    }
    int32_t v = -1, na = 0;
    for (;;) {
        /* a keyed chain without a bonus row ends at its last accepted draft, sampling nothing */
        if (w->rowmap && w->rowmap[v + 1] < 0) break;
        specd_xrow r;
        SPECD_TRY(prepare_row(a, w, v + 1, &r, err));
        specd_sample_key key = w->key;
        key.position = w->pos ? w->pos[na] : w->key.position + (uint32_t)na;
        int32_t c = a->first[v + 1], next_v = -1;
        if (a->rule != SPECD_ACCEPT_REJECTION || r.greedy) {
            int32_t target = specd_xrow_keyed(&a->xf, &r, key, SPECD_RNG_SAMPLE);
            for (; c >= 0 && next_v < 0; c = a->next[c]) {
                int hit = w->token[c] == target;
                a->prob[c] = hit ? 1.0f : 0.0f;
                if (hit) next_v = c;
            }
            if (next_v < 0) {
                a->tokens[na] = target;
                break;
            }
        } else if (c < 0) { /* a leaf: the bonus token, drawn from p */
            specd_xrow_weights_bsum(&a->xf, &r, a->resid, a->bsum);
            a->tokens[na] = specd_cdf_draw_summed(
                a->resid, w->n_vocab, specd_sampling_uniform(key, SPECD_RNG_BONUS, 0), a->bsum);
            break;
        } else {
            int in_resid = 0;
            float rsum = 0.0f;
            for (; c >= 0; c = a->next[c]) {
                int32_t x = w->token[c];
                float rx = in_resid ? a->resid[x] / rsum
                                    : specd_xrow_e(&a->xf, &r, x) / specd_xrow_sum(&a->xf, &r);
                float qx = w->q ? w->q[(size_t)c * (size_t)w->n_vocab + (size_t)x] : 1.0f;
                float num = a->tau > 0.0f ? rx * (1.0f + a->tau) : rx;
                float ratio = a->mutant == SPECD_MUTANT_RATIO_Q_OVER_P ? qx / num : num / qx;
                float pr = ratio < 1.0f ? ratio : 1.0f;
                a->prob[c] = pr;
                if (specd_sampling_uniform(key, SPECD_RNG_ACCEPT, (uint32_t)c) < pr) {
                    next_v = c;
                    break;
                }
                rsum = residual_update(a, w, &r, !in_resid, rsum, c);
                in_resid = 1;
            }
            if (next_v < 0) {
                int32_t y = draw_resid(a, w->n_vocab, key, SPECD_RNG_RESIDUAL);
                if (y < 0) { /* empty residual (p == q up to rounding): draw from p instead */
                    specd_xrow_weights(&a->xf, &r, 1.0f, a->resid);
                    y = draw_resid(a, w->n_vocab, key, SPECD_RNG_BONUS);
                }
                a->tokens[na] = y;
                break;
            }
        }
        a->path[na] = next_v;
        a->tokens[na] = w->token[next_v];
        na++;
        v = next_v;
    }
    *n_accepted = na;
    return SPECD_OK;
}

/* ---- public calls ------------------------------------------------------------------------- */

specd_status specd_accept_chain(specd_accept *a, const specd_chain_input *in,
                                specd_chain_result *out, specd_error *err) {
    if (!a || !in || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "NULL argument");
    SPECD_TRY(check_common(a, in->k, "k", in->n_vocab, err));
    if (!in->draft || !in->target_logits || !out->tokens)
        return specd_fail(err, SPECD_E_INVALID_ARG, "draft, target_logits or tokens is NULL");
    if (in->draft_probs && in->q_vocab != in->n_vocab)
        return specd_fail(err, SPECD_E_MISMATCH, "draft_probs have %d tokens, target_logits %d",
                          (int)in->q_vocab, (int)in->n_vocab);
    SPECD_TRY(check_tokens(a, in->draft, in->k, in->n_vocab, "draft", err));
    SPECD_TRY(check_rows(a, in->target_logits, NULL, in->k + 1, in->n_vocab, err));
    if (in->draft_probs) SPECD_TRY(check_q(in->draft_probs, in->k, in->n_vocab, in->draft, err));
    walk_in w = {in->k, a->parent, in->draft, in->draft_probs, in->target_logits, in->n_vocab,
                 in->key, NULL, NULL};
    int32_t na;
    SPECD_TRY(verify_walk(a, &w, &na, err));
    memcpy(out->tokens, a->tokens, (size_t)(na + 1) * sizeof *out->tokens);
    if (out->accept_prob) memcpy(out->accept_prob, a->prob, (size_t)in->k * sizeof *a->prob);
    out->n_accepted = na;
    out->n_emitted = na + 1;
    out->lossy = a->tau > 0.0f;
    return SPECD_OK;
}

specd_status specd_accept_chain_keyed(specd_accept *a, const specd_chain_input *in,
                                      const specd_chain_keys *keys, specd_chain_result *out,
                                      specd_error *err) {
    if (!a || !in || !keys || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "NULL argument");
    SPECD_TRY(check_common(a, in->k, "k", in->n_vocab, err));
    if (!in->draft || !in->target_logits || !out->tokens)
        return specd_fail(err, SPECD_E_INVALID_ARG, "draft, target_logits or tokens is NULL");
    if (in->draft_probs && in->q_vocab != in->n_vocab)
        return specd_fail(err, SPECD_E_MISMATCH, "draft_probs have %d tokens, target_logits %d",
                          (int)in->q_vocab, (int)in->n_vocab);
    const int32_t k = in->k;
    if (keys->n_rows < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "keys: n_rows %d must be >= 1",
                          (int)keys->n_rows);
    for (int32_t i = 0; i < k; i++) {
        int32_t r = keys->key_row ? keys->key_row[i] : i;
        if (r < 0 || r >= keys->n_rows)
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "keys: draft %d's key row %d is outside [0, n_rows %d)", (int)i,
                              (int)r, (int)keys->n_rows);
        a->rowmap[i] = r;
    }
    if (keys->bonus_row != SPECD_CHAIN_NO_BONUS &&
        (keys->bonus_row < 0 || keys->bonus_row >= keys->n_rows))
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "keys: bonus row %d is neither SPECD_CHAIN_NO_BONUS nor in [0, %d)",
                          (int)keys->bonus_row, (int)keys->n_rows);
    a->rowmap[k] = keys->bonus_row;
    SPECD_TRY(check_tokens(a, in->draft, k, in->n_vocab, "draft", err));
    SPECD_TRY(check_rows(a, in->target_logits, a->rowmap, k + 1, in->n_vocab, err));
    if (in->draft_probs) SPECD_TRY(check_q(in->draft_probs, k, in->n_vocab, in->draft, err));
    walk_in w = {k, a->parent, in->draft, in->draft_probs, in->target_logits, in->n_vocab,
                 in->key, a->rowmap, keys->positions};
    int32_t na;
    SPECD_TRY(verify_walk(a, &w, &na, err));
    /* a correction after a rejection, or the bonus token when there is a bonus row */
    int32_t n_emitted = na + (na < k || keys->bonus_row != SPECD_CHAIN_NO_BONUS);
    memcpy(out->tokens, a->tokens, (size_t)n_emitted * sizeof *out->tokens);
    if (out->accept_prob) memcpy(out->accept_prob, a->prob, (size_t)k * sizeof *a->prob);
    out->n_accepted = na;
    out->n_emitted = n_emitted;
    out->lossy = a->tau > 0.0f;
    return SPECD_OK;
}

specd_status specd_accept_tree(specd_accept *a, const specd_tree_input *in,
                               specd_tree_result *out, specd_error *err) {
    if (!a || !in || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "NULL argument");
    SPECD_TRY(check_common(a, in->n_nodes, "n_nodes", in->n_vocab, err));
    if (!in->parent || !in->token || !in->target_logits || !out->path || !out->tokens)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "parent, token, target_logits, path or tokens is NULL");
    for (int32_t i = 0; i < in->n_nodes; i++)
        if (in->parent[i] < -1 || in->parent[i] >= i)
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "tree node %d: parent %d is neither -1 nor an earlier node", (int)i,
                              (int)in->parent[i]);
    if (in->draft_probs && in->q_vocab != in->n_vocab)
        return specd_fail(err, SPECD_E_MISMATCH, "draft_probs have %d tokens, target_logits %d",
                          (int)in->q_vocab, (int)in->n_vocab);
    SPECD_TRY(check_tokens(a, in->token, in->n_nodes, in->n_vocab, "tree node", err));
    SPECD_TRY(check_rows(a, in->target_logits, NULL, in->n_nodes + 1, in->n_vocab, err));
    if (in->draft_probs)
        SPECD_TRY(check_q(in->draft_probs, in->n_nodes, in->n_vocab, in->token, err));
    walk_in w = {in->n_nodes, in->parent, in->token, in->draft_probs, in->target_logits,
                 in->n_vocab, in->key, NULL, NULL};
    int32_t na;
    SPECD_TRY(verify_walk(a, &w, &na, err));
    memcpy(out->path, a->path, (size_t)na * sizeof *out->path);
    memcpy(out->tokens, a->tokens, (size_t)(na + 1) * sizeof *out->tokens);
    out->n_accepted = na;
    out->n_emitted = na + 1;
    out->lossy = a->tau > 0.0f;
    return SPECD_OK;
}

specd_status specd_accept_positionwise(specd_accept *a, const specd_positionwise_input *in,
                                       specd_positionwise_result *out, specd_error *err) {
    if (!a || !in || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "NULL argument");
    SPECD_TRY(check_common(a, in->n, "n", in->n_vocab, err));
    if (!in->draft || !in->target_logits || !out->accept)
        return specd_fail(err, SPECD_E_INVALID_ARG, "draft, target_logits or accept is NULL");
    SPECD_TRY(check_tokens(a, in->draft, in->n, in->n_vocab, "draft", err));
    SPECD_TRY(check_rows(a, in->target_logits, NULL, in->n, in->n_vocab, err));
    walk_in w = {in->n, NULL, in->draft, NULL, in->target_logits, in->n_vocab, in->key, NULL,
                 NULL};
    int32_t na = 0;
    for (int32_t i = 0; i < in->n; i++) {
        specd_xrow r;
        SPECD_TRY(prepare_row(a, &w, i, &r, err));
        specd_sample_key key = in->key;
        key.position = in->positions ? in->positions[i] : in->key.position + (uint32_t)i;
        a->tokens[i] = specd_xrow_keyed(&a->xf, &r, key, SPECD_RNG_SAMPLE);
        a->flag[i] = a->tokens[i] == in->draft[i];
        na += a->flag[i];
    }
    memcpy(out->accept, a->flag, (size_t)in->n);
    if (out->target) memcpy(out->target, a->tokens, (size_t)in->n * sizeof *out->target);
    out->n_accepted = na;
    return SPECD_OK;
}
