#include "cli/cli_common.h"
#include "cli/policy_help.h"
#include "ipc/fingerprint.h"
#include "policy/artifacts.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <unistd.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void cli_options_init(cli_options *o) {
    memset(o, 0, sizeof *o);
    o->policy = "none";
    o->max_draft = 8;
    o->n_predict = 128;
    o->n_ctx = 4096;
    o->chat = 1;
    /* llama.cpp's sampling defaults, so the two tools compare like for like */
    o->sampling = specd_sampling_default_params();
    o->sampling.temperature = 0.8f;
    o->sampling.top_k = 40;
    o->sampling.top_p = 0.95f;
    o->sampling.min_p = 0.05f;
    o->seed = 0;
    o->penalties = specd_seq_default_params().penalties;
    o->grammar_drafts = 1;
    o->rule = SPECD_ACCEPT_COUPLED;
    o->adaptive = 1;
    o->verifier_timeout_ms = 1000;
    specd_context_params cp = specd_context_default_params(); /* SPECD_DEVICE's, or -1 */
    o->device = cp.device;
    o->device_index = cp.device_index;
}

#define ACCEPTED "cpu, cuda, cuda:N" /* the names specd_device_parse accepts */

int cli_parse_device(const char *prog, const char *name, int32_t *device, int32_t *index) {
    specd_error err;
    if (name) {
        if (specd_device_parse(name, device, index, &err) == SPECD_OK) return 0;
        fprintf(stderr, "%s: --device: %s%s\n", prog, err.message,
                strstr(err.message, ACCEPTED) ? "" : " (accepted: " ACCEPTED ")");
        return 1;
    }
    const char *env = getenv("SPECD_DEVICE");
    if (!env || !*env) {
        *device = SPECD_DEVICE_CPU;
        *index = 0;
        return 0;
    }
    if (specd_device_parse(env, device, index, &err) == SPECD_OK) return 0;
    fprintf(stderr, "%s: SPECD_DEVICE: %s%s (or give --device)\n", prog, err.message,
            strstr(err.message, ACCEPTED) ? "" : " (accepted: " ACCEPTED ")");
    return 1;
}

const char *cli_device_label(int32_t device, int32_t index, char *buf, size_t cap) {
    if (device == SPECD_DEVICE_CUDA)
        snprintf(buf, cap, "cuda:%d", index);
    else
        snprintf(buf, cap, "%s", specd_device_name(device));
    return buf;
}

int cli_check_writable(const char *prog, const char *flag, const char *path) {
    struct stat st;
    int existed = stat(path, &st) == 0;
    /* no O_TRUNC: an existing file keeps its contents until the run has something to write */
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "%s: %s %s: cannot write: %s\n", prog, flag, path, strerror(errno));
        return 1;
    }
    close(fd);
    if (!existed) unlink(path);
    return 0;
}

static int parse_float(const char *flag, const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "specd: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 1;
}

static int parse_int(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "specd: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 1;
}

int cli_parse_shared(cli_options *o, int argc, char **argv, int *i) {
    const char *f = argv[*i];
    static const char *const with_value[] = {
        "-m", "--model", "--policy", "--policy-opts", "--draft-max", "-n", "-t", "--threads",
        "--temp", "--top-k", "--top-p", "--min-p", "--seed", "--accept", "--tau", "--verifier",
        "--verifier-timeout-ms", "--device", "--n-ctx", "--numerics", "--presence-penalty",
        "--frequency-penalty", "--repeat-penalty", "--grammar", "--json-schema",
        "--grammar-drafts"};
    int needs = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
        if (!strcmp(f, with_value[k])) needs = 1;
    if (!needs) {
        if (!strcmp(f, "--chat")) return o->chat = 1, 1;
        if (!strcmp(f, "--raw")) return o->chat = 0, 1;
        if (!strcmp(f, "--no-adaptive")) return o->adaptive = 0, 1;
        if (!strcmp(f, "--list-policies")) return o->policy = "help", 1;
        return 0;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "specd: %s needs a value\n", f);
        return -1;
    }
    const char *v = argv[++*i];
    long n;
    if (!strcmp(f, "-m") || !strcmp(f, "--model")) return o->model = v, 1;
    if (!strcmp(f, "--policy")) return o->policy = v, 1;
    if (!strcmp(f, "--policy-opts")) return o->policy_opts = v, 1;
    if (!strcmp(f, "--grammar") || !strcmp(f, "--json-schema")) {
        if (o->grammar) {
            fprintf(stderr, "specd: one of --grammar and --json-schema, once\n");
            return -1;
        }
        o->grammar = v;
        o->grammar_schema = !strcmp(f, "--json-schema");
        return 1;
    }
    if (!strcmp(f, "--grammar-drafts")) {
        if (strcmp(v, "on") && strcmp(v, "off")) {
            fprintf(stderr, "specd: --grammar-drafts expects on or off, got '%s'\n", v);
            return -1;
        }
        o->grammar_drafts = !strcmp(v, "on");
        return 1;
    }
    if (!strcmp(f, "--verifier")) return o->verifier = v, 1;
    if (!strcmp(f, "--device"))
        return cli_parse_device("specd", v, &o->device, &o->device_index) ? -1 : 1;
    if (!strcmp(f, "--numerics")) return cli_parse_numerics("specd", v) ? -1 : 1;
    if (!strcmp(f, "--temp")) return parse_float(f, v, 0.0f, 100.0f, &o->sampling.temperature);
    if (!strcmp(f, "--top-p")) return parse_float(f, v, 1e-6f, 1.0f, &o->sampling.top_p);
    if (!strcmp(f, "--min-p")) return parse_float(f, v, 0.0f, 0.999f, &o->sampling.min_p);
    if (!strcmp(f, "--tau")) return parse_float(f, v, 0.0f, 100.0f, &o->tau);
    if (!strcmp(f, "--presence-penalty"))
        return parse_float(f, v, -2.0f, 2.0f, &o->penalties.presence_penalty);
    if (!strcmp(f, "--frequency-penalty"))
        return parse_float(f, v, -2.0f, 2.0f, &o->penalties.frequency_penalty);
    if (!strcmp(f, "--repeat-penalty"))
        return parse_float(f, v, 1e-3f, 10.0f, &o->penalties.repetition_penalty);
    if (!strcmp(f, "--accept")) {
        if (!strcmp(v, "greedy")) o->rule = SPECD_ACCEPT_GREEDY;
        else if (!strcmp(v, "coupled")) o->rule = SPECD_ACCEPT_COUPLED;
        else if (!strcmp(v, "rs")) o->rule = SPECD_ACCEPT_REJECTION;
        else {
            fprintf(stderr, "specd: --accept expects greedy, coupled or rs, got '%s'\n", v);
            return -1;
        }
        o->rule_given = 1;
        return 1;
    }
    if (!strcmp(f, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (errno || *end || *v == '-') {
            fprintf(stderr, "specd: --seed expects a non-negative integer, got '%s'\n", v);
            return -1;
        }
        o->seed = s;
        return 1;
    }
    int rc;
    if (!strcmp(f, "--draft-max")) {
        if ((rc = parse_int(f, v, 1, SPECD_MAX_DRAFT, &n)) > 0) o->max_draft = (int32_t)n;
    } else if (!strcmp(f, "-n")) {
        if ((rc = parse_int(f, v, 1, 1 << 20, &n)) > 0) o->n_predict = (int32_t)n;
    } else if (!strcmp(f, "--n-ctx")) {
        if ((rc = parse_int(f, v, 64, 1 << 20, &n)) > 0) o->n_ctx = (int32_t)n;
    } else if (!strcmp(f, "--verifier-timeout-ms")) {
        if ((rc = parse_int(f, v, 1, 60000, &n)) > 0) o->verifier_timeout_ms = (int32_t)n;
    } else if (!strcmp(f, "--top-k")) {
        if ((rc = parse_int(f, v, 0, 1 << 24, &n)) > 0) o->sampling.top_k = (int32_t)n;
    } else {
        if ((rc = parse_int(f, v, 0, 1024, &n)) > 0) o->n_threads = (int32_t)n;
    }
    return rc;
}

int cli_parse_count(const char *prog, const char *flag, const char *value, long lo, long hi,
                    int *out) {
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (end == value || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "%s: %s expects a count in [%ld, %ld], got '%s'\n", prog, flag, lo, hi,
                value);
        return 1;
    }
    *out = (int)v;
    return 0;
}

void cli_print_shared_help(FILE *out) {
    fprintf(out,
            "  -m, --model PATH     GGUF model (default: the default model, see scripts/fetch-model)\n"
            "  -n N                 tokens to generate (default 128)\n"
            "  --chat | --raw       wrap the prompt in the model's chat template (default) or not\n"
            "  --temp T             temperature, 0 = greedy (default 0.8)\n"
            "  --top-k K --top-p P --min-p M   filters (default 40, 0.95, 0.05; 0/1/0 = off)\n"
            "  --seed S             sampling seed (default 0)\n"
            "  --policy NAME        none (plain decoding, default), ngram, suffix (suffix\n"
            "                       decoding), recycle (token recycling), draft, layerskip,\n"
            "                       remote (specd-drafter), isd, risd, mrp (residual head),\n"
            "                       wedlm (streaming diffusion decoding, WeDLM adapter),\n"
            "                       sdar (block diffusion, SDAR adapter),\n"
            "                       simsd (SimSD: a drafter verified by the block model, LOSSY);\n"
            "                       help (or --list-policies): the list with their keys\n"
            "  --policy-opts S      policy options, \"key=value,...\"; help: the policy's keys,\n"
            "                       types, defaults and ranges\n"
            "  --draft-max K        most proposals per step (default 8)\n"
            "  --accept RULE        greedy | coupled | rs (default coupled; greedy at T = 0)\n"
            "  --presence-penalty P --frequency-penalty F   OpenAI's, over the generated tokens\n"
            "                       ([-2, 2]; default 0)\n"
            "  --repeat-penalty R   llama.cpp/HF's, over prompt and generated tokens: logit > 0\n"
            "                       ? logit / R : logit * R ((0, 10]; default 1 = off)\n"
            "  --grammar FILE       constrain the output to a GBNF grammar (llama.cpp's syntax)\n"
            "  --json-schema FILE   ... to JSON following a JSON Schema (object: any JSON object);\n"
            "                       speculation stays lossless: every verified row is masked\n"
            "  --grammar-drafts on|off  propose the tokens the grammar forces as drafts (default\n"
            "                       on; plain decoding never drafts)\n"
            "  --tau T              relaxed acceptance for rs (lossy; default 0)\n"
            "  --no-adaptive        keep drafting even when it does not pay\n"
            "  --verifier EP        verify drafts in a specd-verifier daemon at EP (ipc://PATH);\n"
            "                       steps it does not answer are verified here, same tokens\n"
            "  --verifier-timeout-ms MS  per request (default 1000)\n"
            "  -t, --threads N      worker threads (default: online cores)\n"
            "  --n-ctx N            KV rows: prompt + generated tokens + a step's drafts\n"
            "                       (default 4096)\n"
            "  --numerics M         fast | llama: the CPU matmuls' order for every context of\n"
            "                       the run: fast (default: $SPECD_NUMERICS, else fast) or\n"
            "                       llama.cpp's bits (slower extends)\n"
            "  --device D           cpu | cuda | cuda:N: where the target and every context a\n"
            "                       policy makes (draft model, head) run (default: $SPECD_DEVICE,\n"
            "                       else cpu)\n");
}

int cli_parse_numerics(const char *prog, const char *name) {
    int32_t mode;
    specd_error err;
    if (specd_numerics_parse(name, &mode, &err) != SPECD_OK) {
        fprintf(stderr, "%s: --numerics: %s\n", prog, err.message);
        return 1;
    }
    /* every context of the process reads it (specd_context_default_params): the target's and
     * those the policies and the serving loop make */
    setenv("SPECD_NUMERICS", name, 1);
    return 0;
}

const char *cli_numerics_label(void) {
    return specd_numerics_name(specd_context_default_params().numerics);
}

const char *cli_default_model(char *buf, size_t cap) {
    const char *dir = getenv("SPECD_MODEL_DIR");
    const char *home = getenv("HOME");
    if (dir && *dir)
        snprintf(buf, cap, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else
        snprintf(buf, cap, "%s/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : ".");
    return buf;
}

const char *cli_policy_options(const cli_engine *e, const char *policy, const char *opts,
                               char *buf, size_t cap) {
    specd_error err;
    if (specd_policy_default_options(policy, e->target_fingerprint, opts, buf, cap, &err) !=
        SPECD_OK) {
        fprintf(stderr, "specd: %s\n", err.message);
        return NULL;
    }
    return buf;
}

int cli_spec_create(const cli_engine *e, const cli_options *o, specd_spec **out) {
    specd_error err;
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = specd_model_get_info(e->model)->n_vocab;
    sp.max_draft = o->max_draft;
    sp.max_seqs = 1;
    sp.target = e->model;
    sp.n_embd = specd_model_get_info(e->model)->n_embd; /* policies that read hidden states */
    sp.verifier_endpoint = o->verifier;
    sp.verifier_timeout_ms = o->verifier_timeout_ms;
    sp.verifier_tokenizer_hash = e->tokenizer_hash;
    sp.device = e->device; /* the contexts the policies make go there too */
    sp.device_index = e->device_index;
    if (specd_spec_create(&sp, out, &err) != SPECD_OK) {
        fprintf(stderr, "specd: %s\n", err.message);
        return 1;
    }
    return 0;
}

/* The whole of a small text file (a grammar, a schema) into a new buffer; NULL after printing
 * why. */
static char *read_text(const char *flag, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0, cap = 0;
    if (f) {
        for (;;) {
            if (n == cap) {
                cap = cap ? 2 * cap : 4096;
                char *b = cap <= SPECD_GRAMMAR_MAX_TEXT + 1 ? realloc(buf, cap) : NULL;
                if (!b) break;
                buf = b;
            }
            size_t got = fread(buf + n, 1, cap - n, f);
            n += got;
            if (got == 0) break;
        }
    }
    if (!f || ferror(f) || n == cap) {
        fprintf(stderr, "specd: %s %s: %s\n", flag, path,
                !f || ferror(f) ? strerror(errno) : "too large");
        if (f) fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* --grammar / --json-schema: compiled once for the run's prompts (they share its mask cache). */
static int compile_grammar(cli_engine *e, const cli_options *o) {
    const char *flag = o->grammar_schema ? "--json-schema" : "--grammar";
    specd_error err;
    specd_status st;
    if (o->grammar_schema && !strcmp(o->grammar, "object")) {
        st = specd_grammar_create_json_schema(NULL, 0, e->tok, &e->grammar, &err);
    } else {
        size_t len = 0;
        char *text = read_text(flag, o->grammar, &len);
        if (!text) return 1;
        if (len == 0) { /* the library reads an empty schema as "any object": say so instead */
            fprintf(stderr, "specd: %s %s is empty%s\n", flag, o->grammar,
                    o->grammar_schema ? " (--json-schema object: any JSON object)" : "");
            free(text);
            return 2;
        }
        st = o->grammar_schema ? specd_grammar_create_json_schema(text, len, e->tok, &e->grammar,
                                                                  &err)
                               : specd_grammar_create_gbnf(text, len, e->tok, &e->grammar, &err);
        free(text);
    }
    if (st != SPECD_OK) {
        fprintf(stderr, "specd: %s %s: %s\n", flag, o->grammar, err.message);
        return 2;
    }
    return 0;
}

int cli_engine_open(cli_engine *e, const cli_options *o) {
    memset(e, 0, sizeof *e);
    int sp_rc;
    int32_t device = o->device, index = o->device_index;
    if (device == -1 && cli_parse_device("specd", NULL, &device, &index)) return 2;
    char buf[4096];
    const char *path = o->model ? o->model : cli_default_model(buf, sizeof buf);
    specd_error err;
    if (specd_model_create(path, &e->model, &err) != SPECD_OK) {
        fprintf(stderr, "specd: cannot load model %s: %s\n", path, err.message);
        if (!o->model) fprintf(stderr, "specd: fetch the default model with scripts/fetch-model\n");
        return 1;
    }
    if (specd_tokenizer_create_from_gguf(specd_model_gguf(e->model), &e->tok, &err) != SPECD_OK) {
        fprintf(stderr, "specd: tokenizer of %s: %s\n", path, err.message);
        cli_engine_close(e);
        return 1;
    }
    specd_ipc_fingerprint fp;
    if (specd_ipc_fingerprint_of_tokenizer(e->tok, &fp, &err) != SPECD_OK) {
        fprintf(stderr, "specd: tokenizer of %s: %s\n", path, err.message);
        cli_engine_close(e);
        return 1;
    }
    e->tokenizer_hash = fp.tokenizer_hash;
    if (specd_target_fingerprint_of_gguf(specd_model_gguf(e->model), &e->target_fingerprint,
                                         &err) != SPECD_OK) {
        fprintf(stderr, "specd: %s: %s\n", path, err.message);
        cli_engine_close(e);
        return 1;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0 && o->n_threads > cores) {
        fprintf(stderr, "specd: -t %d: this machine has %ld cores online\n", o->n_threads, cores);
        cli_engine_close(e);
        return 2;
    }
    specd_context_params cp = specd_context_default_params();
    cp.n_threads = o->n_threads;
    cp.n_ctx = o->n_ctx;
    e->n_ctx = cp.n_ctx;
    cp.n_batch = 256;
    cp.device = e->device = device;
    cp.device_index = e->device_index = index;
    if (specd_context_create(e->model, &cp, &e->ctx, &err) != SPECD_OK) {
        char label[32];
        fprintf(stderr, "specd: cannot run on %s: %s\n",
                cli_device_label(device, index, label, sizeof label), err.message);
        cli_engine_close(e);
        return 1;
    }
    sp_rc = cli_spec_create(e, o, &e->spec);
    if (!sp_rc && o->grammar) sp_rc = compile_grammar(e, o);
    if (sp_rc) {
        cli_engine_close(e);
        return sp_rc;
    }
    return 0;
}

void cli_engine_close(cli_engine *e) {
    specd_spec_destroy(e->spec);
    specd_grammar_destroy(e->grammar);
    specd_context_destroy(e->ctx);
    specd_tokenizer_destroy(e->tok);
    specd_model_destroy(e->model);
    memset(e, 0, sizeof *e);
}

int cli_encode_prompt(const cli_engine *e, const char *text, int chat, int32_t **ids,
                      int64_t *n) {
    specd_error err;
    char *templated = NULL;
    const char *src = text;
    size_t len = strlen(text);
    if (chat) {
        specd_chat_message m = {.role = "user", .content = text};
        size_t need = 0;
        specd_tokenizer_apply_chat_template(e->tok, &m, 1, 1, NULL, 0, &need, NULL);
        templated = malloc(need + 1);
        if (!templated || specd_tokenizer_apply_chat_template(e->tok, &m, 1, 1, templated,
                                                              need, &need, &err) != SPECD_OK) {
            fprintf(stderr, "specd: chat template: %s\n", templated ? err.message : "no memory");
            free(templated);
            return 1;
        }
        src = templated;
        len = need;
    }
    uint32_t flags = SPECD_TOKENIZE_ADD_SPECIAL | (chat ? SPECD_TOKENIZE_PARSE_SPECIAL : 0);
    size_t need = 0;
    specd_tokenizer_encode(e->tok, src, len, flags, NULL, 0, &need, NULL);
    int32_t *out = malloc((need ? need : 1) * sizeof *out);
    int rc = 0;
    if (!out || specd_tokenizer_encode(e->tok, src, len, flags, out, need, &need, &err) !=
                    SPECD_OK) {
        fprintf(stderr, "specd: cannot encode the prompt: %s\n", out ? err.message : "no memory");
        free(out);
        rc = 1;
    } else if (need == 0) {
        fprintf(stderr, "specd: the prompt encodes to no tokens\n");
        free(out);
        rc = 1;
    } else {
        *ids = out;
        *n = (int64_t)need;
    }
    free(templated);
    return rc;
}

specd_seq_params cli_seq_params(const cli_options *o, const cli_engine *e, const char *policy,
                                const char *policy_opts, int32_t *stop_storage) {
    specd_seq_params p = specd_seq_default_params();
    p.policy = policy;
    p.policy_options = policy_opts;
    p.sampling = o->sampling;
    p.seed = o->seed;
    p.rule = o->rule;
    p.tau = o->tau;
    p.adaptive = o->adaptive;
    p.max_tokens = o->n_predict;
    p.penalties = o->penalties;
    int32_t n_stop = 0, n_vocab = specd_tokenizer_vocab_size(e->tok);
    for (int32_t id = 0; id < n_vocab && n_stop < 8; id++)
        if (specd_tokenizer_is_eog(e->tok, id)) stop_storage[n_stop++] = id;
    p.stop_tokens = stop_storage;
    p.n_stop_tokens = n_stop;
    return p;
}
