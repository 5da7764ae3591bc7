#include "ipc/daemon/daemon_metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/http_server.h"
#include "common/log_internal.h"
#include "common/prom.h"
#include "common/status_internal.h"

/* What the wrapped handlers counted. */
typedef struct counts {
    int64_t opened, closed, commits, committed_tokens, proposes, verifies, errors, peers_gone;
    uint64_t sequences_open;
    specd_seq_stats spec; /* drafts, proposals, accepted (verifier), by position */
} counts;

typedef struct wrapper {
    specd_ipc_handlers inner;
    pthread_mutex_t mu;
    counts c;
    http_server *http;
} wrapper;

/* The daemons' shared main() calls setup with no user pointer, so what --metrics-port said
 * reaches it here; set once in main() before the service starts. */
static struct {
    const char *program, *host;
    int port;
    specd_daemon_setup_fn setup;
    specd_daemon_teardown_fn teardown;
} config = {.port = -1};

int specd_daemon_metrics_args(int *argc, char **argv, const char *program, int *port,
                              const char **host) {
    *port = -1;
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i], *v = NULL;
        int is_port = !strncmp(a, "--metrics-port", 14) && (a[14] == '=' || !a[14]);
        int is_host = !strncmp(a, "--metrics-host", 14) && (a[14] == '=' || !a[14]);
        if (!is_port && !is_host) {
            argv[out++] = argv[i];
            continue;
        }
        if (a[14] == '=') v = a + 15;
        else if (i + 1 < *argc) v = argv[++i];
        if (!v) {
            fprintf(stderr, "%s: %.14s needs a value\n", program, a);
            return 2;
        }
        if (is_host) {
            *host = v;
            continue;
        }
        char *end;
        long p = strtol(v, &end, 10);
        if (!*v || *end || p < 0 || p > 65535) {
            fprintf(stderr, "%s: --metrics-port %s: want 0..65535 (0: any free port)\n",
                    program, v);
            return 2;
        }
        *port = (int)p;
    }
    *argc = out;
    argv[out] = NULL;
    return 0;
}

void specd_daemon_metrics_help(void) {
    printf("\nmetrics options:\n"
           "  --metrics-port N       serve Prometheus metrics at http://HOST:N/metrics (and\n"
           "                         /health); 0 picks a free port (logged)\n"
           "  --metrics-host A       the IPv4 address to bind it to [127.0.0.1]\n");
}

void specd_daemon_metrics_configure(const char *program, int port, const char *host,
                                    specd_daemon_setup_fn inner_setup,
                                    specd_daemon_teardown_fn inner_teardown) {
    config.program = program;
    config.port = port;
    config.host = host;
    config.setup = inner_setup;
    config.teardown = inner_teardown;
}

/* ---- counting wrappers ----------------------------------------------------------------------- */

static void after(wrapper *w, specd_status st) {
    /* sequences_open is the inner state's: read it here, on the service thread. */
    uint64_t open = w->inner.sequences_open ? w->inner.sequences_open(w->inner.user) : 0;
    pthread_mutex_lock(&w->mu);
    if (st != SPECD_OK) w->c.errors++;
    w->c.sequences_open = open;
    pthread_mutex_unlock(&w->mu);
}

static specd_status w_open(void *user, uint64_t owner, const SpecdWire__OpenSeq *m,
                           specd_error *err) {
    wrapper *w = user;
    specd_status st = w->inner.open_seq(w->inner.user, owner, m, err);
    pthread_mutex_lock(&w->mu);
    if (st == SPECD_OK) w->c.opened++;
    pthread_mutex_unlock(&w->mu);
    after(w, st);
    return st;
}

static specd_status w_close(void *user, uint64_t owner, uint64_t seq_id, specd_error *err) {
    wrapper *w = user;
    specd_status st = w->inner.close_seq(w->inner.user, owner, seq_id, err);
    pthread_mutex_lock(&w->mu);
    if (st == SPECD_OK) w->c.closed++;
    pthread_mutex_unlock(&w->mu);
    after(w, st);
    return st;
}

static specd_status w_commit(void *user, uint64_t owner, uint64_t seq_id, const uint32_t *tokens,
                             size_t n, int has_rollback, uint64_t rollback_to, specd_error *err) {
    wrapper *w = user;
    specd_status st =
        w->inner.commit(w->inner.user, owner, seq_id, tokens, n, has_rollback, rollback_to, err);
    pthread_mutex_lock(&w->mu);
    if (st == SPECD_OK) {
        w->c.commits++;
        w->c.committed_tokens += (int64_t)n;
    }
    pthread_mutex_unlock(&w->mu);
    after(w, st);
    return st;
}

static specd_status w_propose(void *user, uint64_t owner, const SpecdWire__Propose *m,
                              specd_ipc_draft_out *out, specd_error *err) {
    wrapper *w = user;
    specd_status st = w->inner.propose(w->inner.user, owner, m, out, err);
    pthread_mutex_lock(&w->mu);
    w->c.proposes++;
    if (st == SPECD_OK && out->n > 0) {
        w->c.spec.n_drafts++;
        w->c.spec.n_draft_tokens += (int64_t)out->n;
        for (size_t i = 0; i < out->n && i < SPECD_MAX_DRAFT; i++) w->c.spec.drafted_at[i]++;
    }
    pthread_mutex_unlock(&w->mu);
    after(w, st);
    return st;
}

static specd_status w_verify(void *user, uint64_t owner, const SpecdWire__Verify *m,
                             const specd_ipc_view *logits, const specd_ipc_view *q,
                             specd_ipc_verify_result *out, specd_error *err) {
    wrapper *w = user;
    specd_status st = w->inner.verify(w->inner.user, owner, m, logits, q, out, err);
    pthread_mutex_lock(&w->mu);
    w->c.verifies++;
    if (st == SPECD_OK) {
        size_t n = m->n_draft_tokens;
        if (n > 0) {
            w->c.spec.n_drafts++;
            w->c.spec.n_draft_tokens += (int64_t)n;
            w->c.spec.n_accepted += out->accepted;
        }
        for (size_t i = 0; i < n && i < SPECD_MAX_DRAFT; i++) {
            w->c.spec.drafted_at[i]++;
            if (i < out->accepted) w->c.spec.accepted_at[i]++;
        }
        w->c.spec.n_emitted += (int64_t)out->n_emitted;
        w->c.spec.n_steps++;
    }
    pthread_mutex_unlock(&w->mu);
    after(w, st);
    return st;
}

static specd_status w_seq_info(void *user, uint64_t owner, uint64_t seq_id, uint64_t *length,
                               uint64_t *hash, specd_error *err) {
    wrapper *w = user;
    return w->inner.seq_info(w->inner.user, owner, seq_id, length, hash, err);
}

static uint64_t w_sequences_open(void *user) {
    wrapper *w = user;
    return w->inner.sequences_open(w->inner.user);
}

static void w_peer_gone(void *user, uint64_t owner) {
    wrapper *w = user;
    w->inner.peer_gone(w->inner.user, owner);
    pthread_mutex_lock(&w->mu);
    w->c.peers_gone++;
    pthread_mutex_unlock(&w->mu);
    after(w, SPECD_OK);
}

/* ---- /metrics -------------------------------------------------------------------------------- */

static void handle(void *user, const http_server_request *req, http_server_reply *r) {
    wrapper *w = user;
    if (strcmp(req->method, "GET") || (strcmp(req->path, "/metrics") &&
                                       strcmp(req->path, "/health"))) {
        static const char msg[] = "{\"error\":{\"message\":\"GET /metrics or /health\","
                                  "\"type\":\"not_found_error\",\"param\":null,\"code\":404}}";
        r->status = 404;
        r->body = strdup(msg);
        r->body_len = r->body ? strlen(msg) : 0;
        return;
    }
    if (!strcmp(req->path, "/health")) {
        r->body = strdup("{\"status\":\"ok\"}");
        r->body_len = r->body ? strlen(r->body) : 0;
        return;
    }
    pthread_mutex_lock(&w->mu);
    counts c = w->c;
    pthread_mutex_unlock(&w->mu);
    prom p = {0};
    prom_gauge(&p, "specd:daemon_sequences_open", "Sequences open now, all peers.",
               (double)c.sequences_open);
    prom_counter(&p, "specd:daemon_sequences_opened_total", "Sequences opened.", c.opened);
    prom_counter(&p, "specd:daemon_sequences_closed_total", "Sequences closed by peers.", c.closed);
    prom_counter(&p, "specd:daemon_commits_total", "Commit requests.", c.commits);
    prom_counter(&p, "specd:daemon_committed_tokens_total", "Tokens committed.",
                 c.committed_tokens);
    prom_counter(&p, "specd:daemon_propose_requests_total", "Propose requests.", c.proposes);
    prom_counter(&p, "specd:daemon_verify_requests_total", "Verify requests.", c.verifies);
    prom_counter(&p, "specd:daemon_request_errors_total", "Requests answered with an error.",
                 c.errors);
    prom_counter(&p, "specd:daemon_peers_gone_total", "Peer sessions that ended.", c.peers_gone);
    prom_spec_decode(&p, &c.spec, -1);
    if (p.failed) {
        free(p.buf);
        r->status = 500;
        return;
    }
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
    r->body = p.buf;
    r->body_len = p.len;
}

specd_status specd_daemon_metrics_setup(const specd_ipc_service_params *p,
                                        const specd_daemon_config *c, specd_ipc_handlers *h,
                                        specd_error *err) {
    SPECD_TRY(config.setup(p, c, h, err));
    if (config.port < 0) return SPECD_OK;
    wrapper *w = calloc(1, sizeof *w);
    if (!w) {
        config.teardown(h);
        return specd_fail(err, SPECD_E_NOMEM, "metrics: no memory");
    }
    pthread_mutex_init(&w->mu, NULL);
    w->inner = *h;
    http_server_params hp = http_server_default_params();
    hp.port = config.port;
    if (config.host) hp.host = config.host;
    hp.max_conns = 16;
    specd_status st = http_server_create(&hp, handle, w, &w->http, err);
    if (st != SPECD_OK) {
        pthread_mutex_destroy(&w->mu);
        free(w);
        config.teardown(h);
        return st;
    }
    specd_log(SPECD_LOG_INFO, "metrics on http://%s:%d/metrics", hp.host,
              http_server_port(w->http));
    /* Only the handlers the inner service has are wrapped: a NULL one must stay NULL (the
     * service answers it SPECD_E_UNSUPPORTED). */
    specd_ipc_handlers o = {.user = w};
    if (h->open_seq) o.open_seq = w_open;
    if (h->close_seq) o.close_seq = w_close;
    if (h->commit) o.commit = w_commit;
    if (h->propose) o.propose = w_propose;
    if (h->verify) o.verify = w_verify;
    if (h->seq_info) o.seq_info = w_seq_info;
    if (h->sequences_open) o.sequences_open = w_sequences_open;
    if (h->peer_gone) o.peer_gone = w_peer_gone;
    *h = o;
    return SPECD_OK;
}

void specd_daemon_metrics_teardown(specd_ipc_handlers *h) {
    if (config.port < 0) {
        config.teardown(h);
        return;
    }
    wrapper *w = h->user;
    http_server_destroy(w->http);
    *h = w->inner;
    pthread_mutex_destroy(&w->mu);
    free(w);
    config.teardown(h);
}

int specd_daemon_metrics_main(int argc, char **argv, const char *program, specd_ipc_role role,
                              const char *description, specd_daemon_setup_fn setup,
                              specd_daemon_teardown_fn teardown) {
    int port;
    const char *host = NULL;
    if (specd_daemon_metrics_args(&argc, argv, program, &port, &host)) return 2;
    specd_daemon_metrics_configure(program, port, host, setup, teardown);
    int rc = specd_daemon_main(argc, argv, program, role, description, specd_daemon_metrics_setup,
                               specd_daemon_metrics_teardown);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help")) specd_daemon_metrics_help();
    return rc;
}
