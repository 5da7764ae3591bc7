#include "serve/serve_server.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/status_internal.h"
#include "serve/serve_detok.h"
#include "serve/serve_engine.h"
#include "serve/serve_logprobs.h"
#include "serve/serve_prom.h"
#include "serve/serve_request.h"
#include "serve/serve_response.h"

#define MAX_EOG 16
/* How long a waiting handler sleeps between checks that its client is still there. */
#define POLL_MS 100

struct serve_server {
    const specd_tokenizer *tok;
    serve_engine *engine;
    serve_http *http;
    serve_limits limits;
    size_t http_max_body;
    char *model_id, *default_policy, *default_policy_options;
    int32_t eog[MAX_EOG];
    int32_t n_eog;
    atomic_uint_fast64_t next_seed, next_id;
    atomic_int draining;
    /* finished requests by reason, and refusals */
    atomic_llong n_stop, n_length, n_abort, n_failed, n_rejected;
    pthread_mutex_t hist_mu;
    serve_hist ttft, e2e; /* seconds from the request's arrival: first token; answer complete */
};

/* vLLM's buckets for the same two histograms. */
static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                     0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
static const double e2e_bounds[] = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,  2.5,   5.0,   10.0, 15.0,
                                    20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void observe(serve_server *s, serve_hist *h, double v) {
    pthread_mutex_lock(&s->hist_mu);
    serve_hist_observe(h, v);
    pthread_mutex_unlock(&s->hist_mu);
}

serve_server_params serve_server_default_params(void) {
    serve_server_params p = {.http = serve_http_default_params(),
                             .loop = specd_loop_default_params(),
                             .model_id = "specd",
                             .max_tokens_cap = 1024,
                             .default_max_tokens = 256,
                             .default_policy = "none"};
    return p;
}

/* ---- one generation, shared by the streamed and the whole answer ---------------------------- */

typedef struct gen {
    serve_server *srv;
    serve_job *job;
    serve_request req;
    serve_detok detok;
    serve_answer_meta meta;
    int fd;
    double t_start; /* arrival (monotonic seconds) */
    int64_t n_completion;
    int32_t last_token;
    int done, stop_cancelled, counted, first_seen;
    specd_status status;
    char message[256];
    specd_seq_stats stats;
    /* streamed: bytes to send, and where the stream is */
    char *out;
    size_t out_len, out_off;
    int first_sent, ended;
} gen;

static int is_eog(const serve_server *s, int32_t t) {
    for (int32_t i = 0; i < s->n_eog; i++)
        if (s->eog[i] == t) return 1;
    return 0;
}

/* Waits for the job's next tokens (or its end) and decodes them. -1 when the client has left
 * (or memory ran out): the caller gives up on the request. */
static int pump(gen *g, int timeout_ms) {
    serve_job_view v;
    if (serve_job_wait(g->job, timeout_ms, &v) != 0) return -1;
    for (int64_t i = 0; i < v.n_tokens && !g->detok.stopped; i++) {
        /* Tokens after a stop string are not part of the answer, nor counted in its usage. */
        g->n_completion++;
        g->last_token = v.tokens[i];
        if (serve_detok_push(&g->detok, &v.tokens[i], 1) != 0) {
            free(v.tokens);
            return -1;
        }
    }
    free(v.tokens);
    if (v.n_tokens > 0 && !g->first_seen) {
        g->first_seen = 1;
        observe(g->srv, &g->srv->ttft, now_s() - g->t_start);
    }
    if (g->detok.stopped && !g->stop_cancelled && !v.done) {
        serve_job_cancel(g->job); /* the answer is complete: free the slot now */
        g->stop_cancelled = 1;
    }
    if (v.done) {
        g->done = 1;
        g->status = v.status;
        snprintf(g->message, sizeof g->message, "%s", v.message);
        g->stats = v.stats;
        return 0;
    }
    return serve_http_peer_gone(g->fd) ? -1 : 0;
}

static const char *finish_reason(const gen *g) {
    if (g->detok.stopped || g->stop_cancelled) return "stop";
    if (g->status != SPECD_OK) return NULL; /* failed */
    return g->n_completion > 0 && is_eog(g->srv, g->last_token) ? "stop" : "length";
}

static void count_end(gen *g, int client_left) {
    if (g->counted) return;
    g->counted = 1;
    const char *r = client_left ? NULL : finish_reason(g);
    if (client_left) atomic_fetch_add(&g->srv->n_abort, 1);
    else if (!r) atomic_fetch_add(&g->srv->n_failed, 1);
    else if (!strcmp(r, "stop")) atomic_fetch_add(&g->srv->n_stop, 1);
    else atomic_fetch_add(&g->srv->n_length, 1);
    if (r) observe(g->srv, &g->srv->e2e, now_s() - g->t_start);
}

static void gen_free(gen *g) {
    if (!g) return;
    serve_job_release(g->job); /* cancels it when still running: its slot frees */
    serve_detok_free(&g->detok);
    serve_request_free(&g->req);
    free(g->out);
    free(g);
}

/* ---- replies -------------------------------------------------------------------------------- */

static void reply_refusal(serve_server *s, serve_http_reply *r, const serve_refusal *why) {
    atomic_fetch_add(&s->n_rejected, 1);
    r->status = why->status;
    r->body = serve_json_error(why, &r->body_len);
    if (!r->body) r->status = 500;
}

static void reply_text(serve_http_reply *r, int status, const char *type, const char *text) {
    r->status = status;
    r->content_type = type;
    r->body = strdup(text);
    r->body_len = r->body ? strlen(r->body) : 0;
}

/* A request that ended without an answer: its HTTP status from why it failed. */
static void reply_failure(serve_server *s, serve_http_reply *r, const gen *g) {
    serve_refusal why;
    int code = g->status == SPECD_E_INVALID_ARG ? 400 : g->status == SPECD_E_STATE ? 503 : 500;
    serve_refuse(&why, code, code == 400 ? "invalid_request_error" : "server_error", NULL, "%s",
                 g->message[0] ? g->message : specd_status_name(g->status));
    reply_refusal(s, r, &why);
}

static ssize_t stream_read(void *user, char *buf, size_t cap) {
    gen *g = user;
    while (g->out_off == g->out_len) {
        if (g->ended) return 0;
        free(g->out);
        g->out = NULL;
        g->out_len = g->out_off = 0;
        if (!g->done && pump(g, POLL_MS) != 0) {
            count_end(g, 1);
            return -1;
        }
        size_t off, n;
        serve_detok_take(&g->detok, g->done, &off, &n);
        if (g->done) {
            const char *reason = finish_reason(g);
            char *last = reason ? serve_sse_chunk(&g->meta, (g->detok.text ? g->detok.text + off : ""), n, !g->first_sent,
                                                  reason, g->req.n_prompt, g->n_completion,
                                                  &g->stats, &g->out_len)
                                : serve_sse_error(g->message, &g->out_len);
            if (!last) return -1;
            size_t dl = strlen(SERVE_SSE_DONE);
            char *all = realloc(last, g->out_len + dl);
            if (!all) {
                free(last);
                return -1;
            }
            memcpy(all + g->out_len, SERVE_SSE_DONE, dl);
            g->out = all;
            g->out_len += dl;
            g->ended = 1;
            count_end(g, 0);
        } else if (n > 0) {
            g->out = serve_sse_chunk(&g->meta, (g->detok.text ? g->detok.text + off : ""), n, !g->first_sent, NULL, 0,
                                     0, NULL, &g->out_len);
            if (!g->out) return -1;
            g->first_sent = 1;
        }
    }
    size_t n = g->out_len - g->out_off;
    if (n > cap) n = cap;
    memcpy(buf, g->out + g->out_off, n);
    g->out_off += n;
    return (ssize_t)n;
}

static void stream_release(void *user) {
    gen *g = user;
    if (!g->ended) count_end(g, 1);
    gen_free(g);
}

static void generate(serve_server *s, const serve_http_request *hr, int chat,
                     serve_http_reply *r) {
    gen *g = calloc(1, sizeof *g);
    if (!g) {
        reply_text(r, 500, "text/plain", "no memory\n");
        return;
    }
    g->srv = s;
    g->fd = hr->fd;
    g->t_start = now_s();
    serve_refusal why;
    if (serve_request_parse(hr->body, hr->body_len, chat, &s->limits, s->tok, &g->req, &why)) {
        reply_refusal(s, r, &why);
        free(g);
        return;
    }
    serve_detok_init(&g->detok, s->tok, (const char *const *)g->req.stop, g->req.stop_len,
                     g->req.n_stop);
    g->meta.chat = chat;
    snprintf(g->meta.id, sizeof g->meta.id, "%s-%llu", chat ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&s->next_id, 1));
    g->meta.created = (long long)time(NULL);
    g->meta.model = s->model_id;
    g->meta.policy = g->req.policy;

    specd_seq_params sp = specd_seq_default_params();
    sp.policy = g->req.policy;
    sp.policy_options = g->req.policy_options[0] ? g->req.policy_options : NULL;
    sp.sampling = g->req.sampling;
    sp.seed = g->req.has_seed ? g->req.seed : atomic_fetch_add(&s->next_seed, 1);
    sp.stream_key = 0; /* reproducible: the seed alone keys the request (see serve_server.h) */
    sp.max_tokens = g->req.max_tokens;
    sp.adaptive = g->req.adaptive;
    sp.stop_tokens = s->eog;
    sp.n_stop_tokens = s->n_eog;
    specd_error err;
    specd_status st = serve_engine_submit(s->engine, g->req.prompt, g->req.n_prompt, &sp, &g->job,
                                          &err);
    if (st != SPECD_OK) {
        serve_refuse(&why, st == SPECD_E_STATE ? 503 : 500, "server_error", NULL, "%s",
                     err.message);
        reply_refusal(s, r, &why);
        gen_free(g);
        return;
    }
    /* Both forms wait for the first tokens, so that a request the loop refuses (a policy that
     * cannot start, a full queue) still gets a status that says so. */
    while (!g->done && g->n_completion == 0 && !g->detok.stopped)
        if (pump(g, POLL_MS) != 0) {
            count_end(g, 1);
            reply_text(r, 499, "text/plain", "client closed the request\n");
            gen_free(g);
            return;
        }
    if (g->done && !finish_reason(g)) {
        count_end(g, 0);
        if (g->n_completion == 0) reply_failure(s, r, g);
        else reply_text(r, 500, "text/plain", g->message);
        gen_free(g);
        return;
    }
    if (g->req.stream) {
        r->content_type = "text/event-stream";
        r->stream = (serve_http_stream){.read = stream_read, .release = stream_release, .user = g};
        return;
    }
    while (!g->done)
        if (pump(g, POLL_MS) != 0) {
            count_end(g, 1);
            reply_text(r, 499, "text/plain", "client closed the request\n");
            gen_free(g);
            return;
        }
    count_end(g, 0);
    const char *reason = finish_reason(g);
    if (!reason) {
        reply_failure(s, r, g);
    } else {
        serve_answer_logprobs lp;
        serve_answer_extras x = {.logprobs = &lp, .tok = s->tok};
        if (g->req.echo) x.echo = g->req.prompt_text, x.echo_len = g->req.prompt_text_len;
        if (serve_logprobs_compute(s->engine, &g->req, g->job, g->n_completion, &lp, &why)) {
            reply_refusal(s, r, &why);
        } else {
            r->body = serve_json_answer(&g->meta, g->detok.text, g->detok.len, reason,
                                        g->req.n_prompt, g->n_completion, &g->stats, &x,
                                        &r->body_len);
            if (!r->body) r->status = 500;
        }
        serve_logprobs_free(&lp);
    }
    gen_free(g);
}

/* ---- /metrics ------------------------------------------------------------------------------- */

static char *metrics_text(serve_server *s, size_t *len) {
    serve_engine_stats es;
    serve_engine_get_stats(s->engine, &es);
    serve_prom p = {0};
    serve_prom_gauge(&p, "specd:num_requests_running", "Requests in the loop's slots.",
                     es.running);
    serve_prom_gauge(&p, "specd:num_requests_waiting", "Requests waiting for a slot.", es.waiting);
    serve_prom_family(&p, "specd:request_success_total", "counter",
                      "Requests answered, by why they finished (abort: the client left).");
    serve_prom_int(&p, "specd:request_success_total", "finished_reason=\"stop\"",
                   atomic_load(&s->n_stop));
    serve_prom_int(&p, "specd:request_success_total", "finished_reason=\"length\"",
                   atomic_load(&s->n_length));
    serve_prom_int(&p, "specd:request_success_total", "finished_reason=\"abort\"",
                   atomic_load(&s->n_abort));
    serve_prom_counter(&p, "specd:request_failure_total", "Requests that failed while running.",
                       atomic_load(&s->n_failed));
    serve_prom_counter(&p, "specd:request_rejected_total",
                       "Requests refused with an error status (bad body, limits, full queue).",
                       atomic_load(&s->n_rejected));
    serve_prom_counter(&p, "specd:prompt_tokens_total", "Prompt tokens prefilled.",
                       es.prompt_tokens);
    serve_prom_counter(&p, "specd:generation_tokens_total", "Tokens generated.",
                       es.generation_tokens);
    serve_prom_counter(&p, "specd:loop_steps_total", "Steps of the batch loop.", es.loop.n_steps);
    serve_prom_counter(&p, "specd:loop_forward_tokens_total",
                       "Tokens the loop's forwards ran (steps and prompt chunks).",
                       es.loop.n_tokens_run);
    serve_prom_family(&p, "specd:loop_forward_seconds_total", "counter",
                      "Seconds spent in the loop's forwards.");
    serve_prom_double(&p, "specd:loop_forward_seconds_total", NULL, (double)es.loop.forward_ns * 1e-9);
    pthread_mutex_lock(&s->hist_mu);
    serve_hist ttft = s->ttft, e2e = s->e2e;
    pthread_mutex_unlock(&s->hist_mu);
    serve_prom_histogram(&p, "specd:time_to_first_token_seconds",
                         "Seconds from a request's arrival to its first token.", &ttft);
    serve_prom_histogram(&p, "specd:e2e_request_latency_seconds",
                         "Seconds from a request's arrival to its whole answer.", &e2e);
    serve_prom_spec_decode(&p, &es.spec, es.max_draft);
    if (p.failed) {
        free(p.buf);
        return NULL;
    }
    *len = p.len;
    return p.buf;
}

/* ---- routing -------------------------------------------------------------------------------- */

static void handle(void *user, const serve_http_request *hr, serve_http_reply *r) {
    serve_server *s = user;
    serve_refusal why;
    const char *path = hr->path;
    int post = !strcmp(hr->method, "POST"), get = !strcmp(hr->method, "GET");
    int completions = !strcmp(path, "/v1/completions"),
        chat = !strcmp(path, "/v1/chat/completions");
    if (completions || chat) {
        if (!post) {
            serve_refuse(&why, 405, "invalid_request_error", NULL, "%s takes POST", path);
            reply_refusal(s, r, &why);
        } else if (hr->body_too_large) {
            serve_refuse(&why, 413, "invalid_request_error", NULL,
                         "the body is larger than this server's limit of %zu bytes",
                         s->http_max_body);
            reply_refusal(s, r, &why);
        } else if (atomic_load(&s->draining)) {
            serve_refuse(&why, 503, "server_error", NULL, "the server is shutting down");
            reply_refusal(s, r, &why);
        } else {
            generate(s, hr, chat, r);
        }
        return;
    }
    if (get && !strcmp(path, "/health")) {
        if (atomic_load(&s->draining))
            reply_text(r, 503, "application/json", "{\"status\":\"draining\"}");
        else reply_text(r, 200, "application/json", "{\"status\":\"ok\"}");
        return;
    }
    if (get && !strcmp(path, "/metrics")) {
        r->content_type = "text/plain; version=0.0.4; charset=utf-8";
        r->body = metrics_text(s, &r->body_len);
        if (!r->body) reply_text(r, 500, "text/plain", "no memory\n");
        return;
    }
    if (get && !strcmp(path, "/v1/models")) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (f) {
            fprintf(f, "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\","
                       "\"owned_by\":\"specd\",\"max_model_len\":%d}]}",
                    s->model_id, s->limits.n_ctx);
            fclose(f);
        }
        r->body = buf;
        r->body_len = len;
        if (!buf) r->status = 500;
        return;
    }
    serve_refuse(&why, 404, "not_found_error", NULL, "no route %s %s", hr->method, path);
    reply_refusal(s, r, &why);
}

specd_status serve_server_create(const specd_model *model, const specd_tokenizer *tok,
                                 const serve_server_params *p, serve_server **out,
                                 specd_error *err) {
    if (p->max_tokens_cap < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "serve: max_tokens cap %d < 1",
                          p->max_tokens_cap);
    for (const char *c = p->model_id; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
            return specd_fail(err, SPECD_E_INVALID_ARG, "serve: model id has a quote, backslash "
                                                        "or control character");
    serve_server *s = calloc(1, sizeof *s);
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "serve: no memory");
    s->tok = tok;
    s->model_id = strdup(p->model_id);
    s->default_policy = strdup(p->default_policy ? p->default_policy : "none");
    s->default_policy_options =
        p->default_policy_options ? strdup(p->default_policy_options) : NULL;
    atomic_init(&s->next_seed, p->seed_base);
    atomic_init(&s->next_id, 1);
    pthread_mutex_init(&s->hist_mu, NULL);
    s->ttft.bounds = ttft_bounds;
    s->ttft.n = (int)(sizeof ttft_bounds / sizeof *ttft_bounds);
    s->e2e.bounds = e2e_bounds;
    s->e2e.n = (int)(sizeof e2e_bounds / sizeof *e2e_bounds);
    int32_t n_vocab = specd_tokenizer_vocab_size(tok);
    for (int32_t id = 0; id < n_vocab && s->n_eog < MAX_EOG; id++)
        if (specd_tokenizer_is_eog(tok, id)) s->eog[s->n_eog++] = id;
    s->http_max_body = p->http.max_body ? p->http.max_body : serve_http_default_params().max_body;
    s->limits = (serve_limits){
        .model_id = s->model_id,
        .max_tokens_cap = p->max_tokens_cap,
        .default_max_tokens = p->default_max_tokens < p->max_tokens_cap ? p->default_max_tokens
                                                                        : p->max_tokens_cap,
        .n_ctx = p->loop.n_ctx,
        .step_rows = 2 * p->loop.max_draft + 1,
        .max_draft = p->loop.max_draft,
        .default_policy = s->default_policy,
        .default_policy_options = s->default_policy_options};
    specd_status st = SPECD_OK;
    if (!s->model_id || !s->default_policy ||
        (p->default_policy_options && !s->default_policy_options))
        st = specd_fail(err, SPECD_E_NOMEM, "serve: no memory");
    if (st == SPECD_OK) st = serve_engine_create(model, &p->loop, &s->engine, err);
    if (st == SPECD_OK) st = serve_http_create(&p->http, handle, s, &s->http, err);
    if (st != SPECD_OK) {
        serve_server_destroy(s);
        return st;
    }
    *out = s;
    return SPECD_OK;
}

int serve_server_port(const serve_server *s) { return serve_http_port(s->http); }

void serve_server_drain(serve_server *s, int grace_ms) {
    /* Still listening: a client that comes now is told 503 (and /health says draining) rather
     * than left waiting in the listen backlog. */
    atomic_store(&s->draining, 1);
    /* Until every answer is wholly sent: the engine going idle is not enough, the last chunks
     * of a stream may still be on their way. */
    struct timespec t0, now, nap = {0, 10 * 1000000L};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = (now.tv_sec - t0.tv_sec) * 1000L + (now.tv_nsec - t0.tv_nsec) / 1000000L;
        if (serve_http_active(s->http) == 0 || ms >= grace_ms) break;
        nanosleep(&nap, NULL);
    }
}

void serve_server_destroy(serve_server *s) {
    if (!s) return;
    /* The engine first: it ends every request, so the handlers waiting on them return and the
     * HTTP server can join its connection threads. */
    serve_engine_stop(s->engine);
    serve_http_destroy(s->http);
    serve_engine_destroy(s->engine);
    free(s->model_id);
    free(s->default_policy);
    free(s->default_policy_options);
    pthread_mutex_destroy(&s->hist_mu);
    free(s);
}
