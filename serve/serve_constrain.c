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
} choice_grammar;

static void choice_grammar_free(void *user) {
    choice_grammar *cg = user;
    specd_grammar_processor_destroy(cg->p); /* before its grammar */
    serve_grammar_release(cg->g);
    free(cg);
}

specd_status serve_constrain_processor(serve_grammar_ref *g, specd_row_processor *ops,
                                       serve_job_cleanup *cleanup, void **user, specd_error *err) {
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
    *ops = specd_grammar_processor_ops(cg->p);
    *cleanup = choice_grammar_free;
    *user = cg;
    return SPECD_OK;
}
