/* specd serve: an OpenAI-compatible HTTP server on the stationary batch loop (serve/). This file
 * is the command line: options, the model, signals; serve/serve_server.c is the server. */
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "policy/artifacts.h"
#include "serve/serve_server.h"
#include "specd/log.h"

#include <errno.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: specd serve [options]\n\n"
            "An OpenAI-compatible HTTP server: POST /v1/completions, /v1/chat/completions\n"
            "(\"stream\": true for server-sent events), GET (or HEAD) /v1/models, /health,\n"
            "/metrics (Prometheus text). Every running request shares one forward per step.\n\n"
            "options:\n"
            "  -m, --model PATH        GGUF model (default: the default model)\n"
            "  --model-name ID         the name requests use (default: file name without .gguf)\n"
            "  --host A                IPv4 address to listen on (default 127.0.0.1)\n"
            "  --port N                TCP port; 0 = any free port (default 8000)\n"
            "  --max-seqs N            requests running at once (default 16)\n"
            "  --max-queue N           requests waiting beyond those (default 1024)\n"
            "  -t, --threads N         worker threads (default: online cores)\n"
            "  --n-ctx N               KV rows per request (default 2048)\n"
            "  --draft-max K           most proposals per step (default 8)\n"
            "  --policy NAME[:OPTS]    policy of requests that name none (default none)\n"
            "  --max-tokens-cap N      most max_tokens a request may ask for (default 1024)\n"
            "  --default-max-tokens N  max_tokens of a request that gives none (default 256)\n"
            "  --max-body BYTES        largest request body; a larger Content-Length is told\n"
            "                          413 at once (default 1048576)\n"
            "  --request-timeout S     seconds a request's head and body may take, from the\n"
            "                          connection's opening (or the previous answer's end) to\n"
            "                          the body's last byte; then the connection is closed,\n"
            "                          however often the client sends a byte (default 30)\n"
            "  --max-conns N           connections at once (default 512)\n"
            "  --max-conns-per-ip N    connections at once from one address; 0 = no limit\n"
            "                          (default 128)\n"
            "  --api-key KEY           every request needs 'Authorization: Bearer KEY' (401\n"
            "                          otherwise) except /health and /metrics, which stay open;\n"
            "                          also from the environment: SPECD_API_KEY, which keeps\n"
            "                          the key out of the process list\n"
            "  --cors-origin ORIGIN    let browsers at ORIGIN ('*': any) call the server: the\n"
            "                          Access-Control-* headers, preflights answered 204 (without\n"
            "                          it: no CORS headers, OPTIONS gets 405)\n"
            "  --device D              cpu | cuda | cuda:N: where the model, the KV caches and\n"
            "                          every context a policy makes run (default: $SPECD_DEVICE,\n"
            "                          else cpu)\n"
            "  --numerics M            fast | llama: the CPU matmuls' order (default:\n"
            "                          $SPECD_NUMERICS, else fast; llama = llama.cpp's bits)\n"
            "  --seed S                first seed of requests that give none (default 0)\n"
            "  --grace-ms MS           on SIGINT/SIGTERM, how long requests in flight may take\n"
            "                          to finish before they are cancelled (default 10000)\n\n"
            "A request may set policy, policy_options (no file paths) and draft_max besides\n"
            "OpenAI's fields; a request with a seed gets the tokens `specd generate --seed`\n"
            "gives with the same sampling. Structured output: response_format (json_object,\n"
            "json_schema), grammar (GBNF), json_schema, tools with tool_choice (answers as\n"
            "tool_calls); penalties: presence_penalty, frequency_penalty, repetition_penalty;\n"
            "all lossless under speculation (docs/serving.md). Stops on SIGINT or SIGTERM.\n");
}

static int parse_long(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || errno || *end || v < lo || v > hi) {
        fprintf(stderr, "specd serve: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo,
                hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static void log_to_stderr(specd_log_level level, const char *message, void *user) {
    (void)user;
    static const char *names[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "specd serve: %s: %s\n", names[level <= SPECD_LOG_ERROR ? level : 3],
            message);
}

int specd_cmd_serve(int argc, char **argv) {
    serve_server_params p = serve_server_default_params();
    p.http.port = 8000;
    const char *model_path = NULL, *model_name = NULL, *policy = "none";
    long grace_ms = 10000;
    const char *api_key = getenv("SPECD_API_KEY");
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "specd serve: unknown or incomplete option '%s'\n", f);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        long n = 0;
        int rc = 0;
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) model_path = v;
        else if (!strcmp(f, "--model-name")) model_name = v;
        else if (!strcmp(f, "--host")) p.http.host = v;
        else if (!strcmp(f, "--policy")) policy = v;
        else if (!strcmp(f, "--port") && !(rc = parse_long(f, v, 0, 65535, &n))) p.http.port = (int)n;
        else if (!strcmp(f, "--max-seqs") && !(rc = parse_long(f, v, 1, 256, &n)))
            p.loop.max_seqs = (int32_t)n;
        else if (!strcmp(f, "--max-queue") && !(rc = parse_long(f, v, 0, 1 << 20, &n)))
            p.loop.max_queue = (int32_t)n;
        else if ((!strcmp(f, "-t") || !strcmp(f, "--threads")) &&
                 !(rc = parse_long(f, v, 0, 1024, &n)))
            p.loop.n_threads = (int32_t)n;
        else if (!strcmp(f, "--n-ctx") && !(rc = parse_long(f, v, 64, 1 << 20, &n)))
            p.loop.n_ctx = (int32_t)n;
        else if (!strcmp(f, "--draft-max") && !(rc = parse_long(f, v, 1, SPECD_MAX_DRAFT, &n)))
            p.loop.max_draft = (int32_t)n;
        else if (!strcmp(f, "--max-tokens-cap") && !(rc = parse_long(f, v, 1, 1 << 20, &n)))
            p.max_tokens_cap = (int32_t)n;
        else if (!strcmp(f, "--default-max-tokens") && !(rc = parse_long(f, v, 1, 1 << 20, &n)))
            p.default_max_tokens = (int32_t)n;
        else if (!strcmp(f, "--max-body") && !(rc = parse_long(f, v, 1024, 1L << 30, &n)))
            p.http.max_body = (size_t)n;
        else if (!strcmp(f, "--request-timeout") && !(rc = parse_long(f, v, 1, 3600, &n)))
            p.http.request_timeout_ms = (unsigned)n * 1000u;
        else if (!strcmp(f, "--max-conns") && !(rc = parse_long(f, v, 1, 1 << 20, &n)))
            p.http.max_conns = (unsigned)n;
        else if (!strcmp(f, "--max-conns-per-ip") && !(rc = parse_long(f, v, 0, 1 << 20, &n)))
            p.http.max_conns_per_ip = (unsigned)n;
        else if (!strcmp(f, "--api-key")) api_key = v;
        else if (!strcmp(f, "--cors-origin")) p.http.cors_origin = v;
        else if (!strcmp(f, "--device"))
            rc = cli_parse_device("specd serve", v, &p.loop.device, &p.loop.device_index);
        else if (!strcmp(f, "--numerics"))
            rc = cli_parse_numerics("specd serve", v);
        else if (!strcmp(f, "--seed") && !(rc = parse_long(f, v, 0, 1L << 53, &n)))
            p.seed_base = (uint64_t)n;
        else if (!strcmp(f, "--grace-ms") && !(rc = parse_long(f, v, 0, 3600000, &n)))
            grace_ms = n;
        else if (!rc) {
            fprintf(stderr, "specd serve: unknown option '%s'\n", f);
            usage(stderr);
            return 2;
        }
        if (rc) return 2;
    }
    /* no --device: SPECD_DEVICE's, which specd_loop_default_params marked -1 if unparsable */
    if (p.loop.device == -1 &&
        cli_parse_device("specd serve", NULL, &p.loop.device, &p.loop.device_index))
        return 2;
    /* --policy NAME[:OPTIONS]: the default of requests that name no policy. */
    char policy_name[64];
    const char *colon = strchr(policy, ':');
    size_t nl = colon ? (size_t)(colon - policy) : strlen(policy);
    if (nl == 0 || nl >= sizeof policy_name) {
        fprintf(stderr, "specd serve: --policy '%s': want NAME[:OPTIONS]\n", policy);
        return 2;
    }
    memcpy(policy_name, policy, nl);
    policy_name[nl] = '\0';
    if (!specd_policy_find(policy_name)) {
        fprintf(stderr, "specd serve: unknown policy '%s'\n", policy_name);
        return 2;
    }
    p.default_policy = policy_name;
    p.default_policy_options = colon ? colon + 1 : NULL;
    /* The probes and the scrape stay open: a load balancer or Prometheus need no key. */
    static const char *const open_paths[] = {"/health", "/metrics", NULL};
    if (api_key && !*api_key) api_key = NULL;
    p.http.api_key = api_key;
    p.http.open_paths = open_paths;

    char def[4096], copy[4096], id[256];
    if (!model_path) model_path = cli_default_model(def, sizeof def);
    if (!model_name) {
        snprintf(copy, sizeof copy, "%s", model_path); /* basename may write to its argument */
        snprintf(id, sizeof id, "%s", basename(copy));
        size_t l = strlen(id);
        if (l > 5 && !strcmp(id + l - 5, ".gguf")) id[l - 5] = '\0';
        model_name = id;
    }
    p.model_id = model_name;
    p.loop.model_path = model_path;

    specd_log_set(log_to_stderr, NULL, SPECD_LOG_WARN);
    specd_error err;
    specd_model *model = NULL;
    specd_tokenizer *tok = NULL;
    if (specd_model_create(model_path, &model, &err) != SPECD_OK) {
        fprintf(stderr, "specd serve: cannot load model %s: %s\n", model_path, err.message);
        return 1;
    }
    if (specd_tokenizer_create_from_gguf(specd_model_gguf(model), &tok, &err) != SPECD_OK) {
        fprintf(stderr, "specd serve: tokenizer of %s: %s\n", model_path, err.message);
        specd_model_destroy(model);
        return 1;
    }
    /* the default policy's artifacts (the loop adds them to each request): one it needs and the
     * model has none of is refused now, not at the first request */
    uint64_t fp = 0;
    char opts[8192];
    if (specd_target_fingerprint_of_gguf(specd_model_gguf(model), &fp, &err) != SPECD_OK ||
        specd_policy_default_options(policy_name, fp, p.default_policy_options, opts, sizeof opts,
                                     &err) != SPECD_OK) {
        fprintf(stderr, "specd serve: %s\n", err.message);
        specd_tokenizer_destroy(tok);
        specd_model_destroy(model);
        return 1;
    }
    /* Signals are taken by sigwait below: block them before any thread starts, so every
     * thread inherits the mask and none is interrupted. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that left is noticed by send(), not killed by it */
    serve_server *srv = NULL;
    if (serve_server_create(model, tok, &p, &srv, &err) != SPECD_OK) {
        fprintf(stderr, "specd serve: %s\n", err.message);
        specd_tokenizer_destroy(tok);
        specd_model_destroy(model);
        return 1;
    }
    char device[32];
    fprintf(stderr,
            "specd serve: listening on http://%s:%d (model %s, %d slots, policy %s%s%s%s, "
            "device %s, numerics %s)\n",
            p.http.host, serve_server_port(srv), model_name, p.loop.max_seqs, policy_name,
            colon ? ":" : "", colon ? colon + 1 : "", api_key ? ", API key required" : "",
            cli_device_label(p.loop.device, p.loop.device_index, device, sizeof device),
            cli_numerics_label());
    fflush(stderr);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "specd serve: %s: draining (up to %ld ms)\n", strsignal(sig), grace_ms);
    serve_server_drain(srv, (int)grace_ms);
    serve_server_destroy(srv);
    specd_tokenizer_destroy(tok);
    specd_model_destroy(model);
    fprintf(stderr, "specd serve: stopped\n");
    return 0;
}
