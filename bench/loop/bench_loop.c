/* The stationary batch loop (specd/spec_loop.h) under concurrency, in-process: for each
 * concurrency C (a loop of C slots) max(R x C, prompts) requests on the prompts file's lines
 * (repeated to fill, each request its own stream key), all submitted at once and run until the
 * last one retires (R = 2: as requests finish, queued ones take their slots, so the loop stays
 * near C busy slots for most of the run), first with policy none (the anchor), then with each
 * policy named, the guard on. Prints per (C, policy): aggregate tokens/s, its ratio to none at the
 * same C (same requests, run right before), tokens per target forward (per request: emitted /
 * steps, summed), acceptance, the loop's extends and tokens per extend, the forwards' share of the
 * steps' time, and how many requests emitted exactly the tokens of their none run (lossless under
 * greedy and coupled sampling: anything less is a bug).
 *
 * With -k K, K rounds run the policies in turn and each keeps its fastest round (identical counts
 * every round).
 *
 * usage: bench_loop -m MODEL -p PROMPTS.txt [-n TOKENS] [-t THREADS] [-c 1,4,16,64] [-r R] [-k K]
 *                   [--temp T] [--seed S] [--max-draft K] [--n-batch B] [POLICY[:OPTIONS]...]
 * (default policies: ngram). Exit 1 when a request differs from its none run. */
#include "specd/spec_loop.h"
#include "specd/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_PROMPTS = 256, MAX_POLICIES = 8, MAX_CONC = 8 };

typedef struct request {
    int32_t *out;
    int32_t n_out;
    int done;
    specd_status status;
    specd_seq_stats stats;
} request;

typedef struct bench {
    const char *model_path;
    specd_model *model;
    specd_tokenizer *tok;
    int32_t *prompt[MAX_PROMPTS];
    int64_t n_prompt[MAX_PROMPTS];
    int n_prompts;
    int32_t max_prompt;
    int32_t n_gen, n_threads, max_draft, n_batch, per_slot, rounds;
    float temp;
    uint64_t seed;
    int32_t stop[16];
    int32_t n_stop;
} bench;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void on_event(const specd_loop_event *ev, void *user) {
    request *r = user;
    memcpy(r->out + r->n_out, ev->tokens, sizeof(int32_t) * (size_t)ev->n_tokens);
    r->n_out += ev->n_tokens;
    if (ev->done) {
        r->done = 1;
        r->status = ev->status;
        r->stats = *ev->stats;
        if (ev->status != SPECD_OK)
            fprintf(stderr, "request %lld: %s: %s\n", (long long)ev->request,
                    specd_status_name(ev->status), ev->message);
    }
}

static int encode(bench *b, const char *text) {
    specd_error err;
    specd_chat_message m = {.role = "user", .content = text};
    size_t need = 0;
    specd_tokenizer_apply_chat_template(b->tok, &m, 1, 1, NULL, 0, &need, NULL);
    char *t = malloc(need + 1);
    if (!t || specd_tokenizer_apply_chat_template(b->tok, &m, 1, 1, t, need, &need, &err)) {
        free(t);
        return fprintf(stderr, "chat template failed\n"), -1;
    }
    uint32_t flags = SPECD_TOKENIZE_ADD_SPECIAL | SPECD_TOKENIZE_PARSE_SPECIAL;
    size_t n = 0;
    specd_tokenizer_encode(b->tok, t, need, flags, NULL, 0, &n, NULL);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids || n == 0 || specd_tokenizer_encode(b->tok, t, need, flags, ids, n, &n, &err)) {
        free(t);
        free(ids);
        return fprintf(stderr, "cannot encode a prompt\n"), -1;
    }
    free(t);
    b->prompt[b->n_prompts] = ids;
    b->n_prompt[b->n_prompts++] = (int64_t)n;
    if ((int32_t)n > b->max_prompt) b->max_prompt = (int32_t)n;
    return 0;
}

static int read_prompts(bench *b, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return fprintf(stderr, "cannot open %s\n", path), -1;
    static char line[65536];
    while (b->n_prompts < MAX_PROMPTS && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0]) continue;
        if (encode(b, line)) return fclose(f), -1;
    }
    fclose(f);
    return b->n_prompts > 0 ? 0 : -1;
}

typedef struct result {
    double seconds, tok_s, tpf, accept, fwd_share;
    int64_t emitted, forwards, tokens_run;
    int identical, compared;
} result;

/* Runs n_req requests through a loop of conc slots under policy; outputs go to reqs[i].out. */
static int run(bench *b, int conc, int n_req, const char *policy, const char *options,
               request *reqs, result *res) {
    specd_loop_params lp = specd_loop_default_params();
    lp.max_seqs = conc;
    lp.max_queue = n_req;
    lp.max_draft = b->max_draft;
    lp.n_ctx = b->max_prompt + b->n_gen + 2 * b->max_draft + 1;
    lp.n_batch = b->n_batch;
    lp.n_threads = b->n_threads;
    lp.model_path = b->model_path;
    specd_loop *loop;
    specd_error err;
    if (specd_loop_create(b->model, &lp, &loop, &err) != SPECD_OK)
        return fprintf(stderr, "loop: %s\n", err.message), -1;
    double t0 = now_s();
    for (int i = 0; i < n_req; i++) {
        specd_seq_params p = specd_seq_default_params();
        p.policy = policy;
        p.policy_options = options;
        p.sampling.temperature = b->temp;
        p.seed = b->seed;
        p.stream_key = 0x10000000000ULL + (uint64_t)i;
        p.max_tokens = b->n_gen;
        p.adaptive = 1;
        p.stop_tokens = b->stop;
        p.n_stop_tokens = b->n_stop;
        reqs[i].n_out = 0;
        reqs[i].done = 0;
        int pr = i % b->n_prompts;
        if (specd_loop_submit(loop, b->prompt[pr], b->n_prompt[pr], &p, on_event, &reqs[i], NULL,
                              &err) != SPECD_OK) {
            specd_loop_destroy(loop);
            return fprintf(stderr, "submit (%s): %s\n", policy, err.message), -1;
        }
    }
    while (specd_loop_n_running(loop) + specd_loop_n_queued(loop) > 0)
        if (specd_loop_step(loop, NULL, &err) != SPECD_OK) {
            specd_loop_destroy(loop);
            return fprintf(stderr, "step (%s): %s\n", policy, err.message), -1;
        }
    double t1 = now_s();
    specd_loop_stats ls;
    specd_loop_get_stats(loop, &ls);
    specd_loop_destroy(loop);
    memset(res, 0, sizeof *res);
    double tpf = 0;
    for (int i = 0; i < n_req; i++) {
        if (!reqs[i].done || reqs[i].status != SPECD_OK) return -1;
        res->emitted += reqs[i].n_out;
        tpf += reqs[i].stats.n_steps > 0
                   ? (double)reqs[i].stats.n_emitted / (double)reqs[i].stats.n_steps
                   : 0.0;
    }
    res->seconds = t1 - t0;
    res->tok_s = (double)res->emitted / res->seconds;
    res->tpf = tpf / n_req;
    res->accept = ls.n_draft_tokens > 0 ? (double)ls.n_accepted / (double)ls.n_draft_tokens : 0;
    res->forwards = ls.n_forwards;
    res->tokens_run = ls.n_tokens_run;
    res->fwd_share = ls.step_ns ? (double)ls.forward_ns / (double)ls.step_ns : 0;
    return 0;
}

static int parse_conc(const char *s, int *conc) {
    int n = 0;
    const char *p = s;
    while (*p && n < MAX_CONC) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 256) return -1;
        conc[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return *p ? -1 : n; /* more levels than MAX_CONC */
}

int main(int argc, char **argv) {
    bench b = {.n_gen = 32,
               .n_threads = 0,
               .max_draft = 8,
               .n_batch = 512,
               .per_slot = 2,
               .rounds = 1,
               .temp = 0.0f,
               .seed = 1};
    const char *prompts_path = NULL;
    int conc[MAX_CONC] = {1, 4, 16, 64}, n_conc = 4;
    char *pol[MAX_POLICIES], *opt[MAX_POLICIES];
    int n_pol = 1;
    pol[0] = "none";
    opt[0] = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v)
            b.model_path = argv[++i];
        else if (!strcmp(a, "-p") && v)
            prompts_path = argv[++i];
        else if (!strcmp(a, "-n") && v)
            b.n_gen = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && v)
            b.n_threads = atoi(argv[++i]);
        else if (!strcmp(a, "-r") && v)
            b.per_slot = atoi(argv[++i]);
        else if (!strcmp(a, "-k") && v)
            b.rounds = atoi(argv[++i]);
        else if (!strcmp(a, "-c") && v) {
            if ((n_conc = parse_conc(argv[++i], conc)) < 1) return fprintf(stderr, "bad -c\n"), 2;
        } else if (!strcmp(a, "--temp") && v)
            b.temp = (float)atof(argv[++i]);
        else if (!strcmp(a, "--seed") && v)
            b.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--max-draft") && v)
            b.max_draft = atoi(argv[++i]);
        else if (!strcmp(a, "--n-batch") && v)
            b.n_batch = atoi(argv[++i]);
        else if (a[0] != '-' && n_pol < MAX_POLICIES) {
            pol[n_pol] = argv[i];
            char *colon = strchr(argv[i], ':');
            opt[n_pol] = colon ? colon + 1 : NULL;
            if (colon) *colon = '\0';
            n_pol++;
        } else {
            fprintf(
                stderr,
                "usage: %s -m MODEL -p PROMPTS [-n N] [-t THREADS] [-c 1,4,16,64] [-r R] [-k K] "
                "[--temp T] [--seed S] [--max-draft K] [--n-batch B] "
                "[POLICY[:OPTIONS]...]\n",
                argv[0]);
            return 2;
        }
    }
    if (n_pol == 1) pol[n_pol] = "ngram", opt[n_pol++] = NULL;
    if (!b.model_path || !prompts_path || b.n_gen < 1 || b.per_slot < 1 || b.rounds < 1)
        return fprintf(stderr, "need -m and -p\n"), 2;
    specd_error err;
    if (specd_model_create(b.model_path, &b.model, &err) != SPECD_OK ||
        specd_tokenizer_create_from_gguf(specd_model_gguf(b.model), &b.tok, &err) != SPECD_OK)
        return fprintf(stderr, "model: %s\n", err.message), 1;
    if (read_prompts(&b, prompts_path)) return 1;
    for (int32_t id = 0; id < specd_tokenizer_vocab_size(b.tok) && b.n_stop < 16; id++)
        if (specd_tokenizer_is_eog(b.tok, id)) b.stop[b.n_stop++] = id;

    int max_req = b.n_prompts;
    for (int c = 0; c < n_conc; c++)
        max_req = conc[c] * b.per_slot > max_req ? conc[c] * b.per_slot : max_req;
    request *reqs[MAX_POLICIES];
    for (int p = 0; p < n_pol; p++) {
        reqs[p] = calloc((size_t)max_req, sizeof(request));
        for (int i = 0; i < max_req; i++)
            reqs[p][i].out = calloc((size_t)b.n_gen, sizeof(int32_t));
    }
    result warm;
    run(&b, 1, 1, "none", NULL, reqs[0], &warm); /* maps the weights in: not timed */

    printf("%d prompts from %s, %d tokens each, T %.2f, %d threads, guard on, best of %d\n",
           b.n_prompts, prompts_path, b.n_gen, (double)b.temp, b.n_threads, b.rounds);
    printf("%5s %-10s %4s %7s %8s %7s %6s %7s %9s %8s %8s %5s\n", "conc", "policy", "reqs",
           "tokens", "tok/s", "vs_none", "TPF", "accept", "identical", "extends", "tok/ext",
           "fwd%");
    int all_identical = 1;
    for (int c = 0; c < n_conc; c++) {
        int n_req = conc[c] * b.per_slot > b.n_prompts ? conc[c] * b.per_slot : b.n_prompts;
        result best[MAX_POLICIES];
        /* rounds alternate the policies, so each sees the machine's load of the same minutes;
         * each keeps its fastest round (the one least disturbed by other work) */
        for (int k = 0; k < b.rounds; k++)
            for (int p = 0; p < n_pol; p++) {
                result r;
                if (run(&b, conc[c], n_req, pol[p], opt[p], reqs[p], &r)) return 1;
                int same = 0;
                for (int i = 0; i < n_req; i++)
                    same += reqs[p][i].n_out == reqs[0][i].n_out &&
                            !memcmp(reqs[p][i].out, reqs[0][i].out,
                                    sizeof(int32_t) * (size_t)reqs[0][i].n_out);
                if (k == 0 || r.tok_s > best[p].tok_s) {
                    r.identical = k == 0 ? 0 : best[p].identical;
                    r.compared = k == 0 ? 0 : best[p].compared;
                    best[p] = r;
                }
                best[p].identical += same;
                best[p].compared += n_req;
            }
        for (int p = 0; p < n_pol; p++) {
            const result *r = &best[p];
            all_identical &= r->identical == r->compared;
            printf("%5d %-10s %4d %7lld %8.1f %6.2fx %6.2f %7.3f %5d/%-3d %8lld %8.1f %5.1f\n",
                   conc[c], pol[p], n_req, (long long)r->emitted, r->tok_s,
                   r->tok_s / best[0].tok_s, r->tpf, r->accept, r->identical, r->compared,
                   (long long)r->forwards,
                   r->forwards ? (double)r->tokens_run / (double)r->forwards : 0.0,
                   100.0 * r->fwd_share);
        }
        fflush(stdout);
    }
    for (int p = 0; p < n_pol; p++) {
        for (int i = 0; i < max_req; i++)
            free(reqs[p][i].out);
        free(reqs[p]);
    }
    for (int i = 0; i < b.n_prompts; i++)
        free(b.prompt[i]);
    specd_tokenizer_destroy(b.tok);
    specd_model_destroy(b.model);
    return all_identical ? 0 : 1;
}
