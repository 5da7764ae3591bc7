/* A request's output constraint at run time: its grammar from the server's cache (compiled on
 * first use; a source that does not compile is a 400 naming the field that held it), and each
 * choice's grammar processor (specd/grammar_processor.h, jump-forward drafts on), which the
 * choice's job frees once its sequence has closed. */
#ifndef SPECD_SERVE_CONSTRAIN_H
#define SPECD_SERVE_CONSTRAIN_H

#include "serve/serve_engine.h"
#include "serve/serve_grammars.h"
#include "serve/serve_request.h"

/* The request's grammar (*out NULL when it has no constraint). 0, or -1 with why filled. The
 * caller releases *out (serve_grammar_release). */
int serve_constrain_grammar(serve_grammars *c, const serve_request *req, serve_grammar_ref **out,
                            serve_refusal *why);

/* One choice's processor over g (g NULL: *ops zeroed, nothing to free). On success ops is what
 * goes into specd_seq_params.processor, and (cleanup, user) what serve_engine_submit frees after
 * the sequence (it holds its own reference to g). Drafts past an end-of-generation token (a stop
 * token of the sequence) are cut by the session, which scores no row after one. */
specd_status serve_constrain_processor(serve_grammar_ref *g, specd_row_processor *ops,
                                       serve_job_cleanup *cleanup, void **user, specd_error *err);

#endif
