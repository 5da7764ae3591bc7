/* Row processors in the spec session (session/spec_processor.h, specd/processor.h). */
#include "session/spec_processor.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <math.h>
#include <string.h>

specd_status specd_seq_proc_open(const specd_spec *spec, spec_seq *q, const int32_t *prompt,
                                 int64_t n_prompt, const specd_seq_params *p, specd_error *err) {
    const specd_row_processor *hp = &p->processor;
    int pen = specd_penalties_active(&p->penalties);
    int host = hp->apply != NULL;
    if (!host && (hp->admit || hp->forced || hp->commit))
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "spec: sequence %d: a row processor needs its apply", q->id);
    if (!pen && !host) return SPECD_OK;
    if (spec->rv)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "spec: sequence %d: penalties and row processors need in-process "
                          "verification; the remote verifier daemon scores rows itself", q->id);
    if (!q->ops->propose)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "spec: sequence %d: policy %s lays out its own rows; penalties and row "
                          "processors need a drafter-shaped policy (none, ngram, suffix, recycle, "
                          "draft, layerskip, remote)", q->id, q->ops->name);
    if (pen) {
        SPECD_TRY(specd_penalties_create(&p->penalties, spec->params.n_vocab, prompt, n_prompt,
                                         &q->pen, err));
        q->proc[q->n_proc++] = specd_penalties_processor(q->pen);
    }
    if (host) q->proc[q->n_proc++] = *hp;
    return SPECD_OK;
}

void specd_seq_proc_release(spec_seq *q) {
    specd_penalties_destroy(q->pen);
    q->pen = NULL;
    q->n_proc = 0;
}

static specd_row_path committed_path(const spec_seq *q) {
    return (specd_row_path){.tokens = q->history, .n_tokens = q->n_history,
                            .n_prompt = q->n_prompt, .n_committed = q->n_history};
}

/* How many of drafts[0..n) after path every processor but `skip` admits. */
static int32_t admitted(const spec_seq *q, const specd_row_path *path, const int32_t *drafts,
                        int32_t n, int32_t skip) {
    for (int32_t i = 0; i < q->n_proc && n > 0; i++) {
        if (i == skip || !q->proc[i].admit) continue;
        int32_t a = q->proc[i].admit(q->proc[i].user, path, drafts, n);
        n = a < 0 ? 0 : a < n ? a : n;
    }
    return n;
}

void specd_seq_proc_admit_chain(spec_seq *q) {
    if (q->n_proc == 0 || q->n_draft == 0) return;
    specd_row_path path = committed_path(q);
    int32_t n = admitted(q, &path, q->draft, q->n_draft, -1);
    /* the sequence ends at a stop token: drafts after one are never used */
    for (int32_t i = 0; i + 1 < n; i++)
        if (specd_seq_is_stop(q, q->draft[i])) n = i + 1;
    q->stats.n_draft_cut += q->n_draft - n;
    q->n_draft = n;
}

/* Writes node i's path (its ancestors, then itself) after the history; returns its depth. */
static int32_t node_path(spec_seq *q, int32_t i) {
    int32_t depth = 0;
    for (int32_t a = i; a >= 0; a = q->tree_parent[a]) depth++;
    int32_t d = depth;
    for (int32_t a = i; a >= 0; a = q->tree_parent[a]) q->history[q->n_history + --d] = q->draft[a];
    return depth;
}

void specd_seq_proc_admit_tree(spec_seq *q, int32_t n_vocab, int32_t *n) {
    if (q->n_proc == 0 || *n == 0) return;
    specd_row_path path = committed_path(q);
    int32_t *index = q->tree_path; /* free until verification: old node -> new node, or -1 */
    /* first decide every node on the tree as laid out (node_path reads ancestors by their
     * slots), then compact: compacting while deciding would move a later node into a slot an
     * ancestor of a node still to decide is read from */
    for (int32_t i = 0; i < *n; i++) {
        int32_t par = q->tree_parent[i];
        index[i] = -1;
        if (par >= 0 && (index[par] < 0 || specd_seq_is_stop(q, q->draft[par])))
            continue; /* its parent was cut, or ends the sequence */
        int32_t depth = node_path(q, i);
        if (admitted(q, &path, q->history + q->n_history, depth, -1) == depth) index[i] = 0;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < *n; i++) {
        if (index[i] < 0) continue;
        int32_t par = q->tree_parent[i];
        index[i] = m;
        q->draft[m] = q->draft[i];
        q->tree_parent[m] = par < 0 ? -1 : index[par];
        if (q->has_q && m != i)
            memmove(q->q + (size_t)m * (size_t)n_vocab, q->q + (size_t)i * (size_t)n_vocab,
                    (size_t)n_vocab * sizeof(float));
        m++;
    }
    q->stats.n_draft_cut += *n - m;
    *n = m;
}

void specd_seq_proc_force(spec_seq *q, int32_t max, int32_t n_vocab) {
    for (int32_t j = 0; j < q->n_proc && q->n_draft < max; j++) {
        if (!q->proc[j].forced) continue;
        if (q->has_q && q->q_dev) specd_spec_seq_q_to_host(q); /* one-hot rows go on host q */
        memcpy(q->history + q->n_history, q->draft, (size_t)q->n_draft * sizeof(int32_t));
        specd_row_path path = committed_path(q);
        path.n_tokens += q->n_draft;
        int32_t *out = q->draft + q->n_draft;
        int32_t f = q->proc[j].forced(q->proc[j].user, &path, out, max - q->n_draft);
        f = f < 0 ? 0 : f > max - q->n_draft ? max - q->n_draft : f;
        for (int32_t i = 0; i < f; i++)
            if (out[i] < 0 || out[i] >= n_vocab) f = i; /* not a token: the rest is not used */
        f = admitted(q, &path, out, f, j);
        for (int32_t i = 0; i < f && q->has_q; i++) {
            /* a forced token is drawn with certainty: q is one-hot (rejection sampling then
             * accepts it with the target's probability, losslessly) */
            float *row = q->q + (size_t)(q->n_draft + i) * (size_t)n_vocab;
            memset(row, 0, (size_t)n_vocab * sizeof(float));
            row[out[i]] = 1.0f;
        }
        q->n_draft += f;
        q->stats.n_forced += f;
    }
}

/* 1 when row r cannot be reached: the row it follows is unreachable or bans its draft, or its
 * draft is a stop token (the sequence ends there; a grammar allows nothing after its end). */
static int row_dead(const spec_seq *q, const uint8_t *dead, const float *rows, int32_t n_vocab,
                    int32_t r) {
    if (r == 0) return 0;
    int32_t node = r - 1;
    int32_t from = q->tree && q->tree_parent[node] >= 0 ? 1 + q->tree_parent[node]
                   : q->tree ? 0 : r - 1;
    return dead[from] || specd_seq_is_stop(q, q->draft[node]) ||
           !(rows[(size_t)from * (size_t)n_vocab + q->draft[node]] > -INFINITY);
}

specd_status specd_seq_proc_rows(specd_spec *spec, spec_seq *q, const specd_logits *lg,
                                 int32_t row0, const char *what, const float **out,
                                 specd_error *err) {
    int32_t n_vocab = spec->params.n_vocab, n_rows = q->n_step_rows;
    int32_t max_rows = specd_spec_max_step_rows(spec);
    float *rows = NULL;
    SPECD_TRY(specd_logits_copy(&spec->proc_scratch, max_rows, n_vocab, lg, row0, n_rows, what,
                                &rows, err));
    if (!spec->proc_dead && !(spec->proc_dead = specd_alloc_array((size_t)max_rows, 1)))
        return specd_fail(err, SPECD_E_NOMEM, "spec: out of memory");
    uint8_t *dead = spec->proc_dead;
    specd_row_path path = committed_path(q);
    if (!q->tree) memcpy(q->history + q->n_history, q->draft, (size_t)q->n_draft * sizeof(int32_t));
    for (int32_t r = 0; r < n_rows; r++) {
        dead[r] = (uint8_t)row_dead(q, dead, rows, n_vocab, r);
        if (dead[r]) continue; /* the intake below still checks it */
        path.n_tokens = q->n_history + (r == 0 ? 0 : q->tree ? node_path(q, r - 1) : r);
        float *row = rows + (size_t)r * (size_t)n_vocab;
        for (int32_t i = 0; i < q->n_proc; i++)
            SPECD_TRY(q->proc[i].apply(q->proc[i].user, &path, row, n_vocab, err));
    }
    specd_logits view = {.data = rows, .row_stride = n_vocab, .n_rows = n_rows,
                         .dtype = SPECD_DTYPE_F32, .device = SPECD_DEVICE_HOST};
    return specd_logits_intake(&spec->scratch, max_rows, n_vocab, &view, 0, n_rows, &q->mask,
                               what, NULL, NULL, out, err);
}

void specd_seq_proc_commit(spec_seq *q, const int32_t *tokens, int32_t n) {
    for (int32_t i = 0; i < q->n_proc && n > 0; i++)
        if (q->proc[i].commit) q->proc[i].commit(q->proc[i].user, tokens, n);
}
