/* PEFT LoRA adapters: adapter_config.json (r, lora_alpha, target_modules) plus
 * adapter_model.safetensors with, per adapted projection of layer L,
 *   base_model.model.model.layers.L.{self_attn|mlp}.<module>.lora_A.weight  [r, in]
 *   base_model.model.model.layers.L.{self_attn|mlp}.<module>.lora_B.weight  [out, r]
 * Held as f32. For arch llama, GGUF's Q and K rows are permuted (llama.cpp's converter interleaves
 * each head's halves for its adjacent-pair RoPE), so B's rows for q_proj/k_proj get the same
 * permutation, as llama.cpp's convert_lora_to_gguf does.
 *
 * specd's extension for ISD (tools/train/export_adapter.py): "specd_mask_embedding": true in the
 * config and a tensor mask_embedding [n_embd] carry the trained input vector of the mask rows. Both
 * or neither: a flag without its tensor or a tensor without its flag is refused, as is a vector of
 * the wrong length or with a non-finite entry (it would feed NaN into every mask row). */
#include "model/runtime/runtime_internal.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "model/runtime/json.h"
#include "model/runtime/safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const modules[RT_N_PROJ] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                               "gate_proj", "up_proj", "down_proj"};

static specd_status read_file(const char *dir, const char *name, size_t max, uint8_t **out,
                              size_t *len, specd_error *err) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return specd_fail(err, SPECD_E_INVALID_ARG, "lora: path too long");
    FILE *f = fopen(path, "rb");
    if (!f) return specd_fail(err, SPECD_E_IO, "lora: cannot open %s: %s", path, strerror(errno));
    long sz = -1;
    if (fseek(f, 0, SEEK_END) == 0) sz = ftell(f);
    if (sz < 0 || (size_t)sz > max || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return specd_fail(err, SPECD_E_FORMAT, "lora: %s: size unreadable or above %zu bytes", path,
                          max);
    }
    uint8_t *buf = specd_alloc((size_t)sz + 1);
    if (!buf) {
        fclose(f);
        return specd_fail(err, SPECD_E_NOMEM, "lora: out of memory for %s", path);
    }
    size_t got = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    if (got != (size_t)sz) {
        specd_free(buf);
        return specd_fail(err, SPECD_E_IO, "lora: short read of %s", path);
    }
    buf[sz] = 0;
    *out = buf;
    *len = (size_t)sz;
    return SPECD_OK;
}

static int module_index(const char *s, size_t n) {
    for (int p = 0; p < RT_N_PROJ; p++)
        if (strlen(modules[p]) == n && !memcmp(s, modules[p], n)) return p;
    return -1;
}

/* adapter_config.json's "specd_mask_embedding": 1 for true, 0 for false or absent. */
static specd_status mask_flag(const rt_json *j, int *out, specd_error *err) {
    const uint32_t i = rt_json_get(j, 0, "specd_mask_embedding");
    const rt_json_node *n = i ? &j->nodes[i] : NULL;
    const size_t len = n ? n->end - n->start : 0;
    *out = 0;
    if (!n) return SPECD_OK;
    if (n->type == RT_JSON_PRIMITIVE && len == 4 && !memcmp(j->text + n->start, "true", 4))
        *out = 1;
    else if (!(n->type == RT_JSON_PRIMITIVE && len == 5 && !memcmp(j->text + n->start, "false", 5)))
        return specd_fail(err, SPECD_E_FORMAT,
                          "lora: adapter_config.json: specd_mask_embedding must be true or false");
    return SPECD_OK;
}

static specd_status read_config(const specd_model *m, const char *dir, specd_lora *lo, int *targets,
                                int *want_mask, specd_error *err) {
    uint8_t *buf;
    size_t len;
    SPECD_TRY(read_file(dir, "adapter_config.json", 1 << 20, &buf, &len, err));
    rt_json j;
    specd_status st = rt_json_parse((const char *)buf, len, &j, err);
    if (st != SPECD_OK) {
        specd_free(buf);
        return st;
    }
    double r = 0, alpha = 0;
    const uint32_t ri = rt_json_get(&j, 0, "r"), ai = rt_json_get(&j, 0, "lora_alpha"),
                   ti = rt_json_get(&j, 0, "target_modules"),
                   fi = rt_json_get(&j, 0, "fan_in_fan_out"), di = rt_json_get(&j, 0, "use_dora");
    if (!ri || !rt_json_number(&j, ri, &r) || r < 1 || r > 4096 || r != (int)r)
        st = specd_fail(err, SPECD_E_FORMAT, "lora: adapter_config.json: r missing or not 1..4096");
    else if (!ai || !rt_json_number(&j, ai, &alpha) || alpha == 0)
        st = specd_fail(err, SPECD_E_FORMAT, "lora: adapter_config.json: lora_alpha missing or 0");
    else if (!ti || j.nodes[ti].type != RT_JSON_ARRAY)
        st = specd_fail(err, SPECD_E_FORMAT,
                        "lora: adapter_config.json: target_modules must be a list");
    else if ((fi && (j.nodes[fi].end - j.nodes[fi].start != 5)) ||
             (di && (j.nodes[di].end - j.nodes[di].start != 5)))
        st =
            specd_fail(err, SPECD_E_UNSUPPORTED, "lora: fan_in_fan_out and DoRA are not supported");
    for (uint32_t k = 0; st == SPECD_OK && k < j.nodes[ti].size; k++) {
        const rt_json_node *t = &j.nodes[ti + 1 + k];
        int p = t->type == RT_JSON_STRING ? module_index(j.text + t->start, t->end - t->start) : -1;
        if (p < 0)
            st = specd_fail(err, SPECD_E_UNSUPPORTED, "lora: unknown target module '%.*s'",
                            (int)(t->end - t->start > 40 ? 40 : t->end - t->start),
                            j.text + t->start);
        else
            targets[p] = 1;
    }
    if (st == SPECD_OK) st = mask_flag(&j, want_mask, err);
    rt_json_free(&j);
    specd_free(buf);
    if (st != SPECD_OK) return st;
    lo->rank = (int32_t)r;
    lo->scale = (float)alpha / (float)r;
    (void)m;
    return SPECD_OK;
}

/* "...layers.<L>.<self_attn|mlp>.<module>.lora_<A|B>.weight" -> L, module, is_b. */
static int parse_name(const char *s, size_t n, int32_t *layer, int *proj, int *is_b) {
    static const char tail_a[] = ".lora_A.weight", tail_b[] = ".lora_B.weight";
    const size_t tl = sizeof tail_a - 1;
    if (n <= tl) return 0;
    if (!memcmp(s + n - tl, tail_a, tl))
        *is_b = 0;
    else if (!memcmp(s + n - tl, tail_b, tl))
        *is_b = 1;
    else
        return 0;
    const size_t end = n - tl;
    size_t dot = end;
    while (dot > 0 && s[dot - 1] != '.')
        dot--;
    *proj = module_index(s + dot, end - dot);
    const char *lp = NULL;
    for (size_t i = 0; i + 7 <= n; i++)
        if (!memcmp(s + i, "layers.", 7)) lp = s + i + 7;
    if (!lp) return 0;
    long v = 0;
    int digits = 0;
    while (lp < s + n && *lp >= '0' && *lp <= '9' && digits < 7)
        v = v * 10 + (*lp++ - '0'), digits++;
    if (!digits || lp >= s + n || *lp != '.') return 0;
    *layer = (int32_t)v;
    return 1;
}

static const char mask_name[] = "mask_embedding";

static int is_mask_tensor(const rt_st_tensor *t) {
    return t->name_len == sizeof mask_name - 1 && !memcmp(t->name, mask_name, t->name_len);
}

/* The mask embedding tensor: [n_embd] (n_embd < 0: any length), every entry finite. */
static specd_status read_mask(const rt_st_tensor *t, int64_t n_embd, float **out, int32_t *n,
                              specd_error *err) {
    if (*out) return specd_fail(err, SPECD_E_FORMAT, "lora: tensor %s given twice", mask_name);
    if (t->n_dims != 1 || t->shape[0] < 1 || t->shape[0] > INT32_MAX ||
        (n_embd >= 0 && t->shape[0] != n_embd))
        return specd_fail(err, SPECD_E_MISMATCH,
                          "lora: tensor %s: %d dims, length %lld; expected one dim of the "
                          "model's n_embd %lld",
                          mask_name, t->n_dims, (long long)t->shape[0], (long long)n_embd);
    const size_t len = (size_t)t->shape[0];
    float *v = specd_alloc_array(len, sizeof(float));
    if (!v) return specd_fail(err, SPECD_E_NOMEM, "lora: out of memory");
    for (size_t i = 0; i < len; i++) {
        v[i] = rt_st_get(t, i);
        if (!isfinite(v[i])) {
            specd_free(v);
            return specd_fail(err, SPECD_E_FORMAT, "lora: tensor %s: entry %zu is not finite",
                              mask_name, i);
        }
    }
    *out = v;
    *n = (int32_t)len;
    return SPECD_OK;
}

static specd_status load_weights(const specd_model *m, const uint8_t *buf, size_t len,
                                 specd_lora *lo, const int *targets, int want_mask,
                                 specd_error *err) {
    rt_st_file f;
    SPECD_TRY(rt_st_parse(buf, len, &f, err));
    const specd_model_info *in = &m->info;
    specd_status st = SPECD_OK;
    const int64_t r = lo->rank;
    for (uint32_t i = 0; st == SPECD_OK && i < f.n; i++) {
        const rt_st_tensor *t = &f.tensors[i];
        const int nl = (int)(t->name_len > 100 ? 100 : t->name_len);
        int32_t layer;
        int proj, is_b;
        if (is_mask_tensor(t)) {
            if (!want_mask) {
                st = specd_fail(err, SPECD_E_FORMAT,
                                "lora: tensor %s without \"specd_mask_embedding\": true in "
                                "adapter_config.json", mask_name);
                break;
            }
            st = read_mask(t, in->n_embd, &lo->mask_embd, &lo->n_mask_embd, err);
            continue;
        }
        if (!parse_name(t->name, t->name_len, &layer, &proj, &is_b)) {
            st = specd_fail(err, SPECD_E_FORMAT, "lora: tensor %.*s is not a LoRA A/B weight", nl,
                            t->name);
            break;
        }
        if (proj < 0 || !targets[proj]) {
            st = specd_fail(err, SPECD_E_UNSUPPORTED, "lora: tensor %.*s: unknown module", nl,
                            t->name);
            break;
        }
        if (layer >= in->n_layer) {
            st = specd_fail(err, SPECD_E_MISMATCH, "lora: tensor %.*s: layer %d of %d", nl, t->name,
                            layer, in->n_layer);
            break;
        }
        const int64_t rows = is_b ? lo->n_out[proj] : r, cols = is_b ? r : lo->n_in[proj];
        if (t->n_dims != 2 || t->shape[0] != rows || t->shape[1] != cols) {
            st = specd_fail(err, SPECD_E_MISMATCH,
                            "lora: tensor %.*s: shape [%lld, %lld], expected [%lld, %lld]", nl,
                            t->name, (long long)t->shape[0],
                            (long long)(t->n_dims > 1 ? t->shape[1] : 0), (long long)rows,
                            (long long)cols);
            break;
        }
        rt_lora_pair *pr = &lo->pairs[(size_t)layer * RT_N_PROJ + (size_t)proj];
        float **dst = is_b ? &pr->b : &pr->a;
        if (*dst) {
            st = specd_fail(err, SPECD_E_FORMAT, "lora: tensor %.*s given twice", nl, t->name);
            break;
        }
        *dst = specd_alloc_array((size_t)(rows * cols), sizeof(float));
        if (!*dst) {
            st = specd_fail(err, SPECD_E_NOMEM, "lora: out of memory");
            break;
        }
        const int permute = is_b && in->arch == SPECD_ARCH_LLAMA && (proj == RT_Q || proj == RT_K);
        const int64_t hd = in->head_dim;
        for (int64_t row = 0; row < rows; row++) {
            /* GGUF row h*hd + 2i + j holds HF row h*hd + j*hd/2 + i */
            int64_t src = row;
            if (permute) {
                const int64_t h = row / hd, w = row % hd;
                src = h * hd + (w % 2) * (hd / 2) + w / 2;
            }
            for (int64_t col = 0; col < cols; col++)
                (*dst)[row * cols + col] = rt_st_get(t, (size_t)(src * cols + col));
        }
    }
    for (int32_t l = 0; st == SPECD_OK && l < in->n_layer; l++)
        for (int p = 0; p < RT_N_PROJ; p++) {
            const rt_lora_pair *pr = &lo->pairs[(size_t)l * RT_N_PROJ + (size_t)p];
            if (!pr->a != !pr->b) {
                st = specd_fail(err, SPECD_E_FORMAT,
                                "lora: layer %d %s has lora_%s without its pair", l, modules[p],
                                pr->a ? "A" : "B");
                break;
            }
        }
    if (st == SPECD_OK && want_mask && !lo->mask_embd)
        st = specd_fail(err, SPECD_E_FORMAT,
                        "lora: adapter_config.json sets specd_mask_embedding but "
                        "adapter_model.safetensors has no tensor %s", mask_name);
    rt_st_free(&f);
    return st;
}

specd_status specd_lora_create(const specd_model *model, const char *dir, specd_lora **out,
                               specd_error *err) {
    if (!model || !dir || !out)
        return specd_fail(err, SPECD_E_INVALID_ARG, "lora: model, dir or out is NULL");
    const specd_model_info *in = &model->info;
    specd_lora *lo = specd_alloc_array(1, sizeof *lo);
    if (!lo) return specd_fail(err, SPECD_E_NOMEM, "lora: out of memory");
    lo->n_layer = in->n_layer;
    for (int p = 0; p < RT_N_PROJ; p++) {
        lo->n_in[p] = model->layers[0].w[p].n_in;
        lo->n_out[p] = model->layers[0].w[p].n_out;
    }
    lo->pairs = specd_alloc_array((size_t)in->n_layer * RT_N_PROJ, sizeof *lo->pairs);
    int targets[RT_N_PROJ] = {0}, want_mask = 0;
    specd_status st = lo->pairs ? SPECD_OK : specd_fail(err, SPECD_E_NOMEM, "lora: out of memory");
    if (st == SPECD_OK) st = read_config(model, dir, lo, targets, &want_mask, err);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (st == SPECD_OK)
        st = read_file(dir, "adapter_model.safetensors", (size_t)1 << 32, &buf, &len, err);
    if (st == SPECD_OK) st = load_weights(model, buf, len, lo, targets, want_mask, err);
    specd_free(buf);
    if (st != SPECD_OK) {
        specd_lora_destroy(lo);
        return st;
    }
    *out = lo;
    return SPECD_OK;
}

void specd_lora_destroy(specd_lora *lora) {
    if (!lora) return;
    if (lora->pairs)
        for (size_t i = 0; i < (size_t)lora->n_layer * RT_N_PROJ; i++) {
            specd_free(lora->pairs[i].a);
            specd_free(lora->pairs[i].b);
        }
    specd_free(lora->pairs);
    specd_free(lora->mask_embd);
    specd_free(lora);
}

int32_t specd_lora_rank(const specd_lora *lora) {
    return lora ? lora->rank : 0;
}

/* --- the trained mask embedding ------------------------------------------------------------ */

const float *specd_lora_mask_embedding(const specd_lora *lora, int32_t *n_embd) {
    const float *v = lora ? lora->mask_embd : NULL;
    if (n_embd) *n_embd = v ? lora->n_mask_embd : 0;
    return v;
}

specd_status specd_lora_read_mask_embedding(const char *dir, float *out, int32_t cap,
                                            int32_t *n_embd, specd_error *err) {
    if (!dir || !n_embd || cap < 0 || (cap > 0 && !out))
        return specd_fail(err, SPECD_E_INVALID_ARG, "lora: dir, n_embd or out is NULL");
    *n_embd = 0;
    uint8_t *buf = NULL;
    size_t len = 0;
    int want = 0;
    SPECD_TRY(read_file(dir, "adapter_config.json", 1 << 20, &buf, &len, err));
    rt_json j;
    specd_status st = rt_json_parse((const char *)buf, len, &j, err);
    if (st == SPECD_OK) {
        st = mask_flag(&j, &want, err);
        rt_json_free(&j);
    }
    specd_free(buf);
    if (st != SPECD_OK) return st;
    /* read even without the flag: a tensor without it is refused here as specd_lora_create does */
    SPECD_TRY(read_file(dir, "adapter_model.safetensors", (size_t)1 << 32, &buf, &len, err));
    rt_st_file f;
    if ((st = rt_st_parse(buf, len, &f, err)) != SPECD_OK) {
        specd_free(buf);
        return st;
    }
    float *v = NULL;
    int32_t n = 0;
    for (uint32_t i = 0; st == SPECD_OK && i < f.n; i++) {
        if (!is_mask_tensor(&f.tensors[i])) continue;
        if (!want)
            st = specd_fail(err, SPECD_E_FORMAT,
                            "lora: tensor %s without \"specd_mask_embedding\": true in "
                            "adapter_config.json", mask_name);
        else
            st = read_mask(&f.tensors[i], -1, &v, &n, err);
    }
    if (st == SPECD_OK && want && !v)
        st = specd_fail(err, SPECD_E_FORMAT,
                        "lora: adapter_config.json sets specd_mask_embedding but "
                        "adapter_model.safetensors has no tensor %s", mask_name);
    if (st == SPECD_OK && out && n > cap)
        st = specd_fail(err, SPECD_E_INVALID_ARG, "lora: mask embedding has %d floats, room for %d",
                        n, cap);
    if (st == SPECD_OK && v) {
        if (out) memcpy(out, v, (size_t)n * sizeof(float));
        *n_embd = n;
    }
    specd_free(v);
    rt_st_free(&f);
    specd_free(buf);
    return st;
}

specd_status specd_lora_read_info(const char *dir, specd_lora_info *out, specd_error *err) {
    if (!dir || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "lora: dir or out is NULL");
    *out = (specd_lora_info){.shift = -1};
    uint8_t *buf;
    size_t len;
    SPECD_TRY(read_file(dir, "adapter_config.json", 1 << 20, &buf, &len, err));
    rt_json j;
    specd_status st = rt_json_parse((const char *)buf, len, &j, err);
    if (st != SPECD_OK) {
        specd_free(buf);
        return st;
    }
    const uint32_t oi = rt_json_get(&j, 0, "specd_objective"), si = rt_json_get(&j, 0, "specd_shift"),
                   bi = rt_json_get(&j, 0, "specd_block");
    double v;
    if (oi) {
        const rt_json_node *n = &j.nodes[oi];
        if (n->type != RT_JSON_STRING || n->end - n->start >= sizeof out->objective)
            st = specd_fail(err, SPECD_E_FORMAT,
                            "lora: adapter_config.json: specd_objective must be a short string");
        else
            memcpy(out->objective, j.text + n->start, n->end - n->start);
    }
    if (st == SPECD_OK && si) {
        if (!rt_json_number(&j, si, &v) || (v != 0 && v != 1))
            st = specd_fail(err, SPECD_E_FORMAT, "lora: adapter_config.json: specd_shift must be 0 or 1");
        else
            out->shift = (int32_t)v;
    }
    if (st == SPECD_OK && bi) {
        if (!rt_json_number(&j, bi, &v) || v < 1 || v > 4096 || v != (int32_t)v)
            st = specd_fail(err, SPECD_E_FORMAT,
                            "lora: adapter_config.json: specd_block must be 1..4096");
        else
            out->block = (int32_t)v;
    }
    rt_json_free(&j);
    specd_free(buf);
    return st;
}
