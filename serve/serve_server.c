#include "serve/serve_server.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/prom.h"
#include "common/status_internal.h"
#include "serve/serve_constrain.h"
#include "serve/serve_detok.h"
#include "serve/serve_engine.h"
#include "serve/serve_logprobs.h"
#include "serve/serve_request.h"
#include "serve/serve_response.h"
#include "serve/serve_structured.h"
#include "serve/serve_tokenize.h"
#include "specd/metrics.h"

#define MAX_EOG 16
/* How long a waiting handler sleeps between checks that its client is still there. */
#define POLL_MS 100
/* Seconds a client refused for a full queue is asked to wait (Retry-After). */
#define SERVE_RETRY_AFTER_S 1

struct serve_server {
    const specd_tokenizer *tok;
    serve_engine *engine;
    http_server *http;
    serve_grammars *grammars; /* compiled grammars shared across requests */
    serve_limits limits;
    size_t http_max_body;
    char *model_id, *default_policy, *default_policy_options;
    int32_t eog[MAX_EOG];
    int32_t n_eog;
    atomic_uint_fast64_t next_seed, next_id;
    atomic_int draining;
    long long started; /* Unix seconds: the model's "created" */
    /* finished requests by reason, and refusals */
    atomic_llong n_stop, n_length, n_abort, n_failed, n_rejected;
    pthread_mutex_t hist_mu;
    prom_hist ttft, e2e; /* seconds from the request's arrival: first token; answer complete */
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

static void observe(serve_server *s, prom_hist *h, double v) {
    pthread_mutex_lock(&s->hist_mu);
    prom_hist_observe(h, v);
    pthread_mutex_unlock(&s->hist_mu);
}

serve_server_params serve_server_default_params(void) {
    serve_server_params p = {.http = http_server_default_params(),
                             .loop = specd_loop_default_params(),
                             .model_id = "specd",
                             .max_tokens_cap = 1024,
                             .default_max_tokens = 256,
                             .default_policy = "none"};
    return p;
}

/* ---- one generation, shared by the streamed and the whole answer ---------------------------- */

/* One choice: its own sequence in the batch loop. */
typedef struct choice {
    serve_job *job;
    serve_detok detok;
    const serve_prompt *prompt; /* borrowed from the request */
    int index;
    int32_t *toks; /* the completion's tokens (up to the one that completed a stop string) */
    int64_t n_toks, cap_toks;
    int64_t lp_sent; /* streamed: tokens whose logprobs were sent */
    int done, stop_cancelled, first_sent, end_sent;
    cJSON *calls; /* with tools: the answer read back as OpenAI tool_calls, or NULL */
    specd_status status;
    char message[256];
    specd_seq_stats stats;
} choice;

typedef struct gen {
    serve_server *srv;
    serve_request req;
    serve_answer_meta meta;
    unsigned long long number; /* the request's number (its id's), seeds the calls' ids */
    serve_grammar_ref *grammar; /* the output constraint's, or NULL */
    int tools;                  /* tools on: an answer may be a call (streamed text waits) */
    choice *ch;
    int n_ch;
    int fd;
    double t_start; /* arrival (monotonic seconds) */
    int counted, first_seen;
    /* streamed: bytes to send, and where the stream is */
    char *out;
    size_t out_len, out_off;
    int ended;
} gen;

static int is_eog(const serve_server *s, int32_t t) {
    for (int32_t i = 0; i < s->n_eog; i++)
        if (s->eog[i] == t) return 1;
    return 0;
}

static int keep_token(choice *c, int32_t t) {
    if (c->n_toks == c->cap_toks) {
        int64_t cap = c->cap_toks ? 2 * c->cap_toks : 64;
        int32_t *p = realloc(c->toks, (size_t)cap * sizeof *p);
        if (!p) return -1;
        c->toks = p;
        c->cap_toks = cap;
    }
    c->toks[c->n_toks++] = t;
    return 0;
}

/* Takes one choice's new tokens (waiting up to timeout_ms for them) and decodes them. -1 when
 * memory ran out. */
static int pump_choice(gen *g, choice *c, int timeout_ms) {
    serve_job_view v;
    if (serve_job_wait(c->job, timeout_ms, &v) != 0) return -1;
    for (int64_t i = 0; i < v.n_tokens && !c->detok.stopped; i++) {
        /* Tokens after a stop string are not part of the answer, nor counted in its usage. */
        if (keep_token(c, v.tokens[i]) != 0 ||
            serve_detok_push(&c->detok, &v.tokens[i], 1) != 0) {
            free(v.tokens);
            return -1;
        }
    }
    free(v.tokens);
    if (v.n_tokens > 0 && !g->first_seen) {
        g->first_seen = 1;
        observe(g->srv, &g->srv->ttft, now_s() - g->t_start);
    }
    if (c->detok.stopped && !c->stop_cancelled && !v.done) {
        serve_job_cancel(c->job); /* the answer is complete: free the slot now */
        c->stop_cancelled = 1;
    }
    if (v.done) {
        c->done = 1;
        c->status = v.status;
        snprintf(c->message, sizeof c->message, "%s", v.message);
        c->stats = v.stats;
        if (g->tools && v.status == SPECD_OK && c->detok.text)
            serve_structured_tool_calls(g->req.structured, c->detok.text, c->detok.len,
                                        g->number * SERVE_MAX_CHOICES + (unsigned)c->index,
                                        &c->calls);
    }
    return 0;
}

/* Waits for the next tokens of any choice (or their ends) and decodes them. -1 when the client
 * has left (or memory ran out): the caller gives up on the request. */
static int pump(gen *g, int timeout_ms) {
    int waited = 0;
    for (int i = 0; i < g->n_ch; i++) {
        choice *c = &g->ch[i];
        if (c->done) continue;
        /* One wait, on the first running choice: the loop steps every choice in the same forward,
         * so the others' tokens are there by then (or soon: the wait is short when there are
         * several). */
        int t = waited ? 0 : g->n_ch == 1 ? timeout_ms : timeout_ms / 20 + 1;
        waited = 1;
        if (pump_choice(g, c, t) != 0) return -1;
    }
    return http_server_peer_gone(g->fd) ? -1 : 0;
}

static int all_done(const gen *g) {
    for (int i = 0; i < g->n_ch; i++)
        if (!g->ch[i].done) return 0;
    return 1;
}

static const char *finish_reason(const gen *g, const choice *c) {
    if (c->calls) return "tool_calls";
    if (c->detok.stopped || c->stop_cancelled) return "stop";
    if (c->status != SPECD_OK) return NULL; /* failed */
    return c->n_toks > 0 && is_eog(g->srv, c->toks[c->n_toks - 1]) ? "stop" : "length";
}

/* The first choice that failed, or NULL. */
static const choice *failed(const gen *g) {
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].done && !finish_reason(g, &g->ch[i])) return &g->ch[i];
    return NULL;
}

static int64_t prompt_tokens(const gen *g) {
    int64_t n = 0;
    for (int i = 0; i < g->req.n_prompts; i++) n += g->req.prompts[i].n;
    return n;
}

static int64_t completion_tokens(const gen *g) {
    int64_t n = 0;
    for (int i = 0; i < g->n_ch; i++) n += g->ch[i].n_toks;
    return n;
}

static void summed_stats(const gen *g, specd_seq_stats *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < g->n_ch; i++) specd_seq_stats_add(out, &g->ch[i].stats);
}

/* Counted once per request, by its first choice's end (a request with any failed choice failed). */
static void count_end(gen *g, int client_left) {
    if (g->counted) return;
    g->counted = 1;
    const char *r = client_left || failed(g) ? NULL : finish_reason(g, &g->ch[0]);
    if (client_left) atomic_fetch_add(&g->srv->n_abort, 1);
    else if (!r) atomic_fetch_add(&g->srv->n_failed, 1);
    else if (strcmp(r, "length")) atomic_fetch_add(&g->srv->n_stop, 1); /* stop, tool_calls */
    else atomic_fetch_add(&g->srv->n_length, 1);
    if (r) observe(g->srv, &g->srv->e2e, now_s() - g->t_start);
}

static void gen_free(gen *g) {
    if (!g) return;
    for (int i = 0; i < g->n_ch; i++) {
        serve_job_release(g->ch[i].job); /* cancels it when still running: its slot frees */
        serve_detok_free(&g->ch[i].detok);
        free(g->ch[i].toks);
        cJSON_Delete(g->ch[i].calls);
    }
    free(g->ch);
    serve_grammar_release(g->grammar);
    serve_request_free(&g->req);
    free(g->out);
    free(g);
}

/* ---- replies -------------------------------------------------------------------------------- */

static void reply_refusal(serve_server *s, http_server_reply *r, const serve_refusal *why) {
    atomic_fetch_add(&s->n_rejected, 1);
    r->status = why->status;
    /* a full queue or a stopping loop: try again later (a draining server is going away) */
    if (why->status == 503 && !atomic_load(&s->draining)) r->retry_after = SERVE_RETRY_AFTER_S;
    r->body = serve_json_error(why, &r->body_len);
    if (!r->body) r->status = 500;
}

static void reply_text(http_server_reply *r, int status, const char *type, const char *text) {
    r->status = status;
    r->content_type = type;
    r->body = strdup(text);
    r->body_len = r->body ? strlen(r->body) : 0;
}

/* A request that ended without an answer: its HTTP status from why it failed. */
static void reply_failure(serve_server *s, http_server_reply *r, const choice *c) {
    serve_refusal why;
    int code = c->status == SPECD_E_INVALID_ARG ? 400 : c->status == SPECD_E_STATE ? 503 : 500;
    serve_refuse(&why, code, code == 400 ? "invalid_request_error" : "server_error", NULL, "%s",
                 c->message[0] ? c->message : specd_status_name(c->status));
    reply_refusal(s, r, &why);
}

/* Appends a malloc'd chunk to the stream's pending bytes (taking it). 0, or -1 (out of memory,
 * or chunk NULL). */
static int queue_out(gen *g, char *chunk, size_t len) {
    if (!chunk) return -1;
    char *all = realloc(g->out, g->out_len + len);
    if (!all) {
        free(chunk);
        return -1;
    }
    memcpy(all + g->out_len, chunk, len);
    g->out = all;
    g->out_len += len;
    free(chunk);
    return 0;
}

/* A choice's calls as JSON text (malloc'd; NULL when out of memory). Streamed (indexed), each
 * call carries its position in the list, as OpenAI's tool_calls deltas do. */
static char *calls_text(const cJSON *calls, int indexed) {
    cJSON *copy = cJSON_Duplicate(calls, 1);
    if (!copy) return NULL;
    int i = 0;
    cJSON *call;
    cJSON_ArrayForEach(call, copy)
        if (indexed) cJSON_AddNumberToObject(call, "index", i++);
    char *p = cJSON_PrintUnformatted(copy);
    cJSON_Delete(copy);
    char *out = p ? strdup(p) : NULL; /* cJSON's allocator is not necessarily free()'s */
    cJSON_free(p);
    return out;
}

/* A choice's next chunk, when it has one: new text, new tokens whose logprobs were asked for, or
 * its end. 0, or -1 when out of memory. */
static int stream_choice(gen *g, choice *c) {
    serve_server *s = g->srv;
    if (c->end_sent) return 0;
    size_t off = 0, n = 0;
    /* with tools the text waits for the end: only then is it known to be a call or an answer */
    if (!g->tools || c->done) serve_detok_take(&c->detok, c->done, &off, &n);
    if (c->calls) n = 0;
    int new_lp = g->req.logprobs && c->n_toks > c->lp_sent;
    if (n == 0 && !new_lp && !c->done) return 0;
    serve_answer_logprobs lp = {0};
    serve_refusal why;
    if (new_lp && serve_logprobs_compute(s->engine, s->tok, &g->req, c->prompt, c->toks,
                                         c->n_toks, c->lp_sent, &lp, &why)) {
        serve_logprobs_free(&lp);
        return -1;
    }
    c->lp_sent = c->n_toks;
    char *calls = c->calls ? calls_text(c->calls, 1) : NULL;
    serve_choice_out o = {.index = c->index,
                          .text = c->detok.text ? c->detok.text + off : "",
                          .text_len = n,
                          .tool_calls = calls,
                          .finish_reason = c->done ? finish_reason(g, c) : NULL,
                          .logprobs = new_lp ? &lp : NULL};
    size_t len = 0;
    char *chunk = c->calls && !calls ? NULL
                                     : serve_sse_chunk(&g->meta, &o, !c->first_sent,
                                                       g->req.include_usage,
                                                       c->done ? &c->stats : NULL, s->tok, &len);
    serve_logprobs_free(&lp);
    free(calls);
    c->first_sent = 1;
    c->end_sent = c->done;
    return queue_out(g, chunk, len);
}

/* The stream's next bytes: each choice's chunk in index order, then (when every choice ended) the
 * usage chunk if asked and [DONE]. 0, or -1 to drop the stream. */
static int stream_next(gen *g) {
    if (!all_done(g) && pump(g, POLL_MS) != 0) {
        count_end(g, 1);
        return -1;
    }
    const choice *bad = failed(g);
    if (bad) {
        size_t len = 0;
        if (queue_out(g, serve_sse_error(bad->message, &len), len) != 0) return -1;
    } else {
        for (int i = 0; i < g->n_ch; i++)
            if (stream_choice(g, &g->ch[i]) != 0) return -1;
        if (!all_done(g)) return 0;
        if (g->req.include_usage) {
            specd_seq_stats st;
            summed_stats(g, &st);
            size_t len = 0;
            char *u = serve_sse_usage(&g->meta, prompt_tokens(g), completion_tokens(g), &st, &len);
            if (queue_out(g, u, len) != 0) return -1;
        }
    }
    char *done = strdup(SERVE_SSE_DONE);
    if (queue_out(g, done, strlen(SERVE_SSE_DONE)) != 0) return -1;
    g->ended = 1;
    count_end(g, 0);
    return 0;
}

static ssize_t stream_read(void *user, char *buf, size_t cap) {
    gen *g = user;
    while (g->out_off == g->out_len) {
        if (g->ended) return 0;
        free(g->out);
        g->out = NULL;
        g->out_len = g->out_off = 0;
        if (stream_next(g) != 0) return -1;
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

/* The whole answer, once every choice ended. */
static void reply_whole(serve_server *s, gen *g, http_server_reply *r) {
    serve_choice_out *o = calloc((size_t)g->n_ch, sizeof *o);
    serve_answer_logprobs *lp = calloc((size_t)g->n_ch, sizeof *lp);
    char **calls = calloc((size_t)g->n_ch, sizeof *calls);
    serve_refusal why;
    int ok = o && lp && calls;
    if (!ok) serve_refuse(&why, 500, "server_error", NULL, "no memory");
    for (int i = 0; ok && i < g->n_ch; i++) {
        choice *c = &g->ch[i];
        size_t off, n;
        serve_detok_take(&c->detok, 1, &off, &n); /* final: a cut character leaves the text */
        ok = !serve_logprobs_compute(s->engine, s->tok, &g->req, c->prompt, c->toks, c->n_toks, 0,
                                     &lp[i], &why);
        if (ok && c->calls && !(calls[i] = calls_text(c->calls, 0))) {
            ok = 0;
            serve_refuse(&why, 500, "server_error", NULL, "no memory");
        }
        o[i] = (serve_choice_out){.index = c->index,
                                  .tool_calls = calls[i],
                                  .text = c->detok.text ? c->detok.text : "",
                                  .text_len = c->detok.len,
                                  .finish_reason = finish_reason(g, c),
                                  .logprobs = &lp[i]};
        if (g->req.echo) o[i].echo = c->prompt->text, o[i].echo_len = c->prompt->text_len;
    }
    if (!ok) {
        reply_refusal(s, r, &why);
    } else {
        specd_seq_stats st;
        summed_stats(g, &st);
        r->body = serve_json_answer(&g->meta, o, g->n_ch, prompt_tokens(g), completion_tokens(g),
                                    &st, s->tok, &r->body_len);
        if (!r->body) r->status = 500;
    }
    for (int i = 0; lp && i < g->n_ch; i++) serve_logprobs_free(&lp[i]);
    for (int i = 0; calls && i < g->n_ch; i++) free(calls[i]);
    free(calls);
    free(lp);
    free(o);
}

/* Each choice's sequence parameters: the request's, with the choice's seed. With a seed S, choice
 * i of a prompt (i < n) is seeded S + i: the answer is reproducible, and choice i is what a
 * request with seed S + i and n 1 gets. Without one, each choice takes the next of the
 * server's counter. */
static int submit_choices(serve_server *s, gen *g, serve_refusal *why) {
    g->n_ch = g->req.n_prompts * g->req.n;
    if (!(g->ch = calloc((size_t)g->n_ch, sizeof *g->ch)))
        return serve_refuse(why, 500, "server_error", NULL, "no memory");
    specd_seq_params sp = specd_seq_default_params();
    sp.policy = g->req.policy;
    sp.policy_options = g->req.policy_options[0] ? g->req.policy_options : NULL;
    sp.sampling = g->req.sampling;
    sp.stream_key = 0; /* reproducible: the seed alone keys the request (see serve_server.h) */
    sp.max_tokens = g->req.max_tokens;
    sp.adaptive = g->req.adaptive;
    sp.stop_tokens = s->eog; /* a complete grammar allows only these: the answer ends there */
    sp.n_stop_tokens = s->n_eog;
    sp.penalties = g->req.penalties;
    for (int k = 0; k < g->n_ch; k++) {
        choice *c = &g->ch[k];
        c->index = k;
        c->prompt = &g->req.prompts[k / g->req.n];
        serve_detok_init(&c->detok, s->tok, (const char *const *)g->req.stop, g->req.stop_len,
                         g->req.n_stop);
        sp.seed = g->req.has_seed ? g->req.seed + (uint64_t)(k % g->req.n)
                                  : atomic_fetch_add(&s->next_seed, 1);
        specd_error err;
        serve_job_cleanup cleanup;
        void *cleanup_user;
        specd_status st =
            serve_constrain_processor(g->grammar, &sp.processor, &cleanup, &cleanup_user, &err);
        if (st == SPECD_OK)
            st = serve_engine_submit(s->engine, c->prompt->ids, c->prompt->n, &sp, cleanup,
                                     cleanup_user, &c->job, &err);
        if (st != SPECD_OK)
            return serve_refuse(why, st == SPECD_E_STATE ? 503 : 500, "server_error", NULL, "%s",
                                err.message);
    }
    return 0;
}

static void generate(serve_server *s, const http_server_request *hr, int chat,
                     http_server_reply *r) {
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
    if (serve_constrain_grammar(s->grammars, &g->req, &g->grammar, &why)) {
        reply_refusal(s, r, &why);
        gen_free(g);
        return;
    }
    const serve_structured *st = g->req.structured;
    g->tools = st->tool_mode != SERVE_TOOLS_OFF && st->n_tools > 0;
    g->meta.chat = chat;
    g->number = (unsigned long long)atomic_fetch_add(&s->next_id, 1);
    snprintf(g->meta.id, sizeof g->meta.id, "%s-%llu", chat ? "chatcmpl" : "cmpl", g->number);
    g->meta.created = (long long)time(NULL);
    g->meta.model = s->model_id;
    g->meta.policy = g->req.policy;
    if (submit_choices(s, g, &why)) {
        reply_refusal(s, r, &why);
        gen_free(g);
        return;
    }
    /* Both forms wait for every choice's first tokens, so that a request the loop refuses (a
     * policy that cannot start, a full queue) still gets a status that says so. */
    for (int i = 0; i < g->n_ch; i++) {
        choice *c = &g->ch[i];
        while (!c->done && c->n_toks == 0 && !c->detok.stopped)
            if (pump(g, POLL_MS) != 0) {
                count_end(g, 1);
                reply_text(r, 499, "text/plain", "client closed the request\n");
                gen_free(g);
                return;
            }
        if (c->done && !finish_reason(g, c)) {
            count_end(g, 0);
            if (c->n_toks == 0) reply_failure(s, r, c);
            else reply_text(r, 500, "text/plain", c->message);
            gen_free(g);
            return;
        }
    }
    if (g->req.stream) {
        r->content_type = "text/event-stream";
        r->stream = (http_server_stream){.read = stream_read, .release = stream_release, .user = g};
        return;
    }
    while (!all_done(g))
        if (pump(g, POLL_MS) != 0) {
            count_end(g, 1);
            reply_text(r, 499, "text/plain", "client closed the request\n");
            gen_free(g);
            return;
        }
    count_end(g, 0);
    const choice *bad = failed(g);
    if (bad) reply_failure(s, r, bad);
    else reply_whole(s, g, r);
    gen_free(g);
}

/* ---- /metrics ------------------------------------------------------------------------------- */

static char *metrics_text(serve_server *s, size_t *len) {
    serve_engine_stats es;
    serve_engine_get_stats(s->engine, &es);
    prom p = {0};
    prom_gauge(&p, "specd:num_requests_running", "Requests in the loop's slots.", es.running);
    prom_gauge(&p, "specd:num_requests_waiting", "Requests waiting for a slot.", es.waiting);
    prom_family(&p, "specd:request_success_total", "counter",
                "Requests answered, by why they finished (abort: the client left).");
    prom_int(&p, "specd:request_success_total", "finished_reason=\"stop\"",
             atomic_load(&s->n_stop));
    prom_int(&p, "specd:request_success_total", "finished_reason=\"length\"",
             atomic_load(&s->n_length));
    prom_int(&p, "specd:request_success_total", "finished_reason=\"abort\"",
             atomic_load(&s->n_abort));
    prom_counter(&p, "specd:request_failure_total", "Requests that failed while running.",
                 atomic_load(&s->n_failed));
    prom_counter(&p, "specd:request_rejected_total",
                 "Requests refused with an error status (bad body, limits, full queue).",
                 atomic_load(&s->n_rejected));
    prom_counter(&p, "specd:prompt_tokens_total", "Prompt tokens prefilled.", es.prompt_tokens);
    prom_counter(&p, "specd:generation_tokens_total", "Tokens generated.", es.generation_tokens);
    serve_grammars_stats gs;
    serve_grammars_get_stats(s->grammars, &gs);
    prom_counter(&p, "specd:grammar_compilations_total",
                 "Output grammars compiled (a request whose grammar was cached compiles none).",
                 gs.misses);
    prom_counter(&p, "specd:grammar_cache_hits_total",
                 "Requests whose output grammar was already compiled.", gs.hits);
    prom_counter(&p, "specd:loop_steps_total", "Steps of the batch loop.", es.loop.n_steps);
    prom_counter(&p, "specd:loop_forward_tokens_total",
                 "Tokens the loop's forwards ran (steps and prompt chunks).", es.loop.n_tokens_run);
    prom_family(&p, "specd:loop_forward_seconds_total", "counter",
                "Seconds spent in the loop's forwards.");
    prom_double(&p, "specd:loop_forward_seconds_total", NULL, (double)es.loop.forward_ns * 1e-9);
    pthread_mutex_lock(&s->hist_mu);
    prom_hist ttft = s->ttft, e2e = s->e2e;
    pthread_mutex_unlock(&s->hist_mu);
    prom_histogram(&p, "specd:time_to_first_token_seconds",
                   "Seconds from a request's arrival to its first token.", &ttft);
    prom_histogram(&p, "specd:e2e_request_latency_seconds",
                   "Seconds from a request's arrival to its whole answer.", &e2e);
    prom_spec_decode(&p, &es.spec, es.max_draft);
    if (p.failed) {
        free(p.buf);
        return NULL;
    }
    *len = p.len;
    return p.buf;
}

/* ---- /v1/models ---------------------------------------------------------------------------- */

/* The list, or (id not NULL) the one model named: OpenAI's 404 for any other id. */
static void reply_models(serve_server *s, http_server_reply *r, const char *id) {
    serve_refusal why;
    if (id && strcmp(id, s->model_id)) {
        serve_refuse(&why, 404, "invalid_request_error", "model",
                     "The model '%.100s' does not exist", id);
        snprintf(why.code, sizeof why.code, "model_not_found");
        reply_refusal(s, r, &why);
        return;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f) {
        char model[256];
        snprintf(model, sizeof model,
                 "{\"id\":\"%s\",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"specd\","
                 "\"max_model_len\":%d}",
                 s->model_id, s->started, s->limits.n_ctx);
        if (id) fputs(model, f);
        else fprintf(f, "{\"object\":\"list\",\"data\":[%s]}", model);
        if (fclose(f) != 0) {
            free(buf);
            buf = NULL;
        }
    }
    r->body = buf;
    r->body_len = buf ? len : 0;
    if (!buf) r->status = 500;
}

/* ---- routing -------------------------------------------------------------------------------- */

static void handle(void *user, const http_server_request *hr, http_server_reply *r) {
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
    if (get && (!strcmp(path, "/v1/models") || !strncmp(path, "/v1/models/", 11))) {
        reply_models(s, r, path[10] ? path + 11 : NULL);
        return;
    }
    int tokenize = !strcmp(path, "/tokenize"), detokenize = !strcmp(path, "/detokenize");
    if (tokenize || detokenize) {
        size_t len = 0;
        char *body = NULL;
        if (!post) serve_refuse(&why, 405, "invalid_request_error", NULL, "%s takes POST", path);
        else if (hr->body_too_large)
            serve_refuse(&why, 413, "invalid_request_error", NULL,
                         "the body is larger than this server's limit of %zu bytes",
                         s->http_max_body);
        else body = tokenize ? serve_tokenize(hr->body, hr->body_len, s->tok, &len, &why)
                             : serve_detokenize(hr->body, hr->body_len, s->tok, &len, &why);
        if (!body) reply_refusal(s, r, &why);
        r->body = body ? body : r->body;
        r->body_len = body ? len : r->body_len;
        return;
    }
    if (get && !strcmp(path, "/tokenizer_info")) {
        r->body = serve_tokenizer_info(s->tok, s->limits.n_ctx, &r->body_len, &why);
        if (!r->body) reply_refusal(s, r, &why);
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
    s->started = (long long)time(NULL);
    pthread_mutex_init(&s->hist_mu, NULL);
    s->ttft.bounds = ttft_bounds;
    s->ttft.n = (int)(sizeof ttft_bounds / sizeof *ttft_bounds);
    s->e2e.bounds = e2e_bounds;
    s->e2e.n = (int)(sizeof e2e_bounds / sizeof *e2e_bounds);
    int32_t n_vocab = specd_tokenizer_vocab_size(tok);
    for (int32_t id = 0; id < n_vocab && s->n_eog < MAX_EOG; id++)
        if (specd_tokenizer_is_eog(tok, id)) s->eog[s->n_eog++] = id;
    s->http_max_body = p->http.max_body ? p->http.max_body : http_server_default_params().max_body;
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
    if (st == SPECD_OK && !(s->grammars = serve_grammars_create(tok)))
        st = specd_fail(err, SPECD_E_NOMEM, "serve: no memory");
    if (st == SPECD_OK) st = serve_engine_create(model, &p->loop, &s->engine, err);
    if (st == SPECD_OK) st = http_server_create(&p->http, handle, s, &s->http, err);
    if (st != SPECD_OK) {
        serve_server_destroy(s);
        return st;
    }
    *out = s;
    return SPECD_OK;
}

int serve_server_port(const serve_server *s) { return http_server_port(s->http); }

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
        if (http_server_active(s->http) == 0 || ms >= grace_ms) break;
        nanosleep(&nap, NULL);
    }
}

void serve_server_destroy(serve_server *s) {
    if (!s) return;
    /* The engine first: it ends every request, so the handlers waiting on them return and the
     * HTTP server can join its connection threads. */
    serve_engine_stop(s->engine);
    http_server_destroy(s->http);
    serve_engine_destroy(s->engine);
    serve_grammars_destroy(s->grammars); /* after every request: none holds a grammar now */
    free(s->model_id);
    free(s->default_policy);
    free(s->default_policy_options);
    pthread_mutex_destroy(&s->hist_mu);
    free(s);
}
