/* specd generate: plain decoding on the CPU runtime. Streams text to stdout; prefill and decode
 * tokens/s to stderr. Tokens come from the keyed sampler (specd/sampling.h), so a run is
 * reproducible from its seed and identical to what speculative decoding with the same seed emits.
 *   specd generate -m MODEL -p PROMPT [-n N] [--temp T --top-k K --top-p P --min-p M --seed S]
 *                  [--chat] [-t THREADS] */
#include "cli/commands.h"
#include "common/clock.h"
#include "specd/runtime.h"
#include "specd/sampling.h"
#include "specd/tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: specd generate [-m MODEL] -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P]\n"
            "                      [--min-p M] [--seed S] [--chat] [-t THREADS]\n"
            "  -m MODEL    GGUF file (default $SPECD_MODEL_DIR or ~/.cache/specd/models, "
            "SmolLM2-135M-Instruct.Q4_1.gguf)\n"
            "  -p PROMPT   prompt text (with --chat: the user message, ChatML-wrapped)\n"
            "  -n N        tokens to generate (default 128; stops early at end of generation)\n"
            "  --temp T    temperature (default 0.8; 0 = greedy)\n"
            "  --top-k K   (default 40; 0 = off)   --top-p P (default 0.95)   --min-p M (default "
            "0.05)\n"
            "  --seed S    seed of the keyed sampler (default 0)\n"
            "  -t THREADS  worker threads (default: online cores)\n");
}

static int parse_num(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= lo && v <= hi)) return 0;
    *out = v;
    return 1;
}

typedef struct gen_args {
    const char *model, *prompt;
    int n, chat, threads;
    specd_sampling_params sp;
    uint64_t seed;
} gen_args;

static int parse_args(int argc, char **argv, gen_args *a, char *model_buf, size_t model_cap) {
    a->sp = specd_sampling_default_params();
    a->sp.temperature = 0.8f;
    a->sp.top_k = 40;
    a->sp.top_p = 0.95f;
    a->sp.min_p = 0.05f;
    a->n = 128;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(o, "--chat")) {
            a->chat = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "specd generate: %s needs a value\n", o);
            return 0;
        }
        const char *v = argv[++i];
        double d;
        if (!strcmp(o, "-m"))
            a->model = v;
        else if (!strcmp(o, "-p"))
            a->prompt = v;
        else if (!strcmp(o, "-n") && parse_num(v, 1, 1e6, &d))
            a->n = (int)d;
        else if (!strcmp(o, "-t") && parse_num(v, 1, 1024, &d))
            a->threads = (int)d;
        else if (!strcmp(o, "--temp") && parse_num(v, 0, 1e6, &d))
            a->sp.temperature = (float)d;
        else if (!strcmp(o, "--top-k") && parse_num(v, 0, 1e9, &d))
            a->sp.top_k = (int32_t)d;
        else if (!strcmp(o, "--top-p") && parse_num(v, 0, 1, &d))
            a->sp.top_p = (float)d;
        else if (!strcmp(o, "--min-p") && parse_num(v, 0, 1, &d))
            a->sp.min_p = (float)d;
        else if (!strcmp(o, "--seed") && parse_num(v, 0, 1.8e19, &d))
            a->seed = strtoull(v, NULL, 10);
        else {
            fprintf(stderr, "specd generate: bad option or value: %s %s\n", o, v);
            return 0;
        }
    }
    if (!a->prompt) {
        fprintf(stderr, "specd generate: -p PROMPT is required\n");
        return 0;
    }
    if (!a->model) {
        const char *dir = getenv("SPECD_MODEL_DIR"), *home = getenv("HOME");
        if (dir)
            snprintf(model_buf, model_cap, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
        else
            snprintf(model_buf, model_cap, "%s/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                     home ? home : ".");
        a->model = model_buf;
    }
    return 1;
}

/* The prompt's token ids (ChatML-wrapped with --chat); caller frees. */
static int32_t *encode_prompt(const specd_tokenizer *tok, const gen_args *a, size_t *n,
                              specd_error *err) {
    char *text = NULL;
    size_t len = strlen(a->prompt);
    const char *src = a->prompt;
    if (a->chat) {
        specd_chat_message msg = {.role = "user", .content = a->prompt};
        size_t need = 0;
        specd_tokenizer_apply_chat_template(tok, &msg, 1, 1, NULL, 0, &need, err);
        if (need == 0) return NULL;
        text = malloc(need);
        if (!text || specd_tokenizer_apply_chat_template(tok, &msg, 1, 1, text, need, &len, err)) {
            free(text);
            return NULL;
        }
        src = text;
    }
    size_t need = 0;
    specd_tokenizer_encode(tok, src, len, SPECD_TOKENIZE_PARSE_SPECIAL, NULL, 0, &need, err);
    int32_t *ids = need ? malloc(need * sizeof *ids) : NULL;
    if (!ids || specd_tokenizer_encode(tok, src, len, SPECD_TOKENIZE_PARSE_SPECIAL, ids, need, n,
                                       err) != SPECD_OK) {
        free(ids);
        ids = NULL;
    }
    free(text);
    return ids;
}

int specd_cmd_generate(int argc, char **argv) {
    gen_args a = {0};
    char model_buf[4096];
    if (!parse_args(argc, argv, &a, model_buf, sizeof model_buf)) {
        usage(stderr);
        return 2;
    }
    specd_error err = {0};
    specd_model *m = NULL;
    specd_tokenizer *tok = NULL;
    specd_context *c = NULL;
    specd_sampler *smp = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    int rc = 1;
    size_t n_prompt = 0;
    if (specd_model_create(a.model, &m, &err) != SPECD_OK) goto fail;
    if (specd_tokenizer_create_from_gguf(specd_model_gguf(m), &tok, &err) != SPECD_OK) goto fail;
    const int32_t V = specd_model_get_info(m)->n_vocab;
    ids = encode_prompt(tok, &a, &n_prompt, &err);
    if (!ids) goto fail;
    if (n_prompt == 0) {
        fprintf(stderr, "specd generate: the prompt encodes to no tokens\n");
        goto out;
    }
    specd_context_params cp = specd_context_default_params();
    cp.n_ctx = (int32_t)(n_prompt + (size_t)a.n);
    cp.n_batch = 512;
    cp.n_threads = a.threads;
    if (n_prompt + (size_t)a.n > (size_t)specd_model_get_info(m)->n_ctx_train) {
        fprintf(stderr, "specd generate: prompt + n (%zu) exceeds the model's context %d\n",
                n_prompt + (size_t)a.n, specd_model_get_info(m)->n_ctx_train);
        goto out;
    }
    if (specd_context_create(m, &cp, &c, &err) != SPECD_OK) goto fail;
    if (specd_sampler_create(&a.sp, V, &smp, &err) != SPECD_OK) goto fail;
    logits = malloc(sizeof(float) * (size_t)V);
    if (!logits) goto fail;
    const uint64_t t0 = specd_now_ns();
    for (size_t off = 0; off < n_prompt; off += 512) { /* n_batch chunks */
        const int32_t cnt = (int32_t)(n_prompt - off < 512 ? n_prompt - off : 512);
        int32_t last = cnt - 1;
        specd_seq_batch s = {.seq = 0, .n_tokens = cnt, .tokens = ids + off};
        specd_extend_out o = {.n_rows = 1, .rows = &last, .logits = logits};
        if (specd_context_extend(c, &s, 1, &o, &err) != SPECD_OK) goto fail;
    }
    const uint64_t t1 = specd_now_ns();
    int generated = 0;
    for (int i = 0; i < a.n; i++) {
        int32_t t;
        specd_sample_key key = {
            .seed = a.seed, .sequence = 0, .position = (uint32_t)(n_prompt + (size_t)i)};
        if (specd_sampler_sample(smp, logits, V, key, &t, &err) != SPECD_OK) goto fail;
        generated++;
        if (specd_tokenizer_is_eog(tok, t)) break;
        const char *piece;
        size_t len;
        if (specd_tokenizer_token_to_piece(tok, t, 0, &piece, &len, &err) != SPECD_OK) goto fail;
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
        if (i + 1 < a.n && specd_context_decode(c, 0, t, logits, &err) != SPECD_OK) goto fail;
    }
    const uint64_t t2 = specd_now_ns();
    printf("\n");
    fprintf(stderr, "prefill: %zu tokens, %.1f tok/s; decode: %d tokens, %.1f tok/s (%d threads)\n",
            n_prompt, (double)n_prompt / ((double)(t1 - t0) * 1e-9), generated,
            generated > 1 ? (generated - 1) / ((double)(t2 - t1) * 1e-9) : 0.0,
            specd_context_n_threads(c));
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "specd generate: %s\n", err.message[0] ? err.message : "out of memory");
out:
    free(logits);
    free(ids);
    specd_sampler_destroy(smp);
    specd_context_destroy(c);
    specd_tokenizer_destroy(tok);
    specd_model_destroy(m);
    return rc;
}
