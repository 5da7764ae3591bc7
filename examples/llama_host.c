/* llama.cpp as the host engine: llama.cpp runs the target (its llama.h batch API, its KV cache),
 * specd's host API lays out each step and decides which proposals the target accepts.
 *
 * For each prompt the same loop runs twice with the same seed: plainly (policy "none", one row per
 * forward) and speculatively, and the outputs are compared. specd's keyed sampling makes them
 * identical when the target's logits for a position do not depend on how many rows its forward
 * carried. llama.cpp does not promise that (its multi-row matmuls may accumulate in another order
 * than its one-row ones), so where the outputs differ this program says precisely where and why:
 * the first differing token, how far the two logits rows for that position lie apart, and the
 * logit gap between the two candidate tokens in each.
 *
 * A step that needs attention masks or LoRA gates (risd, isd with an adapter) is refused:
 * llama.cpp's batch API has neither per-token visibility rows nor per-row adapters. Drafter-shaped
 * policies (ngram, draft, remote) and isd without an adapter (causal steps) work.
 *
 *   bench/llama/host builds it against the llama.cpp of the llama-cpp-python sdist and runs it.
 *   llama_host MODEL.gguf PROMPTS.txt POLICY [options]
 *     --policy-opts S  --n N (64)  --threads T (2)  --temp T (0)  --seed S (1)  --max-draft K (8)
 *     --no-adaptive
 * Exit: 0 when every output is identical, 3 when some differ (diagnosed), 1 on errors.
 */
#include <llama.h>
#include <specd/spec.h>
#include <specd/tokenizer.h>
#include <specd/gguf.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct host_options {
    const char *model_path, *prompts_path, *policy, *policy_opts;
    int n_predict, n_threads, max_draft, adaptive;
    float temperature;
    uint64_t seed;
} host_options;

/* llama.cpp's side: the model, one context, the batch reused by every step. */
typedef struct target {
    struct llama_model *model;
    struct llama_context *ctx;
    struct llama_batch batch;
    int32_t n_vocab, n_batch;
} target;

/* One generation: the tokens, and for each the logits row it was decided from (the trace that
 * explains a divergence). */
typedef struct run_result {
    int32_t *tokens;
    float *rows;
    int64_t n;
    double seconds; /* decode loop, prefill excluded */
    int64_t forwards;
    specd_seq_stats stats;
} run_result;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int specd_fail(const char *what, const specd_error *err) {
    fprintf(stderr, "llama_host: %s: %s: %s\n", what, specd_status_name(err->status), err->message);
    return 1;
}

static int target_open(target *t, const host_options *o) {
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    t->model = llama_model_load_from_file(o->model_path, mp);
    if (!t->model) {
        fprintf(stderr, "llama_host: llama.cpp cannot load %s\n", o->model_path);
        return 1;
    }
    t->n_batch = 512;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 2048;
    cp.n_batch = cp.n_ubatch = (uint32_t)t->n_batch;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = o->n_threads;
    t->ctx = llama_init_from_model(t->model, cp);
    if (!t->ctx) {
        fprintf(stderr, "llama_host: llama.cpp cannot create a context\n");
        return 1;
    }
    t->n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(t->model));
    t->batch = llama_batch_init(t->n_batch, 0, 1);
    return 0;
}

static void target_close(target *t) {
    if (t->ctx) llama_batch_free(t->batch);
    llama_free(t->ctx);
    llama_model_free(t->model);
    llama_backend_free();
}

/* Runs tokens at pos through llama.cpp; rows marked in want get logits. */
static int target_forward(target *t, const int32_t *tokens, const int32_t *pos, int32_t n,
                          const int32_t *rows, int32_t n_rows) {
    if (n > t->n_batch) {
        fprintf(stderr, "llama_host: a step of %d tokens exceeds the batch of %d\n", n, t->n_batch);
        return 1;
    }
    t->batch.n_tokens = n;
    for (int32_t i = 0; i < n; i++) {
        t->batch.token[i] = tokens[i];
        t->batch.pos[i] = pos ? pos[i] : i;
        t->batch.n_seq_id[i] = 1;
        t->batch.seq_id[i][0] = 0;
        t->batch.logits[i] = 0;
    }
    for (int32_t r = 0; r < n_rows; r++) t->batch.logits[rows[r]] = 1;
    int rc = llama_decode(t->ctx, t->batch);
    if (rc != 0) fprintf(stderr, "llama_host: llama_decode failed (%d)\n", rc);
    return rc != 0;
}

static int read_lines(const char *path, char ***out, int *n_out) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "llama_host: cannot open %s\n", path);
        return 1;
    }
    char **v = NULL, *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        char **grown = realloc(v, (size_t)(n + 1) * sizeof *v);
        if (!grown) break;
        v = grown;
        if (!(v[n] = strdup(line))) break;
        n++;
    }
    free(line);
    fclose(f);
    *out = v;
    *n_out = n;
    if (n == 0) fprintf(stderr, "llama_host: %s has no prompts\n", path);
    return n == 0;
}

/* The prompt as the chat template renders it, encoded by specd's tokenizer (the same ids as
 * llama.cpp's tokenizer gives: specd's tokenizer tests hold it to llama.cpp's). */
static int encode_chat(const specd_tokenizer *tok, const char *text, int32_t **ids, int64_t *n) {
    specd_error err;
    specd_chat_message m = {.role = "user", .content = text};
    size_t need = 0;
    specd_tokenizer_apply_chat_template(tok, &m, 1, 1, NULL, 0, &need, &err);
    char *buf = malloc(need + 1);
    size_t got = 0, n_ids = 0;
    if (!buf || specd_tokenizer_apply_chat_template(tok, &m, 1, 1, buf, need, &got, &err)) {
        free(buf);
        return specd_fail("chat template", &err);
    }
    specd_tokenizer_encode(tok, buf, got, SPECD_TOKENIZE_ADD_SPECIAL | SPECD_TOKENIZE_PARSE_SPECIAL, NULL, 0, &n_ids, &err);
    *ids = malloc((n_ids ? n_ids : 1) * sizeof **ids);
    int rc = !*ids || specd_tokenizer_encode(tok, buf, got, SPECD_TOKENIZE_ADD_SPECIAL | SPECD_TOKENIZE_PARSE_SPECIAL, *ids,
                                             n_ids, &n_ids, &err);
    free(buf);
    *n = (int64_t)n_ids;
    return rc ? specd_fail("encode", &err) : 0;
}

/* A step's KV rows beyond the kept prefix leave llama.cpp's cache. Drafter-shaped steps keep a
 * prefix of consecutive positions, which is all llama.cpp's sequence removal can express. */
static int keep_prefix(target *t, const specd_step_layout *lay, const specd_step_outcome *out) {
    for (int32_t i = 0; i < out->n_keep; i++)
        if (out->keep[i] != i) {
            fprintf(stderr, "llama_host: the policy kept a non-prefix set of rows\n");
            return 1;
        }
    if (out->n_keep < lay->n_tokens)
        llama_memory_seq_rm(llama_get_memory(t->ctx), 0, lay->pos[out->n_keep], -1);
    return 0;
}

static int run_one(target *t, specd_spec *spec, const host_options *o, const char *policy,
                   const int32_t *prompt, int64_t n_prompt, const int32_t *stops, int32_t n_stops,
                   run_result *r) {
    specd_error err;
    memset(r, 0, sizeof *r);
    r->tokens = malloc(sizeof(int32_t) * (size_t)o->n_predict);
    r->rows = malloc(sizeof(float) * (size_t)o->n_predict * (size_t)t->n_vocab);
    int32_t max_rows = specd_spec_max_step_rows(spec);
    float *logits = malloc(sizeof(float) * (size_t)max_rows * (size_t)t->n_vocab);
    if (!r->tokens || !r->rows || !logits) {
        free(logits);
        fprintf(stderr, "llama_host: out of memory\n");
        return 1;
    }
    specd_seq_params p = specd_seq_default_params();
    p.policy = policy;
    p.policy_options = strcmp(policy, "none") ? o->policy_opts : NULL;
    p.sampling.temperature = o->temperature;
    p.seed = o->seed;
    p.max_tokens = o->n_predict;
    p.adaptive = o->adaptive;
    p.stop_tokens = stops;
    p.n_stop_tokens = n_stops;
    if (specd_spec_seq_open(spec, 0, prompt, n_prompt, &p, &err)) {
        free(logits);
        return specd_fail("open", &err);
    }
    llama_memory_clear(llama_get_memory(t->ctx), true);
    int rc = n_prompt > 1 ? target_forward(t, prompt, NULL, (int32_t)n_prompt - 1, NULL, 0) : 0;
    double t0 = now_s();
    while (!rc && !specd_spec_seq_done(spec, 0)) {
        specd_step_layout lay;
        specd_step_outcome out;
        if (specd_spec_seq_layout(spec, 0, &lay, &err)) {
            rc = specd_fail("layout", &err);
            break;
        }
        if (lay.visible || lay.lora_gate || lay.input_embd) {
            fprintf(stderr, "llama_host: policy %s lays out steps with %s, which llama.cpp's batch "
                            "API cannot express; use a drafter-shaped policy (ngram, draft)\n",
                    policy, lay.visible     ? "attention masks"
                            : lay.lora_gate ? "LoRA gates"
                                            : "float-vector input rows");
            rc = 1;
            break;
        }
        rc = target_forward(t, lay.tokens, lay.pos, lay.n_tokens, lay.rows, lay.n_rows);
        for (int32_t i = 0; !rc && i < lay.n_rows; i++)
            memcpy(logits + (size_t)i * (size_t)t->n_vocab,
                   llama_get_logits_ith(t->ctx, lay.rows[i]), sizeof(float) * (size_t)t->n_vocab);
        if (rc) break;
        r->forwards++;
        if (specd_spec_seq_verify(spec, 0, logits, &out, &err)) {
            rc = specd_fail("verify", &err);
            break;
        }
        /* emitted token k was decided from row k: the pending token's row, then each accepted
         * proposal's */
        for (int32_t k = 0; k < out.n_emitted && r->n < o->n_predict; k++, r->n++) {
            r->tokens[r->n] = out.emitted[k];
            memcpy(r->rows + (size_t)r->n * (size_t)t->n_vocab,
                   logits + (size_t)(k < lay.n_rows ? k : lay.n_rows - 1) * (size_t)t->n_vocab,
                   sizeof(float) * (size_t)t->n_vocab);
        }
        rc = keep_prefix(t, &lay, &out);
    }
    r->seconds = now_s() - t0;
    if (!rc && specd_spec_seq_stats(spec, 0, &r->stats, &err)) rc = specd_fail("stats", &err);
    specd_spec_seq_close(spec, 0);
    free(logits);
    return rc;
}

static void run_free(run_result *r) {
    free(r->tokens);
    free(r->rows);
}

static void print_piece(const specd_tokenizer *tok, int32_t id) {
    const char *s;
    size_t len;
    specd_error err;
    if (specd_tokenizer_token_to_piece(tok, id, SPECD_DETOKENIZE_RENDER_SPECIAL, &s, &len, &err)) {
        printf("?");
        return;
    }
    putchar('"');
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') printf("\\n");
        else if (c < 0x20) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
}

/* Where and why two runs of one prompt differ, from the logits rows each token was decided by. */
static void explain_divergence(const specd_tokenizer *tok, int32_t n_vocab, const run_result *a,
                               const run_result *b, int64_t d) {
    int64_t same_rows = 0;
    double max_before = 0;
    for (int64_t j = 0; j < d; j++) {
        const float *x = a->rows + (size_t)j * (size_t)n_vocab, *y = b->rows + (size_t)j * (size_t)n_vocab;
        int equal = !memcmp(x, y, sizeof(float) * (size_t)n_vocab);
        same_rows += equal;
        for (int32_t v = 0; !equal && v < n_vocab; v++)
            if (fabs((double)x[v] - y[v]) > max_before) max_before = fabs((double)x[v] - y[v]);
    }
    printf("    first difference at output token %lld: plain ", (long long)d);
    int32_t ta = d < a->n ? a->tokens[d] : -1, tb = d < b->n ? b->tokens[d] : -1;
    if (ta >= 0) print_piece(tok, ta);
    printf(" (%d), speculative ", ta);
    if (tb >= 0) print_piece(tok, tb);
    printf(" (%d)\n", tb);
    printf("    before it: %lld of %lld positions had bitwise-equal logits rows in both runs "
           "(max |delta| %.3g)\n", (long long)same_rows, (long long)d, max_before);
    if (ta < 0 || tb < 0) return;
    const float *x = a->rows + (size_t)d * (size_t)n_vocab, *y = b->rows + (size_t)d * (size_t)n_vocab;
    double max_delta = 0;
    for (int32_t v = 0; v < n_vocab; v++)
        if (fabs((double)x[v] - y[v]) > max_delta) max_delta = fabs((double)x[v] - y[v]);
    printf("    at it: the one-row logits and the multi-row logits differ by max |delta| %.3g; "
           "logit[plain] - logit[spec] = %.4g in the plain row, %.4g in the speculative row\n",
           max_delta, (double)x[ta] - x[tb], (double)y[ta] - y[tb]);
    if (max_delta > 0)
        printf("    cause: llama.cpp computed this position's logits differently in a multi-row "
               "forward than in a one-row forward (batch-variant numerics), not specd's "
               "acceptance\n");
}

static int parse_args(int argc, char **argv, host_options *o) {
    *o = (host_options){.policy_opts = NULL, .n_predict = 64, .n_threads = 2, .max_draft = 8,
                        .adaptive = 1, .temperature = 0.0f, .seed = 1};
    if (argc < 4) return 1;
    o->model_path = argv[1];
    o->prompts_path = argv[2];
    o->policy = argv[3];
    for (int i = 4; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-adaptive")) o->adaptive = 0;
        else if (!v) return 1;
        else if (!strcmp(a, "--policy-opts")) o->policy_opts = v, i++;
        else if (!strcmp(a, "--n")) o->n_predict = atoi(v), i++;
        else if (!strcmp(a, "--threads")) o->n_threads = atoi(v), i++;
        else if (!strcmp(a, "--temp")) o->temperature = strtof(v, NULL), i++;
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--max-draft")) o->max_draft = atoi(v), i++;
        else return 1;
    }
    return o->n_predict < 1 || o->n_threads < 1 || o->max_draft < 1 || o->temperature < 0;
}

int main(int argc, char **argv) {
    host_options o;
    if (parse_args(argc, argv, &o)) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPTS.txt POLICY [--policy-opts S] [--n N] "
                        "[--threads T] [--temp T] [--seed S] [--max-draft K] [--no-adaptive]\n",
                argv[0]);
        return 2;
    }
    specd_error err;
    specd_gguf *gguf = NULL;
    specd_tokenizer *tok = NULL;
    if (specd_gguf_create(o.model_path, &gguf, &err) ||
        specd_tokenizer_create_from_gguf(gguf, &tok, &err)) {
        specd_gguf_destroy(gguf);
        return specd_fail("tokenizer", &err);
    }
    specd_gguf_destroy(gguf);
    target t = {0};
    char **prompts = NULL;
    int n_prompts = 0, rc = target_open(&t, &o) || read_lines(o.prompts_path, &prompts, &n_prompts);
    specd_spec *spec_plain = NULL, *spec_spec = NULL;
    if (!rc) {
        specd_spec_params sp = specd_spec_default_params();
        sp.n_vocab = t.n_vocab;
        sp.max_draft = o.max_draft;
        sp.max_seqs = 1;
        sp.target_path = o.model_path;
        if (specd_spec_create(&sp, &spec_plain, &err) || specd_spec_create(&sp, &spec_spec, &err))
            rc = specd_fail("spec", &err);
    }
    int32_t stops[2];
    int32_t n_stops = 0;
    if (specd_tokenizer_eos(tok) >= 0) stops[n_stops++] = specd_tokenizer_eos(tok);
    int32_t im_end = specd_tokenizer_find(tok, "<|im_end|>", 10);
    if (im_end >= 0 && im_end != stops[0]) stops[n_stops++] = im_end;

    int n_same = 0;
    double s_plain = 0, s_spec = 0;
    int64_t tok_plain = 0, tok_spec = 0, fw_spec = 0;
    if (!rc)
        printf("llama.cpp target %s, policy %s, %d prompts, -n %d, T %g, seed %llu, %d threads\n",
               o.model_path, o.policy, n_prompts, o.n_predict, (double)o.temperature,
               (unsigned long long)o.seed, o.n_threads);
    for (int i = 0; !rc && i < n_prompts; i++) {
        int32_t *ids = NULL;
        int64_t n_ids = 0;
        run_result plain = {0}, spec = {0};
        rc = encode_chat(tok, prompts[i], &ids, &n_ids);
        if (!rc) rc = run_one(&t, spec_plain, &o, "none", ids, n_ids, stops, n_stops, &plain);
        if (!rc) rc = run_one(&t, spec_spec, &o, o.policy, ids, n_ids, stops, n_stops, &spec);
        if (!rc) {
            int64_t d = -1, n = plain.n < spec.n ? plain.n : spec.n;
            for (int64_t j = 0; j < n && d < 0; j++)
                if (plain.tokens[j] != spec.tokens[j]) d = j;
            if (d < 0 && plain.n != spec.n) d = n;
            n_same += d < 0;
            s_plain += plain.seconds;
            s_spec += spec.seconds;
            tok_plain += plain.n;
            tok_spec += spec.n;
            fw_spec += spec.forwards;
            printf("[%d] %s: %s, %lld tokens, TPF %.2f, acceptance %.2f, plain %.1f tok/s, "
                   "speculative %.1f tok/s, speedup %.2fx\n",
                   i + 1, prompts[i], d < 0 ? "identical" : "DIFFERENT", (long long)spec.n,
                   spec.forwards ? (double)spec.n / (double)spec.forwards : 0.0,
                   spec.stats.n_draft_tokens
                       ? (double)spec.stats.n_accepted / (double)spec.stats.n_draft_tokens : 0.0,
                   plain.n / plain.seconds, spec.n / spec.seconds,
                   (spec.n / spec.seconds) / (plain.n / plain.seconds));
            if (d >= 0) explain_divergence(tok, t.n_vocab, &plain, &spec, d);
        }
        run_free(&plain);
        run_free(&spec);
        free(ids);
    }
    if (!rc)
        printf("summary: policy %s: %d of %d prompts identical; TPF %.2f; plain %.1f tok/s, "
               "speculative %.1f tok/s, speedup %.2fx\n",
               o.policy, n_same, n_prompts, fw_spec ? (double)tok_spec / (double)fw_spec : 0.0,
               tok_plain / s_plain, tok_spec / s_spec, (tok_spec / s_spec) / (tok_plain / s_plain));
    for (int i = 0; i < n_prompts; i++) free(prompts[i]);
    free(prompts);
    specd_spec_destroy(spec_plain);
    specd_spec_destroy(spec_spec);
    specd_tokenizer_destroy(tok);
    target_close(&t);
    if (rc) return 1;
    return n_same == n_prompts ? 0 : 3;
}
