/* specd-gen-data: self-generated training data for MRP heads (and the adapters trained on the same
 * shards; the format is described in gen_shard.h, written by gen_shard.c).
 *
 * The base model continues ChatML-wrapped prompts with its own sampling, and every position's
 * final hidden state (after the output norm: what the tied head multiplies) is kept beside its
 * token. Speed comes from batching: B sequences live in one context and each step is ONE extend
 * carrying one row per decoding sequence (plus the whole prompt of sequences that just started),
 * so the multi-row kernels read the weights once per step instead of once per token. A finished
 * slot takes the next job at once.
 *
 * Jobs are numbered g = 0, 1, 2, ...: prompt g % P, repetition g / P, seed base_seed + g. The
 * first repetition of every greedy_every-th prompt is greedy (T 0), every other job uses the
 * sampling flags (the CLI's defaults). A token at absolute position n is drawn with the keyed
 * sampler under {seed, sequence 0, position n}: the key `specd generate --seed S` uses, and the
 * runtime is batch invariant, so a job's tokens are what `specd generate` prints for its prompt.
 *
 * The token that ends a sequence (an end-of-generation token, or the max_new-th) is still run
 * through the model for its hidden row, so every stored token has one. */
#include "kernels/cpu/fp16.h"
#include "specd/runtime.h"
#include "specd/sampling.h"
#include "specd/tokenizer.h"
#include "tools/train/gen_shard.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct options {
    const char *model, *prompts, *out, *model_sha256;
    int32_t batch, max_new, threads, top_k, greedy_every, prefill_budget, text;
    float temp, top_p, min_p;
    int64_t start, count, max_tokens;
    double max_seconds;
    uint64_t base_seed;
} options;

typedef struct prompt_set {
    char **text;
    int32_t **ids;
    int32_t *n_ids;
    int64_t n;
} prompt_set;

enum { SLOT_EMPTY = 0, SLOT_RUN, SLOT_FINAL };

typedef struct slot {
    int state;
    int64_t job, prompt_id;
    uint64_t seed;
    float temp;
    int32_t n_prompt, n_tok, n_fed; /* n_fed rows are in the KV cache with hidden kept */
    int32_t *tokens;
    uint16_t *hidden;
    const char *stop;
} slot;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: specd-gen-data -m MODEL --prompts FILE -o DIR [options]\n"
            "  -b, --batch B         sequences decoded together (default 32)\n"
            "  -n, --max-new N       most new tokens per sequence (default 256)\n"
            "  -t, --threads T       threads (default 0 = online cores)\n"
            "  --start J             first job (default 0)\n"
            "  --count C             jobs to run at most (default: until a limit below)\n"
            "  --max-tokens N        admit no new job once N tokens are written or in flight\n"
            "  --max-seconds S       admit no new job after S seconds\n"
            "  --seed S              base seed: job g samples with seed S + g (default 1)\n"
            "  --temp --top-k --top-p --min-p  sampling (default 0.8 40 0.95 0.05)\n"
            "  --greedy-every K      repetition 0 of every K-th prompt is greedy (default 4; 0 = none)\n"
            "  --model-sha256 HEX    recorded in seqs.json\n"
            "  --text                also record each continuation's text in seqs.json\n");
}

static int parse_args(int argc, char **argv, options *o) {
    *o = (options){.batch = 32, .max_new = 256, .top_k = 40, .greedy_every = 4, .temp = 0.8f,
                   .top_p = 0.95f, .min_p = 0.05f, .count = -1, .max_tokens = -1,
                   .max_seconds = -1, .base_seed = 1, .prefill_budget = 512};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--text")) {
            o->text = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gen-data: unknown or incomplete option '%s'\n", a);
            return 1;
        }
        const char *v = argv[++i];
        char *end = NULL;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->model = v;
            continue;
        }
        if (!strcmp(a, "--prompts")) {
            o->prompts = v;
            continue;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            o->out = v;
            continue;
        }
        if (!strcmp(a, "--model-sha256")) {
            o->model_sha256 = v;
            continue;
        }
        if (!strcmp(a, "-b") || !strcmp(a, "--batch")) o->batch = (int32_t)strtol(v, &end, 10);
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-new")) o->max_new = (int32_t)strtol(v, &end, 10);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) o->threads = (int32_t)strtol(v, &end, 10);
        else if (!strcmp(a, "--top-k")) o->top_k = (int32_t)strtol(v, &end, 10);
        else if (!strcmp(a, "--greedy-every")) o->greedy_every = (int32_t)strtol(v, &end, 10);
        else if (!strcmp(a, "--start")) o->start = strtoll(v, &end, 10);
        else if (!strcmp(a, "--count")) o->count = strtoll(v, &end, 10);
        else if (!strcmp(a, "--max-tokens")) o->max_tokens = strtoll(v, &end, 10);
        else if (!strcmp(a, "--max-seconds")) o->max_seconds = strtod(v, &end);
        else if (!strcmp(a, "--seed")) o->base_seed = strtoull(v, &end, 10);
        else if (!strcmp(a, "--temp")) o->temp = strtof(v, &end);
        else if (!strcmp(a, "--top-p")) o->top_p = strtof(v, &end);
        else if (!strcmp(a, "--min-p")) o->min_p = strtof(v, &end);
        else {
            fprintf(stderr, "gen-data: unknown option '%s'\n", a);
            return 1;
        }
        if (!end || *end || end == v) {
            fprintf(stderr, "gen-data: bad value '%s' for %s\n", v, a);
            return 1;
        }
    }
    if (!o->model || !o->prompts || !o->out) {
        fprintf(stderr, "gen-data: -m, --prompts and -o are required\n");
        return 1;
    }
    if (o->batch < 1 || o->batch > 1024 || o->max_new < 1 || o->threads < 0 || o->start < 0 ||
        o->greedy_every < 0 || o->base_seed > (1ull << 52)) {
        fprintf(stderr, "gen-data: a value is out of range (batch 1..1024, max-new >= 1, "
                        "threads >= 0, start >= 0, seed < 2^52)\n");
        return 1;
    }
    return 0;
}

/* Reads one prompt per non-empty line and encodes each in the chat template, as
 * `specd generate` does (cli/cli_common.c cli_encode_prompt). */
static int load_prompts(const char *path, const specd_tokenizer *tok, prompt_set *ps) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "gen-data: cannot read %s\n", path);
        return 1;
    }
    memset(ps, 0, sizeof *ps);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    int64_t room = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        if (ps->n == room) {
            room = room ? room * 2 : 256;
            ps->text = realloc(ps->text, (size_t)room * sizeof *ps->text);
            ps->ids = realloc(ps->ids, (size_t)room * sizeof *ps->ids);
            ps->n_ids = realloc(ps->n_ids, (size_t)room * sizeof *ps->n_ids);
            if (!ps->text || !ps->ids || !ps->n_ids) abort();
        }
        specd_error err;
        specd_chat_message m = {.role = "user", .content = line};
        size_t need = 0, n_ids = 0;
        specd_tokenizer_apply_chat_template(tok, &m, 1, 1, NULL, 0, &need, NULL);
        char *tpl = malloc(need + 1);
        uint32_t flags = SPECD_TOKENIZE_ADD_SPECIAL | SPECD_TOKENIZE_PARSE_SPECIAL;
        if (!tpl ||
            specd_tokenizer_apply_chat_template(tok, &m, 1, 1, tpl, need, &need, &err) != SPECD_OK) {
            fprintf(stderr, "gen-data: chat template: %s\n", tpl ? err.message : "no memory");
            rc = 1;
        } else {
            specd_tokenizer_encode(tok, tpl, need, flags, NULL, 0, &n_ids, NULL);
            int32_t *ids = malloc((n_ids ? n_ids : 1) * sizeof *ids);
            if (!ids || specd_tokenizer_encode(tok, tpl, need, flags, ids, n_ids, &n_ids, &err)) {
                fprintf(stderr, "gen-data: cannot encode prompt %lld\n", (long long)ps->n);
                free(ids);
                rc = 1;
            } else {
                ps->text[ps->n] = strdup(line);
                ps->ids[ps->n] = ids;
                ps->n_ids[ps->n] = (int32_t)n_ids;
                ps->n++;
            }
        }
        free(tpl);
    }
    free(line);
    fclose(f);
    if (!rc && ps->n == 0) {
        fprintf(stderr, "gen-data: %s holds no prompt\n", path);
        rc = 1;
    }
    return rc;
}

static void free_prompts(prompt_set *ps) {
    for (int64_t i = 0; i < ps->n; i++) {
        free(ps->text[i]);
        free(ps->ids[i]);
    }
    free(ps->text);
    free(ps->ids);
    free(ps->n_ids);
}

/* The continuation's text (without control tokens), for --text; caller frees. */
static char *continuation_text(const specd_tokenizer *tok, const slot *s) {
    size_t need = 0;
    const int32_t *ids = s->tokens + s->n_prompt;
    size_t n = (size_t)(s->n_tok - s->n_prompt);
    specd_tokenizer_decode(tok, ids, n, 0, NULL, 0, &need, NULL);
    char *buf = malloc(need + 1);
    if (!buf) return NULL;
    if (specd_tokenizer_decode(tok, ids, n, 0, buf, need, &need, NULL) != SPECD_OK) need = 0;
    buf[need] = 0;
    return buf;
}

static cJSON *make_recipe(const options *o, int64_t n_prompts, int64_t next_job, int64_t n_seqs,
                          double secs) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "generator", "specd-gen-data");
    cJSON_AddStringToObject(r, "model", o->model);
    cJSON_AddStringToObject(r, "prompts", o->prompts);
    cJSON_AddNumberToObject(r, "n_prompts", (double)n_prompts);
    cJSON_AddStringToObject(r, "prompt_format", "ChatML via the model's chat template (default "
                                                "system prompt), one user turn, generation prompt");
    cJSON_AddStringToObject(r, "jobs", "job g: prompt_id g % n_prompts, repetition g / n_prompts, "
                                       "seed base_seed + g; jobs [job_start, next_job) are here");
    cJSON_AddNumberToObject(r, "job_start", (double)o->start);
    cJSON_AddNumberToObject(r, "next_job", (double)next_job);
    cJSON_AddNumberToObject(r, "base_seed", (double)o->base_seed);
    cJSON_AddNumberToObject(r, "greedy_every", o->greedy_every);
    cJSON_AddStringToObject(r, "greedy_rule", "repetition 0 of prompt ids divisible by "
                                              "greedy_every runs at temp 0 (greedy)");
    cJSON *smp = cJSON_AddObjectToObject(r, "sampling");
    cJSON_AddNumberToObject(smp, "temp", o->temp);
    cJSON_AddNumberToObject(smp, "top_k", o->top_k);
    cJSON_AddNumberToObject(smp, "top_p", o->top_p);
    cJSON_AddNumberToObject(smp, "min_p", o->min_p);
    cJSON_AddStringToObject(smp, "key", "specd keyed sampling {seed, sequence 0, position = "
                                        "absolute position}: as `specd generate --seed`");
    cJSON_AddNumberToObject(r, "max_new", o->max_new);
    cJSON_AddStringToObject(r, "stop", "an end-of-generation token (kept, with its hidden row) "
                                       "or max_new new tokens");
    cJSON_AddStringToObject(r, "hidden", "final hidden state after the output norm, F16");
    cJSON_AddNumberToObject(r, "batch", o->batch);
    cJSON_AddNumberToObject(r, "threads", o->threads);
    cJSON_AddNumberToObject(r, "n_sequences", (double)n_seqs);
    cJSON_AddNumberToObject(r, "seconds", secs);
    return r;
}

typedef struct gen {
    options o;
    specd_model *model;
    specd_tokenizer *tok;
    specd_context *ctx;
    specd_sampler *sampler, *greedy;
    prompt_set ps;
    slot *slots;
    int32_t n_embd, n_vocab, n_ctx, n_batch;
    int32_t *row_of; /* per slot: first row of its tokens in this step's extend */
    specd_seq_batch *batches;
    float *logits, *hidden;
    gen_shard shard;
    int64_t next_job, end_job, admitted_tokens, n_done;
    double t0;
} gen;

/* Starts job g in slot s, or returns 0 when the job must be skipped (prompt too long). */
static int start_job(gen *g, int32_t si, int64_t job) {
    slot *s = &g->slots[si];
    int64_t p = job % g->ps.n, rep = job / g->ps.n;
    int32_t n = g->ps.n_ids[p];
    if (n + g->o.max_new > g->n_ctx || n > g->o.prefill_budget) {
        fprintf(stderr, "gen-data: prompt %lld is too long (%d tokens); skipped\n", (long long)p, n);
        return 0;
    }
    specd_context_kv_truncate(g->ctx, si, 0, NULL);
    s->state = SLOT_RUN;
    s->job = job;
    s->prompt_id = p;
    s->seed = g->o.base_seed + (uint64_t)job;
    s->temp = (rep == 0 && g->o.greedy_every > 0 && p % g->o.greedy_every == 0) ? 0.0f : g->o.temp;
    memcpy(s->tokens, g->ps.ids[p], (size_t)n * sizeof(int32_t));
    s->n_prompt = s->n_tok = n;
    s->n_fed = 0;
    s->stop = "max";
    g->admitted_tokens += n + g->o.max_new; /* an upper bound: the budget is never overrun */
    return 1;
}

static int admission_open(const gen *g) {
    if (g->next_job >= g->end_job) return 0;
    if (g->o.max_tokens >= 0 && g->shard.n_tokens + g->admitted_tokens >= g->o.max_tokens) return 0;
    if (g->o.max_seconds >= 0 && now_s() - g->t0 >= g->o.max_seconds) return 0;
    return 1;
}

static int finish_slot(gen *g, slot *s) {
    char *text = g->o.text ? continuation_text(g->tok, s) : NULL;
    gen_seq_record r = {.tokens = s->tokens, .hidden = s->hidden, .n_tokens = s->n_tok,
                        .n_prompt = s->n_prompt, .job = s->job, .prompt_id = s->prompt_id,
                        .seed = s->seed, .temp = s->temp, .stop = s->stop, .text = text};
    int rc = gen_shard_append(&g->shard, &r);
    free(text);
    g->admitted_tokens -= s->n_prompt + g->o.max_new;
    s->state = SLOT_EMPTY;
    g->n_done++;
    return rc;
}

/* One extend over every slot with tokens to feed; then samples the next token of each running
 * slot. Returns 1 when nothing was left to run, -1 on error. */
static int step(gen *g) {
    int32_t B = g->o.batch, n_b = 0, rows = 0, prefill = 0;
    for (int32_t i = 0; i < B; i++) {
        slot *s = &g->slots[i];
        while (s->state == SLOT_EMPTY && admission_open(g)) {
            /* keep one step's prompt rows bounded: the scratch is sized for that */
            if (prefill > 0 && prefill + g->ps.n_ids[g->next_job % g->ps.n] > g->o.prefill_budget)
                break;
            if (start_job(g, i, g->next_job++)) prefill += s->n_prompt;
        }
        if (s->state == SLOT_EMPTY) continue;
        g->row_of[i] = rows;
        g->batches[n_b++] = (specd_seq_batch){.seq = i, .n_tokens = s->n_tok - s->n_fed,
                                              .tokens = s->tokens + s->n_fed};
        rows += s->n_tok - s->n_fed;
    }
    if (n_b == 0) return 1;
    specd_extend_out out = {.n_rows = rows, .logits = g->logits, .hidden = g->hidden};
    specd_error err;
    if (specd_context_extend(g->ctx, g->batches, n_b, &out, &err) != SPECD_OK) {
        fprintf(stderr, "gen-data: extend: %s\n", err.message);
        return -1;
    }
    for (int32_t b = 0; b < n_b; b++) {
        int32_t i = g->batches[b].seq, n = g->batches[b].n_tokens, r0 = g->row_of[i];
        slot *s = &g->slots[i];
        const float *h = g->hidden + (size_t)r0 * (size_t)g->n_embd;
        uint16_t *dst = s->hidden + (size_t)s->n_fed * (size_t)g->n_embd;
        for (size_t k = 0; k < (size_t)n * (size_t)g->n_embd; k++) dst[k] = specd_fp32_to_fp16(h[k]);
        s->n_fed += n;
        if (s->state == SLOT_FINAL) {
            if (finish_slot(g, s)) return -1;
            continue;
        }
        const float *lg = g->logits + (size_t)(r0 + n - 1) * (size_t)g->n_vocab;
        specd_sample_key key = {.seed = s->seed, .sequence = 0, .position = (uint32_t)s->n_tok};
        int32_t tok;
        specd_sampler *smp = s->temp > 0 ? g->sampler : g->greedy;
        if (specd_sampler_sample(smp, lg, g->n_vocab, key, &tok, &err) != SPECD_OK) {
            fprintf(stderr, "gen-data: job %lld: sampling: %s\n", (long long)s->job, err.message);
            return -1;
        }
        s->tokens[s->n_tok++] = tok;
        if (specd_tokenizer_is_eog(g->tok, tok)) {
            s->stop = "eog";
            s->state = SLOT_FINAL;
        } else if (s->n_tok - s->n_prompt >= g->o.max_new) {
            s->state = SLOT_FINAL;
        }
    }
    return 0;
}

static int gen_open(gen *g) {
    specd_error err;
    if (specd_model_create(g->o.model, &g->model, &err) != SPECD_OK ||
        specd_tokenizer_create_from_gguf(specd_model_gguf(g->model), &g->tok, &err) != SPECD_OK) {
        fprintf(stderr, "gen-data: %s: %s\n", g->o.model, err.message);
        return 1;
    }
    const specd_model_info *mi = specd_model_get_info(g->model);
    g->n_embd = mi->n_embd;
    g->n_vocab = mi->n_vocab;
    if (load_prompts(g->o.prompts, g->tok, &g->ps)) return 1;
    int32_t max_prompt = 0;
    int64_t n_fit = 0;
    for (int64_t i = 0; i < g->ps.n; i++) {
        if (g->ps.n_ids[i] > max_prompt) max_prompt = g->ps.n_ids[i];
        n_fit += g->ps.n_ids[i] <= g->o.prefill_budget;
    }
    /* without one prompt that fits, admission would skip jobs forever when no count is given */
    if (n_fit == 0) {
        fprintf(stderr, "gen-data: every prompt in %s is longer than the prefill budget (%d tokens)\n",
                g->o.prompts, g->o.prefill_budget);
        return 1;
    }
    if (max_prompt > g->o.prefill_budget) max_prompt = g->o.prefill_budget;
    g->n_ctx = max_prompt + g->o.max_new + 1;
    g->n_batch = g->o.batch + g->o.prefill_budget;
    specd_context_params cp = specd_context_default_params();
    cp.n_seq = g->o.batch;
    cp.n_ctx = g->n_ctx;
    cp.n_batch = g->n_batch;
    cp.n_threads = g->o.threads;
    if (specd_context_create(g->model, &cp, &g->ctx, &err) != SPECD_OK) {
        fprintf(stderr, "gen-data: context: %s\n", err.message);
        return 1;
    }
    specd_sampling_params sp = specd_sampling_default_params();
    sp.temperature = g->o.temp;
    sp.top_k = g->o.top_k;
    sp.top_p = g->o.top_p;
    sp.min_p = g->o.min_p;
    specd_sampling_params gp = sp;
    gp.temperature = 0.0f;
    if (specd_sampler_create(&sp, g->n_vocab, &g->sampler, &err) != SPECD_OK ||
        specd_sampler_create(&gp, g->n_vocab, &g->greedy, &err) != SPECD_OK) {
        fprintf(stderr, "gen-data: sampling: %s\n", err.message);
        return 1;
    }
    g->slots = calloc((size_t)g->o.batch, sizeof *g->slots);
    g->row_of = calloc((size_t)g->o.batch, sizeof *g->row_of);
    g->batches = calloc((size_t)g->o.batch, sizeof *g->batches);
    g->logits = malloc((size_t)g->n_batch * (size_t)g->n_vocab * sizeof(float));
    g->hidden = malloc((size_t)g->n_batch * (size_t)g->n_embd * sizeof(float));
    if (!g->slots || !g->row_of || !g->batches || !g->logits || !g->hidden) return 1;
    for (int32_t i = 0; i < g->o.batch; i++) {
        g->slots[i].tokens = malloc((size_t)g->n_ctx * sizeof(int32_t));
        g->slots[i].hidden = malloc((size_t)g->n_ctx * (size_t)g->n_embd * sizeof(uint16_t));
        if (!g->slots[i].tokens || !g->slots[i].hidden) return 1;
    }
    g->next_job = g->o.start;
    g->end_job = g->o.count >= 0 ? g->o.start + g->o.count : INT64_MAX;
    return gen_shard_open(&g->shard, g->o.out, g->n_embd, g->o.model_sha256);
}

static void gen_close(gen *g) {
    gen_shard_close(&g->shard);
    if (g->slots)
        for (int32_t i = 0; i < g->o.batch; i++) {
            free(g->slots[i].tokens);
            free(g->slots[i].hidden);
        }
    free(g->slots);
    free(g->row_of);
    free(g->batches);
    free(g->logits);
    free(g->hidden);
    free_prompts(&g->ps);
    specd_sampler_destroy(g->sampler);
    specd_sampler_destroy(g->greedy);
    specd_context_destroy(g->ctx);
    specd_tokenizer_destroy(g->tok);
    specd_model_destroy(g->model);
}

int main(int argc, char **argv) {
    gen g;
    memset(&g, 0, sizeof g);
    if (parse_args(argc, argv, &g.o)) {
        usage(stderr);
        return 2;
    }
    int rc = gen_open(&g);
    g.t0 = now_s();
    double last = g.t0;
    int st = 0;
    while (!rc && (st = step(&g)) == 0) {
        double t = now_s();
        if (t - last >= 10.0) {
            fprintf(stderr, "gen-data: %lld tokens, %lld sequences, %.0f tok/s\n",
                    (long long)g.shard.n_tokens, (long long)g.n_done,
                    (double)g.shard.n_tokens / (t - g.t0));
            last = t;
        }
    }
    if (st < 0) rc = 1;
    double secs = now_s() - g.t0;
    if (!rc)
        rc = gen_shard_finish(&g.shard, make_recipe(&g.o, g.ps.n, g.next_job, g.n_done, secs));
    if (!rc)
        printf("%s: %lld tokens, %lld sequences (jobs %lld..%lld), %.1f s, %.1f tok/s, next_job "
               "%lld\n",
               g.o.out, (long long)g.shard.n_tokens, (long long)g.n_done, (long long)g.o.start,
               (long long)g.next_job - 1, secs, (double)g.shard.n_tokens / secs,
               (long long)g.next_job);
    gen_close(&g);
    return rc ? 1 : 0;
}
