#include "serve/serve_engine.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log_internal.h"
#include "common/status_internal.h"
#include "specd/metrics.h"

struct serve_job {
    serve_engine *eng;
    int refs;          /* the handler's, the engine's while queued or running, a cancel's */
    pthread_cond_t cv; /* tokens arrived or the request ended */
    int32_t *prompt;
    int64_t n_prompt;
    specd_seq_params params; /* its strings and stop tokens are the copies below */
    char *policy, *policy_options;
    int32_t *stop_tokens;
    specd_logit_bias *bias;
    int64_t id;  /* the loop's request id, once in_loop */
    int in_loop; /* submitted to the loop and not ended */
    int32_t *tokens;
    int64_t n_tokens, cap, n_taken;
    int done;
    specd_status status;
    char message[256];
    specd_seq_stats stats;
    int cancel_requested;
    int out_of_memory; /* its tokens could not be stored: it ends failed (engine thread only) */
    serve_job_cleanup cleanup; /* frees what params.processor borrows (after the close) */
    void *cleanup_user;
    serve_job *next_in, *next_cancel, *next_live;
};

struct serve_engine {
    specd_loop *loop;
    int32_t max_draft;
    /* scoring (serve_engine_score): a one-sequence context of its own, made on first use */
    const specd_model *model;
    specd_context_params score_params;
    pthread_mutex_t score_mu;
    specd_context *score_ctx;
    float *score_logits; /* SCORE_CHUNK x n_vocab */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work for the engine thread */
    int stop;
    serve_job *in_head, *in_tail; /* handed over, not yet submitted to the loop */
    int32_t n_in;
    serve_job *cancels;
    serve_job *live; /* in the loop */
    int32_t n_live;
    serve_engine_stats stats; /* counters; gauges and loop totals refreshed by the thread */
};

/* Drops one reference; the caller holds eng->mu. Returns 1 when the job must be freed. */
static int unref_locked(serve_job *j) { return --j->refs == 0; }

/* Last reference: the loop has closed the sequence (it closes before it delivers the last event),
 * so its processor may go. */
static void job_free(serve_job *j) {
    if (j->cleanup) j->cleanup(j->cleanup_user);
    pthread_cond_destroy(&j->cv);
    free(j->prompt);
    free(j->policy);
    free(j->policy_options);
    free(j->stop_tokens);
    free(j->bias);
    free(j->tokens);
    free(j);
}

static void remove_live_locked(serve_engine *eng, serve_job *j) {
    for (serve_job **p = &eng->live; *p; p = &(*p)->next_live)
        if (*p == j) {
            *p = j->next_live;
            eng->n_live--;
            return;
        }
}

/* The request's end: wake its handler, count it, drop the engine's reference. */
static void finish(serve_job *j, specd_status st, const char *message,
                   const specd_seq_stats *stats) {
    serve_engine *eng = j->eng;
    pthread_mutex_lock(&eng->mu);
    j->done = 1;
    j->status = st;
    snprintf(j->message, sizeof j->message, "%s", message ? message : "");
    if (stats) {
        j->stats = *stats;
        specd_seq_stats_add(&eng->stats.spec, stats);
    }
    if (j->in_loop) {
        j->in_loop = 0;
        remove_live_locked(eng, j);
    }
    if (st == SPECD_OK) eng->stats.finished_ok++;
    else if (j->cancel_requested) eng->stats.finished_abort++;
    else eng->stats.finished_error++;
    pthread_cond_broadcast(&j->cv);
    int last = unref_locked(j);
    pthread_mutex_unlock(&eng->mu);
    if (last) job_free(j);
}

#define NOMEM_MESSAGE "serve: no memory for the request's tokens"

/* Called by the loop on the engine thread, inside step or cancel. A request whose tokens cannot
 * be stored ends as failed (SPECD_E_NOMEM) on every path, so that its handler never waits for
 * an end that does not come:
 * - on a middle event: it cancels itself; the cancel delivers the last event (re-entering here
 *   with done set), which finishes it with the failure below rather than "cancelled";
 * - on the last event: the loop has already retired it (a cancel would be refused with
 *   SPECD_E_INVALID_ARG and deliver nothing), so it is finished here, directly.
 * (Exercising these needs realloc to fail mid-request; no test injects that fault.) */
static void on_event(const specd_loop_event *ev, void *user) {
    serve_job *j = user;
    serve_engine *eng = j->eng;
    int lost = 0;
    if (ev->n_tokens > 0) {
        pthread_mutex_lock(&eng->mu);
        if (j->n_tokens + ev->n_tokens > j->cap) {
            int64_t cap = j->cap ? j->cap : 64;
            while (cap < j->n_tokens + ev->n_tokens) cap *= 2;
            int32_t *t = realloc(j->tokens, (size_t)cap * sizeof *t);
            if (t) {
                j->tokens = t;
                j->cap = cap;
            } else {
                lost = 1; /* keep what fits; the request ends as failed below */
                j->out_of_memory = 1;
            }
        }
        if (!lost) {
            memcpy(j->tokens + j->n_tokens, ev->tokens,
                   (size_t)ev->n_tokens * sizeof *ev->tokens);
            j->n_tokens += ev->n_tokens;
            eng->stats.generation_tokens += ev->n_tokens;
            pthread_cond_broadcast(&j->cv);
        }
        pthread_mutex_unlock(&eng->mu);
        if (lost)
            specd_log(SPECD_LOG_ERROR, "serve: no memory for request %lld's tokens",
                      (long long)ev->request);
    }
    if (ev->done) {
        /* out_of_memory is only written on this (the engine's) thread */
        if (j->out_of_memory) finish(j, SPECD_E_NOMEM, NOMEM_MESSAGE, NULL);
        else finish(j, ev->status, ev->message, ev->stats);
        return;
    }
    /* Not the last event: the loop still runs the request, so the cancel must succeed and
     * finish it (re-entrantly). Should the loop not know it, finish it here all the same. */
    if (lost && specd_loop_cancel(eng->loop, ev->request) != SPECD_OK)
        finish(j, SPECD_E_NOMEM, NOMEM_MESSAGE, NULL);
}

/* The gauges and the loop's totals, read on the engine thread (the loop is not thread-safe). */
static void refresh_locked(serve_engine *eng) {
    eng->stats.running = specd_loop_n_running(eng->loop);
    eng->stats.waiting = specd_loop_n_queued(eng->loop) + eng->n_in;
    specd_loop_get_stats(eng->loop, &eng->stats.loop);
}

static void submit_to_loop(serve_engine *eng, serve_job *j) {
    specd_error err;
    pthread_mutex_lock(&eng->mu);
    int cancelled = j->cancel_requested;
    pthread_mutex_unlock(&eng->mu);
    if (cancelled) {
        finish(j, SPECD_E_STATE, "cancelled", NULL);
        return;
    }
    int64_t id;
    specd_status st = specd_loop_submit(eng->loop, j->prompt, j->n_prompt, &j->params, on_event,
                                        j, &id, &err);
    if (st != SPECD_OK) {
        finish(j, st, err.message, NULL);
        return;
    }
    pthread_mutex_lock(&eng->mu);
    j->id = id;
    j->in_loop = 1;
    j->next_live = eng->live;
    eng->live = j;
    eng->n_live++;
    eng->stats.prompt_tokens += j->n_prompt;
    pthread_mutex_unlock(&eng->mu);
}

static void *engine_main(void *arg) {
    serve_engine *eng = arg;
    specd_error err;
    pthread_mutex_lock(&eng->mu);
    for (;;) {
        refresh_locked(eng);
        while (!eng->stop && !eng->in_head && !eng->cancels && eng->n_live == 0)
            pthread_cond_wait(&eng->cv, &eng->mu);
        if (eng->stop) break;
        serve_job *in = eng->in_head, *cancels = eng->cancels;
        eng->in_head = eng->in_tail = NULL;
        eng->n_in = 0;
        eng->cancels = NULL;
        pthread_mutex_unlock(&eng->mu);
        /* Cancels first, so a slot freed by a client that left goes to the next request. */
        while (cancels) {
            serve_job *j = cancels, *next = j->next_cancel;
            pthread_mutex_lock(&eng->mu);
            int in_loop = j->in_loop;
            int64_t id = j->id;
            pthread_mutex_unlock(&eng->mu);
            if (in_loop) specd_loop_cancel(eng->loop, id); /* its last event finishes it */
            pthread_mutex_lock(&eng->mu);
            int last = unref_locked(j);
            pthread_mutex_unlock(&eng->mu);
            if (last) job_free(j);
            cancels = next;
        }
        while (in) {
            serve_job *next = in->next_in;
            submit_to_loop(eng, in);
            in = next;
        }
        specd_loop_step_info info;
        if (specd_loop_step(eng->loop, &info, &err) != SPECD_OK)
            specd_log(SPECD_LOG_ERROR, "serve: step failed: %s", err.message);
        pthread_mutex_lock(&eng->mu);
    }
    /* Stopping: end every request so that no handler waits for tokens that never come. */
    serve_job *in = eng->in_head, *cancels = eng->cancels;
    eng->in_head = eng->in_tail = NULL;
    eng->n_in = 0;
    eng->cancels = NULL;
    pthread_mutex_unlock(&eng->mu);
    for (;;) {
        pthread_mutex_lock(&eng->mu);
        serve_job *j = eng->live;
        int64_t id = j ? j->id : 0;
        if (j) j->cancel_requested = 1;
        pthread_mutex_unlock(&eng->mu);
        if (!j) break;
        if (specd_loop_cancel(eng->loop, id) != SPECD_OK) /* the loop no longer knows it */
            finish(j, SPECD_E_STATE, "the server is stopping", NULL);
    }
    while (in) {
        serve_job *next = in->next_in;
        pthread_mutex_lock(&eng->mu);
        in->cancel_requested = 1;
        pthread_mutex_unlock(&eng->mu);
        finish(in, SPECD_E_STATE, "the server is stopping", NULL);
        in = next;
    }
    while (cancels) {
        serve_job *next = cancels->next_cancel;
        pthread_mutex_lock(&eng->mu);
        int last = unref_locked(cancels);
        pthread_mutex_unlock(&eng->mu);
        if (last) job_free(cancels);
        cancels = next;
    }
    pthread_mutex_lock(&eng->mu);
    refresh_locked(eng);
    pthread_mutex_unlock(&eng->mu);
    return NULL;
}

/* Tokens per extend of a scoring pass: bounds its logits buffer (SCORE_CHUNK x n_vocab floats). */
#define SCORE_CHUNK 64

specd_status serve_engine_create(const specd_model *model, const specd_loop_params *params,
                                 serve_engine **out, specd_error *err) {
    serve_engine *eng = calloc(1, sizeof *eng);
    if (!eng) return specd_fail(err, SPECD_E_NOMEM, "serve: no memory");
    specd_status st = specd_loop_create(model, params, &eng->loop, err);
    if (st != SPECD_OK) {
        free(eng);
        return st;
    }
    eng->max_draft = params->max_draft;
    eng->model = model;
    eng->score_params = specd_context_default_params();
    eng->score_params.n_ctx = params->n_ctx;
    eng->score_params.n_batch = SCORE_CHUNK;
    eng->score_params.n_threads = params->n_threads;
    eng->score_params.device = params->device; /* beside the loop's context */
    eng->score_params.device_index = params->device_index;
    pthread_mutex_init(&eng->score_mu, NULL);
    pthread_mutex_init(&eng->mu, NULL);
    pthread_cond_init(&eng->cv, NULL);
    int e = pthread_create(&eng->thread, NULL, engine_main, eng);
    if (e) {
        serve_engine_destroy(eng);
        return specd_fail(err, SPECD_E_IO, "serve: cannot start the loop's thread: %s",
                          strerror(e));
    }
    eng->started = 1;
    *out = eng;
    return SPECD_OK;
}

void serve_engine_stop(serve_engine *eng) {
    if (!eng || !eng->started) return;
    pthread_mutex_lock(&eng->mu);
    eng->stop = 1;
    pthread_cond_signal(&eng->cv);
    pthread_mutex_unlock(&eng->mu);
    pthread_join(eng->thread, NULL);
    eng->started = 0;
}

void serve_engine_destroy(serve_engine *eng) {
    if (!eng) return;
    serve_engine_stop(eng);
    specd_loop_destroy(eng->loop);
    specd_context_destroy(eng->score_ctx);
    free(eng->score_logits);
    pthread_mutex_destroy(&eng->score_mu);
    pthread_cond_destroy(&eng->cv);
    pthread_mutex_destroy(&eng->mu);
    free(eng);
}

static void *dup_bytes(const void *p, size_t n) {
    void *d = malloc(n ? n : 1);
    if (d && n) memcpy(d, p, n);
    return d;
}

specd_status serve_engine_submit(serve_engine *eng, const int32_t *prompt, int64_t n_prompt,
                                 const specd_seq_params *params, serve_job_cleanup cleanup,
                                 void *cleanup_user, serve_job **out, specd_error *err) {
    serve_job *j = n_prompt < 1 ? NULL : calloc(1, sizeof *j);
    if (!j) {
        if (cleanup) cleanup(cleanup_user);
        return n_prompt < 1 ? specd_fail(err, SPECD_E_INVALID_ARG, "serve: empty prompt")
                            : specd_fail(err, SPECD_E_NOMEM, "serve: no memory");
    }
    pthread_cond_init(&j->cv, NULL);
    j->cleanup = cleanup;
    j->cleanup_user = cleanup_user;
    j->eng = eng;
    j->params = *params;
    j->prompt = dup_bytes(prompt, (size_t)n_prompt * sizeof *prompt);
    if (params->sampling.n_bias > 0)
        j->bias = dup_bytes(params->sampling.bias, params->sampling.n_bias * sizeof *j->bias);
    j->n_prompt = n_prompt;
    if (params->policy) j->policy = dup_bytes(params->policy, strlen(params->policy) + 1);
    if (params->policy_options)
        j->policy_options = dup_bytes(params->policy_options, strlen(params->policy_options) + 1);
    if (params->n_stop_tokens > 0)
        j->stop_tokens = dup_bytes(params->stop_tokens,
                                   (size_t)params->n_stop_tokens * sizeof(int32_t));
    if (!j->prompt || (params->policy && !j->policy) ||
        (params->policy_options && !j->policy_options) ||
        (params->n_stop_tokens > 0 && !j->stop_tokens) ||
        (params->sampling.n_bias > 0 && !j->bias)) {
        job_free(j);
        return specd_fail(err, SPECD_E_NOMEM, "serve: no memory");
    }
    j->params.policy = j->policy;
    j->params.policy_options = j->policy_options;
    j->params.stop_tokens = j->stop_tokens;
    j->params.sampling.bias = j->bias;
    j->refs = 2; /* the handler's and the engine's */
    pthread_mutex_lock(&eng->mu);
    if (eng->stop) {
        pthread_mutex_unlock(&eng->mu);
        job_free(j);
        return specd_fail(err, SPECD_E_STATE, "serve: the server is stopping");
    }
    if (params->max_tokens == 0) { /* nothing to generate (a prompt scored with echo) */
        j->done = 1;
        j->status = SPECD_OK;
        j->refs = 1;
        eng->stats.finished_ok++;
        pthread_mutex_unlock(&eng->mu);
        *out = j;
        return SPECD_OK;
    }
    if (eng->in_tail) eng->in_tail->next_in = j;
    else eng->in_head = j;
    eng->in_tail = j;
    eng->n_in++;
    eng->stats.waiting++;
    pthread_cond_signal(&eng->cv);
    pthread_mutex_unlock(&eng->mu);
    *out = j;
    return SPECD_OK;
}

void serve_engine_get_stats(serve_engine *eng, serve_engine_stats *out) {
    pthread_mutex_lock(&eng->mu);
    *out = eng->stats;
    out->max_draft = eng->max_draft;
    pthread_mutex_unlock(&eng->mu);
}

static struct timespec deadline_after(int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int serve_job_wait(serve_job *j, int timeout_ms, serve_job_view *out) {
    serve_engine *eng = j->eng;
    memset(out, 0, sizeof *out);
    struct timespec dl = deadline_after(timeout_ms);
    pthread_mutex_lock(&eng->mu);
    int rc = 0;
    while (j->n_taken == j->n_tokens && !j->done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&j->cv, &eng->mu, &dl);
    int64_t n = j->n_tokens - j->n_taken;
    if (n > 0) {
        out->tokens = malloc((size_t)n * sizeof *out->tokens);
        if (!out->tokens) {
            pthread_mutex_unlock(&eng->mu);
            return -1;
        }
        memcpy(out->tokens, j->tokens + j->n_taken, (size_t)n * sizeof *out->tokens);
        out->n_tokens = n;
        j->n_taken = j->n_tokens;
    }
    out->done = j->done;
    if (j->done) {
        out->status = j->status;
        snprintf(out->message, sizeof out->message, "%s", j->message);
        out->stats = j->stats;
    }
    pthread_mutex_unlock(&eng->mu);
    return 0;
}

void serve_job_cancel(serve_job *j) {
    serve_engine *eng = j->eng;
    pthread_mutex_lock(&eng->mu);
    /* Once stopping, the engine ends every request itself. */
    if (!j->done && !j->cancel_requested && !eng->stop) {
        j->cancel_requested = 1;
        j->refs++; /* the cancel list's */
        j->next_cancel = eng->cancels;
        eng->cancels = j;
        pthread_cond_signal(&eng->cv);
    }
    pthread_mutex_unlock(&eng->mu);
}

void serve_job_release(serve_job *j) {
    if (!j) return;
    serve_job_cancel(j);
    pthread_mutex_lock(&j->eng->mu);
    int last = unref_locked(j);
    pthread_mutex_unlock(&j->eng->mu);
    if (last) job_free(j);
}

int64_t serve_job_tokens(serve_job *j, int32_t *out, int64_t cap) {
    serve_engine *eng = j->eng;
    pthread_mutex_lock(&eng->mu);
    int64_t n = j->n_tokens < cap ? j->n_tokens : cap;
    if (n > 0) memcpy(out, j->tokens, (size_t)n * sizeof *out);
    pthread_mutex_unlock(&eng->mu);
    return n;
}

/* Log-softmax of one row for token and its top_n alternatives (in double: the sum over the
 * vocabulary is where a float would lose the small probabilities' digits). */
static void score_row(const float *row, int32_t n_vocab, int32_t token, int top_n,
                      serve_logprob *out) {
    float mx = row[0];
    for (int32_t v = 1; v < n_vocab; v++)
        if (row[v] > mx) mx = row[v];
    double sum = 0;
    for (int32_t v = 0; v < n_vocab; v++) sum += exp((double)row[v] - (double)mx);
    double lse = (double)mx + log(sum);
    out->token = token;
    out->logprob = (float)((double)row[token] - lse);
    out->n_top = 0;
    for (int32_t v = 0; v < n_vocab; v++) { /* insertion into the sorted top list */
        int k = out->n_top;
        if (k == top_n && (k == 0 || row[v] <= row[out->top_token[k - 1]])) continue;
        if (k < top_n) out->n_top++;
        else k--;
        while (k > 0 && row[v] > row[out->top_token[k - 1]]) {
            out->top_token[k] = out->top_token[k - 1];
            k--;
        }
        out->top_token[k] = v;
    }
    for (int k = 0; k < out->n_top; k++)
        out->top_logprob[k] = (float)((double)row[out->top_token[k]] - lse);
}

specd_status serve_engine_score(serve_engine *eng, const int32_t *tokens, int64_t n, int64_t from,
                                int top_n, serve_logprob *out, specd_error *err) {
    if (from < 1 || from > n || top_n < 0 || top_n > SERVE_MAX_TOP_LOGPROBS)
        return specd_fail(err, SPECD_E_INVALID_ARG, "serve: bad scoring range");
    if (from == n) return SPECD_OK;
    const specd_model_info *info = specd_model_get_info(eng->model);
    int32_t n_vocab = info->n_vocab;
    specd_status st = SPECD_OK;
    pthread_mutex_lock(&eng->score_mu);
    if (!eng->score_ctx)
        st = specd_context_create(eng->model, &eng->score_params, &eng->score_ctx, err);
    if (st == SPECD_OK && !eng->score_logits &&
        !(eng->score_logits = malloc((size_t)SCORE_CHUNK * (size_t)n_vocab * sizeof(float))))
        st = specd_fail(err, SPECD_E_NOMEM, "serve: no memory for scoring");
    if (st == SPECD_OK) st = specd_context_kv_truncate(eng->score_ctx, 0, 0, err);
    /* token i's log-probability is read from row i - 1: the rows of tokens [0, n - 1) */
    for (int64_t c0 = 0; st == SPECD_OK && c0 < n - 1; c0 += SCORE_CHUNK) {
        int32_t m = (int32_t)(n - 1 - c0 < SCORE_CHUNK ? n - 1 - c0 : SCORE_CHUNK);
        int32_t rows[SCORE_CHUNK], n_rows = 0;
        for (int32_t i = 0; i < m; i++)
            if (c0 + i + 1 >= from) rows[n_rows++] = i;
        specd_seq_batch b = {.seq = 0, .n_tokens = m, .tokens = tokens + c0};
        specd_extend_out o = {.n_rows = n_rows, .rows = rows, .logits = eng->score_logits};
        st = specd_context_extend(eng->score_ctx, &b, 1, n_rows ? &o : NULL, err);
        for (int32_t r = 0; st == SPECD_OK && r < n_rows; r++) {
            int64_t i = c0 + rows[r] + 1;
            if (tokens[i] < 0 || tokens[i] >= n_vocab) {
                st = specd_fail(err, SPECD_E_INVALID_ARG, "serve: token %d outside the vocab",
                                tokens[i]);
                break;
            }
            score_row(eng->score_logits + (size_t)r * (size_t)n_vocab, n_vocab, tokens[i], top_n,
                      &out[i - from]);
        }
    }
    pthread_mutex_unlock(&eng->score_mu);
    return st;
}
