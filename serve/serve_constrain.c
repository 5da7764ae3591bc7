#include "serve/serve_constrain.h"

#include <stdlib.h>

#include "common/status_internal.h"
#include "specd/grammar_processor.h"

int serve_constrain_grammar(serve_grammars *c, const serve_request *req, serve_grammar_ref **out,
                            serve_refusal *why) {
    *out = NULL;
    const serve_structured *s = req->structured;
    if (!s || s->kind == SERVE_CONSTRAINT_NONE) return 0;
    specd_error err;
    specd_status st = serve_grammars_get(c, s->kind, s->source, out, &err);
    if (st == SPECD_OK) return 0;
    if (st == SPECD_E_NOMEM) return serve_refuse(why, 500, "server_error", NULL, "%s", err.message);
    const char *p = req->constraint_param;
    return serve_refuse(why, 400, "invalid_request_error", p, "'%s': %s", p, err.message);
}

typedef struct choice_grammar {
    specd_grammar_processor *p;
    serve_grammar_ref *g;
    specd_row_processor inner; /* p's callbacks */
    const int32_t *eog;        /* borrowed from the server */
    int32_t n_eog;
} choice_grammar;

/* Where the first end-of-generation token is in t[0..n), or -1. */
static int32_t first_eog(const choice_grammar *cg, const int32_t *t, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        for (int32_t j = 0; j < cg->n_eog; j++)
            if (t[i] == cg->eog[j]) return (int32_t)i;
    return -1;
}

/* Whether a draft in the path ends the answer: the rows past it are never used (the sequence
 * stops at an end-of-generation token), but the grammar allows nothing after one, so masking them
 * would leave rows with every token banned, which the session refuses. Such rows are left as
 * they are and the drafts past an end-of-generation token are cut (they could never count). */
static int past_end(const choice_grammar *cg, const specd_row_path *path) {
    return first_eog(cg, path->tokens + path->n_committed,
                     path->n_tokens - path->n_committed) >= 0;
}

static specd_status cg_apply(void *user, const specd_row_path *path, float *logits,
                             int32_t n_vocab, specd_error *err) {
    choice_grammar *cg = user;
    if (past_end(cg, path)) return SPECD_OK;
    return cg->inner.apply(cg->inner.user, path, logits, n_vocab, err);
}

static int32_t cg_admit(void *user, const specd_row_path *path, const int32_t *drafts,
                        int32_t n) {
    choice_grammar *cg = user;
    if (past_end(cg, path)) return 0;
    int32_t k = cg->inner.admit ? cg->inner.admit(cg->inner.user, path, drafts, n) : n;
    int32_t e = first_eog(cg, drafts, k);
    return e >= 0 ? e + 1 : k;
}

static int32_t cg_forced(void *user, const specd_row_path *path, int32_t *out, int32_t max) {
    choice_grammar *cg = user;
    if (past_end(cg, path) || !cg->inner.forced) return 0;
    return cg->inner.forced(cg->inner.user, path, out, max);
}

static void cg_commit(void *user, const int32_t *tokens, int32_t n) {
    choice_grammar *cg = user;
    if (cg->inner.commit) cg->inner.commit(cg->inner.user, tokens, n);
}

static void choice_grammar_free(void *user) {
    choice_grammar *cg = user;
    specd_grammar_processor_destroy(cg->p); /* before its grammar */
    serve_grammar_release(cg->g);
    free(cg);
}

specd_status serve_constrain_processor(serve_grammar_ref *g, const int32_t *eog, int32_t n_eog,
                                       specd_row_processor *ops, serve_job_cleanup *cleanup,
                                       void **user, specd_error *err) {
    *ops = (specd_row_processor){0};
    *cleanup = NULL;
    *user = NULL;
    if (!g) return SPECD_OK;
    choice_grammar *cg = calloc(1, sizeof *cg);
    if (!cg) return specd_fail(err, SPECD_E_NOMEM, "serve: no memory");
    specd_status st = specd_grammar_processor_create(serve_grammar_of(g), 1, &cg->p, err);
    if (st != SPECD_OK) {
        free(cg);
        return st;
    }
    cg->g = serve_grammar_hold(g);
    cg->inner = specd_grammar_processor_ops(cg->p);
    cg->eog = eog;
    cg->n_eog = n_eog;
    *ops = (specd_row_processor){.apply = cg_apply,
                                 .admit = cg_admit,
                                 .forced = cg_forced,
                                 .commit = cg_commit,
                                 .user = cg};
    *cleanup = choice_grammar_free;
    *user = cg;
    return SPECD_OK;
}
