/* specd serve: the OpenAI-compatible HTTP front of the stationary batch loop.
 *   POST /v1/completions, /v1/chat/completions  (stream: server-sent events, else one JSON body)
 *   GET  /v1/models, /v1/models/{id}, /health, /metrics (Prometheus text)
 *   POST /tokenize, /detokenize; GET /tokenizer_info (serve_tokenize.h)
 * A request may ask for several choices (n, or a batch of prompts on /v1/completions): each is a
 * sequence of its own in the loop.
 * Each request runs as its own sequence in the loop, with the request's policy or the server's
 * default. Sampling is keyed by the request's seed (or, without one, a seed the server counts up
 * from --seed) and stream key 0, so a request with a seed gets the same tokens as
 * `specd generate --seed S` with the same sampling, whatever runs beside it; choice i of a prompt
 * (n > 1) is seeded S + i. */
#ifndef SPECD_SERVE_SERVER_H
#define SPECD_SERVE_SERVER_H

#include <stdint.h>

#include "common/http_server.h"
#include "specd/runtime.h"
#include "specd/spec_loop.h"
#include "specd/tokenizer.h"

typedef struct serve_server serve_server;

typedef struct serve_server_params {
    http_server_params http;
    specd_loop_params loop;
    const char *model_id;               /* the name requests must use (default "specd") */
    int32_t max_tokens_cap;             /* default 1024 */
    int32_t default_max_tokens;         /* default 256 (at most the cap) */
    const char *default_policy;         /* default "none" */
    const char *default_policy_options; /* may be NULL */
    uint64_t seed_base;                 /* first seed for requests without one */
} serve_server_params;

serve_server_params serve_server_default_params(void);

/* model and tok are borrowed and must outlive the server. Starts the loop's thread and listens.
 * Caller owns *out. */
specd_status serve_server_create(const specd_model *model, const specd_tokenizer *tok,
                                 const serve_server_params *p, serve_server **out,
                                 specd_error *err);
int serve_server_port(const serve_server *srv);
/* Graceful stop: new requests get 503, and the requests in flight get up to grace_ms to end. */
void serve_server_drain(serve_server *srv, int grace_ms);
/* Ends what still runs, closes every connection and frees the server. NULL is a no-op. */
void serve_server_destroy(serve_server *srv);

#endif
