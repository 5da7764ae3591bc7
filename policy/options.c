#include "policy/options.h"

#include "common/status_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static double upper_bound(const specd_policy_option *o, const specd_option_bounds *b) {
    if (b && (o->flags & SPECD_OPTION_MAX_IS_DRAFT)) return b->max_draft;
    if (b && (o->flags & SPECD_OPTION_MAX_IS_LAYERS)) return b->n_layer;
    return o->max;
}

/* The index of val (len bytes) among choices "a|b|c", or -1. */
static int32_t choice_index(const char *choices, const char *val, size_t len) {
    int32_t i = 0;
    for (const char *p = choices; *p; i++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && !memcmp(p, val, len)) return i;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

static specd_status set_value(const char *policy, const specd_policy_option *o,
                              const specd_option_bounds *b, const char *val, size_t len,
                              void *dst, specd_error *err) {
    char *field = (char *)dst + o->offset;
    if (o->kind == SPECD_OPTION_STRING || o->kind == SPECD_OPTION_PATH) {
        if (len == 0 || len >= o->size)
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "policy %s: option %s has an empty or too long value", policy,
                              o->key);
        memcpy(field, val, len);
        field[len] = '\0';
        return SPECD_OK;
    }
    if (o->kind == SPECD_OPTION_ENUM) {
        int32_t i = choice_index(o->choices, val, len);
        if (i < 0)
            return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: option %s=%.*s (want one of %s)",
                              policy, o->key, (int)len, val, o->choices);
        memcpy(field, &i, sizeof i);
        return SPECD_OK;
    }
    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: option %s needs a number", policy,
                          o->key);
    memcpy(buf, val, len);
    buf[len] = '\0';
    const double lo = o->kind == SPECD_OPTION_BOOL ? 0 : o->min;
    const double hi = o->kind == SPECD_OPTION_BOOL ? 1 : upper_bound(o, b);
    char *end;
    errno = 0;
    if (o->kind == SPECD_OPTION_FLOAT) {
        const float v = strtof(buf, &end);
        if (end == buf || *end || !(v >= lo && v <= hi))
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "policy %s: option %s=%s (want a number in [%.10g, %.10g])", policy,
                              o->key, buf, lo, hi);
        memcpy(field, &v, sizeof v);
        return SPECD_OK;
    }
    const long v = strtol(buf, &end, 10);
    if (errno || end == buf || *end)
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: option %s=%s is not an integer",
                          policy, o->key, buf);
    if ((double)v < lo || (double)v > hi)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy %s: option %s=%ld is outside [%.10g, %.10g]", policy, o->key, v,
                          lo, hi);
    const int32_t v32 = (int32_t)v;
    memcpy(field, &v32, sizeof v32);
    return SPECD_OK;
}

static specd_status unknown_key(const char *policy, const specd_option_table *t, const char *key,
                                size_t len, specd_error *err) {
    char keys[512] = "";
    size_t used = 0;
    for (int32_t i = 0; i < t->n && used < sizeof keys; i++)
        used += (size_t)snprintf(keys + used, sizeof keys - used, "%s%s", i ? ", " : "",
                                 t->rows[i].key);
    return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: unknown option '%.*s' (%s%s)", policy,
                      (int)len, key, t->n ? "valid: " : "it takes no options", keys);
}

specd_status specd_options_parse_table(const char *policy, const specd_option_table *table,
                                       const specd_option_bounds *bounds, const char *options,
                                       void *dst, specd_error *err) {
    for (int32_t i = 0; i < table->n; i++) {
        const specd_policy_option *o = &table->rows[i];
        if (o->flags & SPECD_OPTION_DEFAULT_DERIVED) continue;
        if (o->dflt)
            SPECD_TRY(set_value(policy, o, NULL, o->dflt, strlen(o->dflt), dst, err));
        else if (o->kind == SPECD_OPTION_STRING || o->kind == SPECD_OPTION_PATH)
            ((char *)dst + o->offset)[0] = '\0';
    }
    const char *p = options ? options : "";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq)
            return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: option '%.*s' is not key=value",
                              policy, (int)len, p);
        size_t klen = (size_t)(eq - p);
        const specd_policy_option *o = NULL;
        for (int32_t i = 0; i < table->n && !o; i++)
            if (strlen(table->rows[i].key) == klen && !memcmp(table->rows[i].key, p, klen))
                o = &table->rows[i];
        if (!o) return unknown_key(policy, table, p, klen, err);
        SPECD_TRY(set_value(policy, o, bounds, eq + 1, len - klen - 1, dst, err));
        p += len + (end ? 1 : 0);
    }
    return SPECD_OK;
}

static const char *kind_name(specd_option_kind k) {
    switch (k) {
    case SPECD_OPTION_INT: return "int";
    case SPECD_OPTION_FLOAT: return "float";
    case SPECD_OPTION_BOOL: return "bool";
    case SPECD_OPTION_ENUM: return "enum";
    case SPECD_OPTION_STRING: return "string";
    case SPECD_OPTION_PATH: return "path";
    }
    return "?";
}

/* "1..16", "0..max_draft", "lossless|stream|block" or "" */
static void describe_range(const specd_policy_option *o, char *buf, size_t cap) {
    buf[0] = '\0';
    if (o->kind == SPECD_OPTION_ENUM)
        snprintf(buf, cap, "%s", o->choices);
    else if (o->kind == SPECD_OPTION_BOOL)
        snprintf(buf, cap, "0|1");
    else if (o->kind == SPECD_OPTION_INT || o->kind == SPECD_OPTION_FLOAT) {
        char hi[32];
        if (o->flags & SPECD_OPTION_MAX_IS_DRAFT)
            snprintf(hi, sizeof hi, "max_draft");
        else if (o->flags & SPECD_OPTION_MAX_IS_LAYERS)
            snprintf(hi, sizeof hi, "n_layer");
        else
            snprintf(hi, sizeof hi, "%.10g", o->max);
        snprintf(buf, cap, "%.10g..%s", o->min, hi);
    }
}

static const char *default_text(const specd_policy_option *o, char *buf, size_t cap) {
    const char *d = o->flags & SPECD_OPTION_REQUIRED ? "required" : o->dflt ? o->dflt : "none";
    if (!o->artifact) return d;
    snprintf(buf, cap, "%s (matched to the target: %s)", d, o->artifact);
    return buf;
}

void specd_options_print(FILE *out, const specd_option_table *t, int markdown) {
    char range[256], dflt[256];
    if (t->n == 0) {
        fprintf(out, markdown ? "No options.\n" : "(no options)\n");
        return;
    }
    if (markdown) {
        fprintf(out, "| key | type | default | range | meaning |\n|---|---|---|---|---|\n");
        for (int32_t i = 0; i < t->n; i++) {
            const specd_policy_option *o = &t->rows[i];
            describe_range(o, range, sizeof range);
            for (char *c = range; *c; c++)
                if (*c == '|') *c = '/'; /* a bar would split the cell */
            fprintf(out, "| `%s` | %s | %s | %s | %s |\n", o->key, kind_name(o->kind),
                    default_text(o, dflt, sizeof dflt), range[0] ? range : "-", o->help);
        }
        return;
    }
    int w_key = 3, w_def = 7, w_range = 5;
    for (int32_t i = 0; i < t->n; i++) {
        const specd_policy_option *o = &t->rows[i];
        describe_range(o, range, sizeof range);
        int k = (int)strlen(o->key), d = (int)strlen(default_text(o, dflt, sizeof dflt));
        int r = (int)strlen(range);
        w_key = k > w_key ? k : w_key;
        w_def = d > w_def ? d : w_def;
        w_range = r > w_range ? r : w_range;
    }
    fprintf(out, "%-*s  %-6s  %-*s  %-*s  %s\n", w_key, "key", "type", w_def, "default", w_range,
            "range", "meaning");
    for (int32_t i = 0; i < t->n; i++) {
        const specd_policy_option *o = &t->rows[i];
        describe_range(o, range, sizeof range);
        fprintf(out, "%-*s  %-6s  %-*s  %-*s  %s\n", w_key, o->key, kind_name(o->kind), w_def,
                default_text(o, dflt, sizeof dflt), w_range, range, o->help);
    }
}

int specd_options_has_key(const char *options, const char *key) {
    const size_t klen = strlen(key);
    for (const char *p = options ? options : ""; *p;) {
        if (!strncmp(p, key, klen) && p[klen] == '=') return 1;
        const char *comma = strchr(p, ',');
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}
