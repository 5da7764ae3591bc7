#include "policy/artifacts.h"

#include "common/status_internal.h"
#include "ipc/fingerprint.h"
#include "model/runtime/json.h"
#include "policy/options.h"
#include "specd/tokenizer.h"

#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGML_TYPE_F32 0u

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* A u32 hyperparameter "<arch>.<name>", 0 when absent (then it hashes as absent). */
static uint32_t hparam(const specd_gguf *g, const specd_gguf_str *arch, const char *name) {
    char key[160];
    snprintf(key, sizeof key, "%.*s.%s", (int)(arch->len < 64 ? arch->len : 64), arch->ptr, name);
    uint32_t v = 0;
    if (specd_gguf_get_u32(g, key, &v, NULL) != SPECD_OK) v = 0;
    return v;
}

/* The norm weight called name: its bytes when it is F32, else a marker (a model that keeps its
 * norms otherwise is told apart by the marker and its shape). */
static uint64_t hash_norm(uint64_t h, const specd_gguf *g, const char *name) {
    const specd_gguf_tensor *t = specd_gguf_tensor_find(g, name);
    h = fnv(h, name, strlen(name) + 1);
    if (!t) return fnv(h, "absent", 6);
    if (t->type != GGML_TYPE_F32 || t->n_dims != 1) return fnv(h, t->ne, sizeof t->ne);
    return fnv(h, t->data, (size_t)t->n_bytes);
}

specd_status specd_target_fingerprint_of_gguf(const specd_gguf *g, uint64_t *out,
                                              specd_error *err) {
    if (!g || !out)
        return specd_fail(err, SPECD_E_INVALID_ARG, "target fingerprint: NULL argument");
    specd_tokenizer *tok = NULL;
    specd_ipc_fingerprint tf;
    specd_status st = specd_tokenizer_create_from_gguf(g, &tok, err);
    if (st == SPECD_OK) st = specd_ipc_fingerprint_of_tokenizer(tok, &tf, err);
    specd_tokenizer_destroy(tok);
    if (st != SPECD_OK) return st;
    specd_gguf_str arch = {"", 0};
    if (specd_gguf_get_str(g, "general.architecture", &arch, NULL) != SPECD_OK)
        return specd_fail(err, SPECD_E_FORMAT, "target fingerprint: no general.architecture");
    uint64_t h = 0xcbf29ce484222325ULL;
    h = fnv(h, &tf.vocab_size, sizeof tf.vocab_size);
    h = fnv(h, &tf.tokenizer_hash, sizeof tf.tokenizer_hash);
    h = fnv(h, arch.ptr, (size_t)arch.len);
    static const char *const shape[] = {"block_count", "embedding_length", "feed_forward_length",
                                        "attention.head_count", "attention.head_count_kv"};
    uint32_t n_layer = 0;
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        uint32_t v = hparam(g, &arch, shape[i]);
        if (i == 0) n_layer = v;
        h = fnv(h, &v, sizeof v);
    }
    /* by name, in layer order: the file's tensor order is the converter's, not the model's */
    char name[64];
    for (uint32_t l = 0; l < n_layer && l < 4096; l++) {
        snprintf(name, sizeof name, "blk.%" PRIu32 ".attn_norm.weight", l);
        h = hash_norm(h, g, name);
        snprintf(name, sizeof name, "blk.%" PRIu32 ".ffn_norm.weight", l);
        h = hash_norm(h, g, name);
    }
    *out = hash_norm(h, g, "output_norm.weight");
    return SPECD_OK;
}

specd_status specd_policy_target_fingerprint(const char *path, uint64_t *out, specd_error *err) {
    if (!path || !out)
        return specd_fail(err, SPECD_E_INVALID_ARG, "target fingerprint: NULL argument");
    specd_gguf *g = NULL;
    SPECD_TRY(specd_gguf_create(path, &g, err));
    specd_status st = specd_target_fingerprint_of_gguf(g, out, err);
    specd_gguf_destroy(g);
    return st;
}

/* --- records ------------------------------------------------------------------------------- */

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

specd_status specd_artifact_target(const char *artifact, uint64_t *out, specd_error *err) {
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, is_dir(artifact) ? "%s/target.json" : "%s.target.json",
                         artifact) >= sizeof path)
        return specd_fail(err, SPECD_E_INVALID_ARG, "artifact %s: path too long", artifact);
    FILE *f = fopen(path, "rb");
    if (!f) return specd_fail(err, SPECD_E_IO, "artifact %s: no target record %s", artifact, path);
    char text[4097]; /* a record is a few lines: one byte more than we take says it is not one */
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    if (len == sizeof text)
        return specd_fail(err, SPECD_E_FORMAT, "%s: larger than %zu bytes", path, sizeof text - 1);
    text[len] = '\0';
    rt_json j;
    SPECD_TRY(rt_json_parse(text, len, &j, err));
    const uint32_t i = rt_json_get(&j, 0, "target_fingerprint");
    specd_status st = SPECD_OK;
    char hex[17] = {0};
    if (!i || j.nodes[i].type != RT_JSON_STRING || j.nodes[i].end - j.nodes[i].start != 16)
        st = specd_fail(err, SPECD_E_FORMAT, "%s: target_fingerprint is not 16 hex digits", path);
    else
        memcpy(hex, text + j.nodes[i].start, 16);
    rt_json_free(&j);
    if (st != SPECD_OK) return st;
    uint64_t v = 0;
    for (int k = 0; k < 16; k++) {
        const char c = hex[k];
        const int d = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
        if (d < 0)
            return specd_fail(err, SPECD_E_FORMAT, "%s: target_fingerprint is not 16 hex digits",
                              path);
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return SPECD_OK;
}

/* --- finding one --------------------------------------------------------------------------- */

/* a PEFT adapter directory, or a readable file */
static int usable(const char *path) {
    if (!is_dir(path)) return access(path, R_OK) == 0;
    char config[PATH_MAX + 32];
    snprintf(config, sizeof config, "%s/adapter_config.json", path);
    return access(config, R_OK) == 0;
}

static int matches(const char *path, uint64_t fp) {
    uint64_t want = 0;
    return usable(path) && specd_artifact_target(path, &want, NULL) == SPECD_OK && want == fp;
}

const char *specd_artifact_find(const char *rel, const char *env_var, uint64_t fp, char *buf,
                                size_t cap) {
    const char *env = env_var ? getenv(env_var) : NULL;
    if (env && *env) {
        snprintf(buf, cap, "%s", env);
        return usable(buf) ? buf : NULL;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        snprintf(buf, cap, "%s/../share/specd/%s", dirname(exe), rel);
        if (matches(buf, fp)) return buf;
    }
#ifdef SPECD_SOURCE_DIR
    snprintf(buf, cap, "%s/artifacts/%s", SPECD_SOURCE_DIR, rel);
    if (matches(buf, fp)) return buf;
#endif
    return NULL;
}

specd_status specd_policy_default_options(const char *policy, uint64_t fp, const char *options,
                                          char *out, size_t cap, specd_error *err) {
    if (!policy || !out || cap == 0)
        return specd_fail(err, SPECD_E_INVALID_ARG, "default options: NULL argument");
    const char *given = options ? options : "";
    if ((size_t)snprintf(out, cap, "%s", given) >= cap)
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: options longer than %zu bytes",
                          policy, cap - 1);
    int32_t n = 0;
    const specd_policy_option *rows = specd_policy_options_table(policy, &n);
    for (int32_t i = 0; i < n; i++) {
        const specd_policy_option *r = &rows[i];
        if (!r->artifact || specd_options_has_key(given, r->key)) continue;
        char path[PATH_MAX];
        if (!specd_artifact_find(r->artifact, r->artifact_env, fp, path, sizeof path)) {
            if (!(r->flags & SPECD_OPTION_ARTIFACT_NEEDED)) continue;
            const char *env = r->artifact_env ? getenv(r->artifact_env) : NULL;
            if (env && *env)
                return specd_fail(err, SPECD_E_INVALID_ARG,
                                  "policy %s needs %s=PATH: $%s names %s, which is not usable",
                                  policy, r->key, r->artifact_env, env);
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "policy %s needs %s=PATH: no %s trained over this target "
                              "(fingerprint %016" PRIx64 ") was found (the one specd ships, %s, "
                              "is absent or for another model); it will not run untrained",
                              policy, r->key, r->key, fp, r->artifact);
        }
        size_t used = strlen(out);
        if ((size_t)snprintf(out + used, cap - used, "%s%s=%s", used ? "," : "", r->key, path) >=
            cap - used) {
            out[used] = '\0';
            return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: options longer than %zu bytes",
                              policy, cap - 1);
        }
    }
    return SPECD_OK;
}
