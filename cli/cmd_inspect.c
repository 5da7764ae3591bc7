/* specd inspect MODEL.gguf [--json]: what a GGUF file holds: architecture, hyperparameters, the
 * tokenizer's summary, other metadata, and the tensor table. With --device it also makes the
 * context a run would (--n-ctx, --n-seq) on that device and prints the memory it holds. Exit 0 on
 * success, 1 when the file cannot be read or the context not made (message on stderr), 2 on a
 * usage error. */
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "common/json_out.h"
#include "policy/artifacts.h"
#include "kernels/cpu/dtype.h"
#include "specd/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct out {
    FILE *f;
    int json;
} out;

/* --- strings --------------------------------------------------------------------------------- */
static void text_str(FILE *f, const char *s, uint64_t len, uint64_t max) {
    const unsigned char *p = (const unsigned char *)s;
    uint64_t n = len < max ? len : max;
    for (uint64_t i = 0; i < n; i++) {
        if (p[i] == '\n')
            fputs("\\n", f);
        else if (p[i] < 0x20 || p[i] == 0x7f)
            fprintf(f, "\\x%02x", p[i]);
        else
            fputc(p[i], f);
    }
    if (len > max) fputs("...", f);
}

/* The shortest %g form that reads back as the same value (of the key's own precision). */
static void print_number(FILE *f, double v, int is_f32, int json) {
    if (!isfinite(v)) {
        fputs(json ? "null" : (isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"), f); /* JSON has none */
        return;
    }
    char buf[40];
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (is_f32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v) break;
    }
    fputs(buf, f);
}

/* --- metadata values ----------------------------------------------------------------------- */
/* NUL-terminated copy of a key name; 0 when it holds a NUL byte or is too long. */
static int key_cstr(specd_gguf_str k, char *buf, size_t cap) {
    if (k.len >= cap || memchr(k.ptr, 0, k.len)) return 0;
    memcpy(buf, k.ptr, k.len);
    buf[k.len] = '\0';
    return 1;
}

static void print_value(const out *o, const specd_gguf *g, int64_t i) {
    char key[512];
    specd_gguf_type type = specd_gguf_key_type(g, i);
    if (!key_cstr(specd_gguf_key_name(g, i), key, sizeof key)) {
        fputs(o->json ? "null" : "(unreadable key name)", o->f);
        return;
    }
    int64_t iv;
    uint64_t uv;
    double dv;
    int bv;
    specd_gguf_str s;
    switch (type) {
    case SPECD_GGUF_F32:
    case SPECD_GGUF_F64:
        specd_gguf_get_f64(g, key, &dv, NULL);
        print_number(o->f, dv, type == SPECD_GGUF_F32, o->json);
        return;
    case SPECD_GGUF_BOOL:
        specd_gguf_get_bool(g, key, &bv, NULL);
        fputs(bv ? "true" : "false", o->f);
        return;
    case SPECD_GGUF_STRING:
        specd_gguf_get_str(g, key, &s, NULL);
        if (o->json)
            json_string(o->f, s.ptr, s.len);
        else
            text_str(o->f, s.ptr, s.len, 120);
        return;
    case SPECD_GGUF_ARRAY: {
        specd_gguf_type et;
        uint64_t n;
        specd_gguf_get_array(g, key, &et, &n, NULL, NULL);
        if (o->json)
            fprintf(o->f, "{\"array\": \"%s\", \"count\": %llu}", specd_gguf_type_name(et),
                    (unsigned long long)n);
        else
            fprintf(o->f, "[%s x %llu]", specd_gguf_type_name(et), (unsigned long long)n);
        return;
    }
    default:
        if (specd_gguf_get_i64(g, key, &iv, NULL) == SPECD_OK)
            fprintf(o->f, "%lld", (long long)iv);
        else if (specd_gguf_get_u64(g, key, &uv, NULL) == SPECD_OK)
            fprintf(o->f, "%llu", (unsigned long long)uv);
        else
            fputs(o->json ? "null" : "?", o->f);
    }
}

/* Key groups: hyperparameters are "<arch>.*"; the tokenizer block is summarised separately. */
static int is_tokenizer_key(specd_gguf_str k) {
    return k.len >= 10 && !memcmp(k.ptr, "tokenizer.", 10);
}

static int has_prefix(specd_gguf_str k, specd_gguf_str arch) {
    return arch.len > 0 && k.len > arch.len && !memcmp(k.ptr, arch.ptr, arch.len) &&
           k.ptr[arch.len] == '.';
}

static void print_keys(const out *o, const specd_gguf *g, specd_gguf_str arch, int hyper) {
    int first = 1;
    for (int64_t i = 0; i < specd_gguf_key_count(g); i++) {
        specd_gguf_str k = specd_gguf_key_name(g, i);
        if (is_tokenizer_key(k) || has_prefix(k, arch) != hyper) continue;
        if (o->json) {
            fputs(first ? "\n    " : ",\n    ", o->f);
            specd_gguf_str shown = k;
            if (hyper) shown.ptr += arch.len + 1, shown.len -= arch.len + 1;
            json_string(o->f, shown.ptr, shown.len);
            fputs(": ", o->f);
        } else {
            fputs("  ", o->f);
            if (hyper)
                text_str(o->f, k.ptr + arch.len + 1, k.len - arch.len - 1, 60);
            else
                text_str(o->f, k.ptr, k.len, 60);
            int w = (int)(hyper ? k.len - arch.len - 1 : k.len);
            fprintf(o->f, "%*s", w < 40 ? 40 - w : 1, "");
        }
        print_value(o, g, i);
        if (!o->json) fputc('\n', o->f);
        first = 0;
    }
    if (o->json) fputs(first ? "}" : "\n  }", o->f);
}

/* --- tokenizer summary --------------------------------------------------------------------- */
static void print_token(const out *o, const specd_gguf *g, const char *what, const char *key,
                        uint64_t vocab, int *first) {
    uint32_t id;
    if (specd_gguf_get_u32(g, key, &id, NULL) != SPECD_OK) return;
    specd_gguf_str text = {NULL, 0};
    int have_text = id < vocab && specd_gguf_get_array_str(g, "tokenizer.ggml.tokens", id, &text,
                                                           NULL) == SPECD_OK;
    if (o->json) {
        fprintf(o->f, "%s\n    \"%s_id\": %u, \"%s_text\": ", *first ? "" : ",", what, id, what);
        if (have_text)
            json_string(o->f, text.ptr, text.len);
        else
            fputs("null", o->f);
    } else {
        fprintf(o->f, "  %-14s %u", what, id);
        if (have_text) {
            fputs("  '", o->f);
            text_str(o->f, text.ptr, text.len, 60);
            fputc('\'', o->f);
        } else {
            fputs("  (not in the vocabulary)", o->f);
        }
        fputc('\n', o->f);
    }
    *first = 0;
}

static void print_tokenizer(const out *o, const specd_gguf *g) {
    specd_gguf_str model = {NULL, 0}, pre = {NULL, 0}, tmpl = {NULL, 0};
    int has_model = specd_gguf_get_str(g, "tokenizer.ggml.model", &model, NULL) == SPECD_OK;
    int has_pre = specd_gguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL) == SPECD_OK;
    int has_tmpl = specd_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL) == SPECD_OK;
    specd_gguf_type et;
    uint64_t vocab = 0, merges = 0;
    int has_vocab =
        specd_gguf_get_array(g, "tokenizer.ggml.tokens", &et, &vocab, NULL, NULL) == SPECD_OK &&
        et == SPECD_GGUF_STRING;
    if (!has_vocab) vocab = 0;
    int has_merges =
        specd_gguf_get_array(g, "tokenizer.ggml.merges", &et, &merges, NULL, NULL) == SPECD_OK;
    int first = 0;
    if (o->json) {
        fputs("  \"tokenizer\": {\n    \"model\": ", o->f);
        if (has_model)
            json_string(o->f, model.ptr, model.len);
        else
            fputs("null", o->f);
        fputs(",\n    \"pre\": ", o->f);
        if (has_pre)
            json_string(o->f, pre.ptr, pre.len);
        else
            fputs("null", o->f);
        fprintf(o->f, ",\n    \"vocab_size\": %llu,\n    \"merges\": %llu",
                (unsigned long long)vocab, (unsigned long long)(has_merges ? merges : 0));
    } else {
        fputs("tokenizer:\n  model          ", o->f);
        if (has_model)
            text_str(o->f, model.ptr, model.len, 60);
        else
            fputs("(none)", o->f);
        fputs("\n  pre            ", o->f);
        if (has_pre)
            text_str(o->f, pre.ptr, pre.len, 60);
        else
            fputs("(none)", o->f);
        fprintf(o->f, "\n  vocab size     %llu\n  merges         %llu\n", (unsigned long long)vocab,
                (unsigned long long)(has_merges ? merges : 0));
    }
    print_token(o, g, "bos", "tokenizer.ggml.bos_token_id", vocab, &first);
    print_token(o, g, "eos", "tokenizer.ggml.eos_token_id", vocab, &first);
    print_token(o, g, "unk", "tokenizer.ggml.unknown_token_id", vocab, &first);
    print_token(o, g, "pad", "tokenizer.ggml.padding_token_id", vocab, &first);
    int add_bos = 0, has_add_bos = specd_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos,
                                                       NULL) == SPECD_OK;
    if (o->json) {
        fputs(",\n    \"add_bos\": ", o->f);
        fputs(has_add_bos ? (add_bos ? "true" : "false") : "null", o->f);
        fprintf(o->f, ",\n    \"chat_template\": %s,\n    \"chat_template_bytes\": %llu\n  }",
                has_tmpl ? "true" : "false", (unsigned long long)tmpl.len);
    } else {
        fprintf(o->f, "  add_bos        %s\n",
                has_add_bos ? (add_bos ? "true" : "false") : "(not set)");
        if (has_tmpl)
            fprintf(o->f, "  chat template  yes (%llu bytes)\n", (unsigned long long)tmpl.len);
        else
            fputs("  chat template  no\n", o->f);
    }
}

/* --- tensors ------------------------------------------------------------------------------- */
static void print_tensors(const out *o, const specd_gguf *g) {
    uint64_t total = 0;
    if (o->json)
        fputs("  \"tensors\": [", o->f);
    else
        fprintf(o->f, "tensors (%lld):\n  %-40s %-6s %-24s %12s\n",
                (long long)specd_gguf_tensor_count(g), "name", "type", "shape", "bytes");
    for (int64_t i = 0; i < specd_gguf_tensor_count(g); i++) {
        const specd_gguf_tensor *t = specd_gguf_tensor_at(g, i);
        const char *type = specd_gguf_tensor_type_name(t->type);
        total += t->n_bytes;
        if (o->json) {
            fputs(i ? ",\n    {\"name\": " : "\n    {\"name\": ", o->f);
            json_string(o->f, t->name.ptr, t->name.len);
            fprintf(o->f, ", \"type\": \"%s\", \"shape\": [", type);
            for (uint32_t d = 0; d < t->n_dims; d++)
                fprintf(o->f, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
            fprintf(o->f, "], \"offset\": %llu, \"bytes\": %llu}", (unsigned long long)t->offset,
                    (unsigned long long)t->n_bytes);
        } else {
            char shape[64];
            int n = 0;
            for (uint32_t d = 0; d < t->n_dims && n < (int)sizeof shape; d++)
                n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%lld", d ? " x " : "",
                              (long long)t->ne[d]);
            fputs("  ", o->f);
            text_str(o->f, t->name.ptr, t->name.len, 40);
            int w = (int)(t->name.len < 40 ? t->name.len : 43);
            fprintf(o->f, "%*s %-6s %-24s %12llu\n", w < 40 ? 40 - w : 0, "", type, shape,
                    (unsigned long long)t->n_bytes);
        }
    }
    if (o->json)
        fprintf(o->f, "%s],\n  \"tensor_bytes\": %llu", specd_gguf_tensor_count(g) ? "\n  " : "",
                (unsigned long long)total);
    else
        fprintf(o->f, "  total %llu bytes (%.1f MiB)\n", (unsigned long long)total,
                (double)total / (1024.0 * 1024.0));
}

static void usage(FILE *f) {
    fputs("usage: specd inspect [--json] [--device D [--n-ctx N] [--n-seq N]] MODEL.gguf\n\n"
          "Prints a GGUF file's architecture, hyperparameters, tokenizer summary, other\n"
          "metadata and tensor table. --json prints the same as one JSON object.\n"
          "  --device D   cpu | cuda | cuda:N: also make a context of the model there and print\n"
          "               the memory it holds: on a CUDA device the device memory of the\n"
          "               weights, the KV caches and the scratch; on the CPU the host memory of\n"
          "               the KV caches and of the whole context\n"
          "  --n-ctx N    that context's KV rows per sequence (default 2048)\n"
          "  --n-seq N    its sequences (default 1)\n",
          f);
}

/* --- the context --device makes -------------------------------------------------------------- */
typedef struct ctx_memory {
    int32_t device, index, n_ctx, n_seq;
    size_t weights, kv, scratch; /* device memory (CUDA) */
    size_t host_kv, host_total;  /* host memory (CPU) */
} ctx_memory;

static int measure_context(const char *path, ctx_memory *m) {
    specd_error err;
    specd_model *model = NULL;
    if (specd_model_create(path, &model, &err) != SPECD_OK) {
        fprintf(stderr, "specd inspect: --device: cannot load the model: %s\n", err.message);
        return 1;
    }
    specd_context_params cp = specd_context_default_params();
    cp.device = m->device;
    cp.device_index = m->index;
    cp.n_ctx = m->n_ctx;
    cp.n_seq = m->n_seq;
    specd_context *ctx = NULL;
    int rc = 0;
    if (specd_context_create(model, &cp, &ctx, &err) != SPECD_OK) {
        char label[32];
        fprintf(stderr, "specd inspect: cannot make a context on %s: %s\n",
                cli_device_label(m->device, m->index, label, sizeof label), err.message);
        rc = 1;
    } else {
        specd_context_device_memory(ctx, &m->weights, &m->kv, &m->scratch);
        m->host_kv = specd_context_kv_bytes(ctx);
        m->host_total = specd_context_memory_bytes(ctx);
    }
    specd_context_destroy(ctx);
    specd_model_destroy(model);
    return rc;
}

static double mib(size_t b) {
    return (double)b / (1024.0 * 1024.0);
}

static void print_context(const out *o, const ctx_memory *m) {
    char label[32];
    cli_device_label(m->device, m->index, label, sizeof label);
    int cuda = m->device == SPECD_DEVICE_CUDA;
    if (o->json) {
        fprintf(o->f, ",\n  \"context\": {\"device\": \"%s\", \"n_ctx\": %d, \"n_seq\": %d, ", label,
                m->n_ctx, m->n_seq);
        if (cuda)
            fprintf(o->f, "\"device_weights_bytes\": %zu, \"device_kv_bytes\": %zu, "
                          "\"device_scratch_bytes\": %zu}",
                    m->weights, m->kv, m->scratch);
        else
            fprintf(o->f, "\"host_kv_bytes\": %zu, \"host_context_bytes\": %zu}", m->host_kv,
                    m->host_total);
        return;
    }
    fprintf(o->f, "\ncontext on %s (n_ctx %d, n_seq %d):\n", label, m->n_ctx, m->n_seq);
    if (cuda)
        fprintf(o->f,
                "  device weights %14zu bytes (%.1f MiB)\n"
                "  device KV      %14zu bytes (%.1f MiB)\n"
                "  device scratch %14zu bytes (%.1f MiB)\n"
                "  device total   %14zu bytes (%.1f MiB)\n",
                m->weights, mib(m->weights), m->kv, mib(m->kv), m->scratch, mib(m->scratch),
                m->weights + m->kv + m->scratch, mib(m->weights + m->kv + m->scratch));
    else
        fprintf(o->f,
                "  host KV        %14zu bytes (%.1f MiB)\n"
                "  host context   %14zu bytes (%.1f MiB)\n",
                m->host_kv, mib(m->host_kv), m->host_total, mib(m->host_total));
}

static int parse_count(const char *flag, const char *v, long hi, int32_t *value) {
    char *end;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 1 || n > hi) {
        fprintf(stderr, "specd inspect: %s expects an integer in [1, %ld], got '%s'\n", flag, hi,
                v);
        return 1;
    }
    *value = (int32_t)n;
    return 0;
}

int specd_cmd_inspect(int argc, char **argv) {
    const char *path = NULL, *device = NULL;
    out o = {stdout, 0};
    specd_context_params dp = specd_context_default_params();
    ctx_memory mem = {.n_ctx = dp.n_ctx, .n_seq = dp.n_seq};
    int sized = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            o.json = 1;
        } else if ((!strcmp(argv[i], "--device") || !strcmp(argv[i], "--n-ctx") ||
                    !strcmp(argv[i], "--n-seq")) && i + 1 < argc) {
            const char *f = argv[i], *v = argv[++i];
            if (!strcmp(f, "--device")) {
                if (cli_parse_device("specd inspect", v, &mem.device, &mem.index)) return 2;
                device = v;
            } else if (parse_count(f, v, !strcmp(f, "--n-ctx") ? 1 << 24 : 4096,
                                   !strcmp(f, "--n-ctx") ? &mem.n_ctx : &mem.n_seq)) {
                return 2;
            }
            sized |= strcmp(f, "--device") != 0;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "specd inspect: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "specd inspect: one model at a time ('%s' and '%s')\n", path, argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    if (sized && !device) {
        fprintf(stderr, "specd inspect: --n-ctx and --n-seq size the context --device makes\n");
        return 2;
    }
    specd_gguf *g;
    specd_error err;
    if (specd_gguf_create(path, &g, &err) != SPECD_OK) {
        fprintf(stderr, "specd inspect: %s\n", err.message);
        return 1;
    }
    /* the context first: a device that cannot run it fails before anything is printed */
    if (device && measure_context(path, &mem)) {
        specd_gguf_destroy(g);
        return 1;
    }
    specd_gguf_str arch = {NULL, 0};
    int has_arch = specd_gguf_get_str(g, "general.architecture", &arch, NULL) == SPECD_OK;
    /* what an artifact trained over this model records (policy/artifacts.h); a GGUF without a
     * tokenizer (a draft head) has none */
    uint64_t target = 0;
    int has_target = specd_target_fingerprint_of_gguf(g, &target, NULL) == SPECD_OK;
    if (o.json) {
        fputs("{\n  \"file\": ", o.f);
        json_string(o.f, path, strlen(path));
        fprintf(o.f,
                ",\n  \"gguf_version\": %u,\n  \"alignment\": %zu,\n  \"data_offset\": %llu,\n",
                specd_gguf_version(g), specd_gguf_alignment(g),
                (unsigned long long)specd_gguf_data_offset(g));
        fputs("  \"architecture\": ", o.f);
        if (has_arch)
            json_string(o.f, arch.ptr, arch.len);
        else
            fputs("null", o.f);
        if (has_target)
            fprintf(o.f, ",\n  \"target_fingerprint\": \"%016llx\"", (unsigned long long)target);
        else
            fputs(",\n  \"target_fingerprint\": null", o.f);
        fputs(",\n  \"hyperparameters\": {", o.f);
        print_keys(&o, g, arch, 1);
        fputs(",\n", o.f);
        print_tokenizer(&o, g);
        fputs(",\n  \"metadata\": {", o.f);
        print_keys(&o, g, arch, 0);
        fputs(",\n", o.f);
        print_tensors(&o, g);
        if (device) print_context(&o, &mem);
        fputs("\n}\n", o.f);
    } else {
        fprintf(o.f,
                "file           %s\ngguf           v%u, alignment %zu, %lld keys, %lld tensors\n",
                path, specd_gguf_version(g), specd_gguf_alignment(g),
                (long long)specd_gguf_key_count(g), (long long)specd_gguf_tensor_count(g));
        fputs("architecture   ", o.f);
        if (has_arch)
            text_str(o.f, arch.ptr, arch.len, 60);
        else
            fputs("(none)", o.f);
        if (has_target)
            fprintf(o.f, "\ntarget         %016llx (the fingerprint artifacts trained over it record)",
                    (unsigned long long)target);
        fputs("\n\nhyperparameters:\n", o.f);
        print_keys(&o, g, arch, 1);
        fputc('\n', o.f);
        print_tokenizer(&o, g);
        fputs("\nmetadata:\n", o.f);
        print_keys(&o, g, arch, 0);
        fputc('\n', o.f);
        print_tensors(&o, g);
        if (device) print_context(&o, &mem);
    }
    specd_gguf_destroy(g);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "specd inspect: cannot write the output\n");
        return 1;
    }
    return 0;
}
