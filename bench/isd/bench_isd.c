/* ISD / R-ISD against plain decoding on the real model, paper vs measured (paper 000 App. B).
 *
 * For each stride N in 2..4: tokens per forward (TPF) measured, the TPF eq. (5) predicts from the
 * measured per-position acceptance (its per-position form, which matches the measured TPF up to
 * the run's first and last step when the loop follows the paper's renewal structure) and from a
 * uniform p = the first position's acceptance (the paper's P_k = p^k assumption), the mean accepted proposals per stride step, the per-step
 * time split (prepare / forward / verify / trim) and tokens per second as a ratio against plain
 * decoding ("none") of the same prompts, run right before each policy run (so both see the same
 * machine load); every run's tokens are compared with plain decoding's.
 * Prompts: llama.cpp's chat-templated token ids from tests/data/runtime_greedy_golden.txt.
 *
 * usage: bench_isd [-m MODEL] [-n TOKENS] [-p PROMPTS] [-t THREADS] [--temp T]
 *                  [--policy isd|risd] [--opts "adapter=DIR,..."] [--data tests/data] */
#include "specd/isd.h"
#include "specd/spec_runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PROMPTS = 8, MAX_PROMPT = 512 };

static int32_t prompts[MAX_PROMPTS][MAX_PROMPT];
static int64_t n_prompts[MAX_PROMPTS];

static int read_prompts(const char *dir, int want) {
    char path[1024];
    snprintf(path, sizeof path, "%s/runtime_greedy_golden.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    static char line[65536];
    int n = 0;
    while (n < want && fgets(line, sizeof line, f)) {
        if (strncmp(line, "prompt ", 7)) continue;
        char *p = line + 7, *end;
        long count = strtol(p, &end, 10);
        if (count < 1 || count > MAX_PROMPT) break;
        for (long i = 0; i < count; i++) prompts[n][i] = (int32_t)strtol(p = end, &end, 10);
        n_prompts[n++] = count;
    }
    fclose(f);
    return n;
}

typedef struct totals {
    specd_seq_stats seq; /* summed over prompts */
    specd_run_stats run;
    int64_t identical, compared;
} totals;

static int run_one(specd_model *m, specd_context *ctx, int p, const char *policy,
                   const char *opts, float temp, int32_t n_gen, int32_t *out, totals *t) {
    specd_error err;
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = specd_model_get_info(m)->n_vocab;
    sp.target = m;
    specd_spec *spec;
    if (specd_spec_create(&sp, &spec, &err) != SPECD_OK) return fprintf(stderr, "%s\n", err.message), -1;
    specd_seq_params sq = specd_seq_default_params();
    sq.policy = policy;
    sq.policy_options = opts;
    sq.sampling.temperature = temp;
    sq.seed = 42;
    sq.max_tokens = n_gen;
    sq.adaptive = 0;
    specd_run_stats rs;
    specd_seq_stats ss;
    int rc = -1;
    if (specd_spec_seq_open(spec, 0, prompts[p], n_prompts[p], &sq, &err) == SPECD_OK &&
        specd_spec_run(spec, 0, ctx, 0, NULL, NULL, &rs, &err) == SPECD_OK &&
        specd_spec_seq_stats(spec, 0, &ss, &err) == SPECD_OK) {
        int64_t n;
        const int32_t *toks = specd_spec_seq_output(spec, 0, &n);
        memset(out, 0xff, (size_t)n_gen * sizeof *out);
        memcpy(out, toks, (size_t)n * sizeof *out);
        t->seq.n_steps += ss.n_steps;
        t->seq.n_emitted += ss.n_emitted;
        t->seq.n_drafts += ss.n_drafts;
        t->seq.n_draft_tokens += ss.n_draft_tokens;
        t->seq.n_accepted += ss.n_accepted;
        for (int i = 0; i < SPECD_MAX_DRAFT; i++) {
            t->seq.accepted_at[i] += ss.accepted_at[i];
            t->seq.drafted_at[i] += ss.drafted_at[i];
        }
        t->run.n_emitted += rs.n_emitted;
        t->run.n_steps += rs.n_steps;
        t->run.decode_ns += rs.decode_ns;
        t->run.forward_ns += rs.forward_ns;
        t->run.prepare_ns += rs.prepare_ns;
        t->run.verify_ns += rs.verify_ns;
        t->run.trim_ns += rs.trim_ns;
        rc = 0;
    } else {
        fprintf(stderr, "%s %s: %s\n", policy, opts ? opts : "", err.message);
    }
    specd_spec_destroy(spec);
    return rc;
}

#define DEFAULT_MODEL_NAME "SmolLM2-135M-Instruct.Q4_1.gguf"

int main(int argc, char **argv) {
    const char *model_path = getenv("SPECD_TEST_MODEL"), *policy = "isd", *extra = "",
               *data = "tests/data";
    int32_t n_gen = 64, n_threads = 0, want = 3;
    float temp = 0.0f;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return fprintf(stderr, "%s needs a value\n", a), 2;
        if (!strcmp(a, "-m")) model_path = v;
        else if (!strcmp(a, "-n")) n_gen = atoi(v);
        else if (!strcmp(a, "-p")) want = atoi(v);
        else if (!strcmp(a, "-t")) n_threads = atoi(v);
        else if (!strcmp(a, "--temp")) temp = (float)atof(v);
        else if (!strcmp(a, "--policy")) policy = v;
        else if (!strcmp(a, "--opts")) extra = v;
        else if (!strcmp(a, "--data")) data = v;
        else return fprintf(stderr, "unknown argument %s\n", a), 2;
    }
    char default_model[4096];
    if (!model_path) {
        /* the default model where scripts/fetch-model caches it */
        const char *dir = getenv("SPECD_MODEL_DIR"), *home = getenv("HOME");
        if (dir)
            snprintf(default_model, sizeof default_model, "%s/%s", dir, DEFAULT_MODEL_NAME);
        else
            snprintf(default_model, sizeof default_model, "%s/.cache/specd/models/%s",
                     home ? home : ".", DEFAULT_MODEL_NAME);
        model_path = default_model;
    }
    if (n_gen < 1 || n_gen > 4096 || want < 1 || want > MAX_PROMPTS)
        return fprintf(stderr, "bad -n or -p\n"), 2;
    int n_p = read_prompts(data, want);
    if (n_p < 1) return fprintf(stderr, "no prompts under %s\n", data), 1;
    specd_error err;
    specd_model *m;
    if (specd_model_create(model_path, &m, &err) != SPECD_OK)
        return fprintf(stderr, "model: %s\n", err.message), 1;
    specd_context_params cp = specd_context_default_params();
    cp.n_ctx = MAX_PROMPT + n_gen + 64;
    cp.n_batch = 64;
    cp.n_threads = n_threads;
    specd_context *ctx;
    if (specd_context_create(m, &cp, &ctx, &err) != SPECD_OK)
        return fprintf(stderr, "context: %s\n", err.message), 1;
    int32_t *plain = calloc((size_t)n_p * (size_t)n_gen, sizeof(int32_t));
    int32_t *got = calloc((size_t)n_gen, sizeof(int32_t));
    totals anchor = {0};
    for (int p = 0; p < n_p; p++)
        if (run_one(m, ctx, p, "none", NULL, temp, n_gen, plain + (size_t)p * n_gen, &anchor))
            return 1;
    const double plain_tps = 1e9 * (double)anchor.run.n_emitted / (double)anchor.run.decode_ns;
    printf("bench_isd: %s%s%s, %d prompts x %d tokens, T=%g, %d threads; plain decoding %.1f tok/s "
           "(anchor)\n", policy, extra[0] ? " " : "", extra, n_p, n_gen, (double)temp,
           specd_context_n_threads(ctx), plain_tps);
    printf("%-2s %8s %9s %9s %9s %9s %8s %9s  %-28s %s\n", "N", "steps", "TPF", "TPF eq5",
           "eq5 p=a1", "mean_acc", "ident", "speedup", "accept per position", "step ms: prep/fwd/verify/trim");
    for (int32_t N = 2; N <= 4; N++) {
        char opts[4200];
        snprintf(opts, sizeof opts, "n=%d%s%s", N, extra[0] ? "," : "", extra);
        totals t = {0}, base = {0};
        for (int p = 0; p < n_p; p++) {
            /* plain again, right before: on a shared machine both see the same load */
            if (run_one(m, ctx, p, "none", NULL, temp, n_gen, got, &base)) return 1;
            if (run_one(m, ctx, p, policy, opts, temp, n_gen, got, &t)) return 1;
            for (int i = 0; i < n_gen; i++) t.identical += got[i] == plain[(size_t)p * n_gen + i];
            t.compared += n_gen;
        }
        double acc[SPECD_MAX_DRAFT];
        int32_t n_acc = specd_isd_accept_rates(&t.seq, acc, SPECD_MAX_DRAFT);
        char rates[128] = "";
        for (int32_t i = 0, o = 0; i < n_acc && o < (int)sizeof rates - 8; i++)
            o += snprintf(rates + o, sizeof rates - (size_t)o, "%s%.3f", i ? " " : "", acc[i]);
        const double tpf = (double)t.run.n_emitted / (double)t.run.n_steps;
        const double tps = 1e9 * (double)t.run.n_emitted / (double)t.run.decode_ns;
        const double base_tps = 1e9 * (double)base.run.n_emitted / (double)base.run.decode_ns;
        const double ms = 1e-6 / (double)t.run.n_steps;
        printf("%-2d %8lld %9.3f %9.3f %9.3f %9.3f %7.1f%% %8.2fx  %-28s %.2f/%.2f/%.2f/%.2f\n",
               N, (long long)t.run.n_steps, tpf, specd_isd_tpf_formula(acc, n_acc),
               n_acc ? specd_isd_tpf_uniform(acc[0], N) : 1.0,
               t.seq.n_drafts ? (double)t.seq.n_accepted / (double)t.seq.n_drafts : 0.0,
               100.0 * (double)t.identical / (double)t.compared, tps / base_tps, rates,
               ms * (double)t.run.prepare_ns, ms * (double)t.run.forward_ns,
               ms * (double)t.run.verify_ns, ms * (double)t.run.trim_ns);
    }
    free(plain);
    free(got);
    specd_context_destroy(ctx);
    specd_model_destroy(m);
    return 0;
}
