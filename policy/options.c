#include "policy/options.h"

#include "common/status_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static specd_status set_int(const char *policy, const specd_option_spec *o, const char *val,
                            size_t len, specd_error *err) {
    char buf[32];
    if (len == 0 || len >= sizeof buf)
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: option %s needs a number", policy,
                          o->key);
    memcpy(buf, val, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno || *end)
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: option %s=%s is not an integer",
                          policy, o->key, buf);
    if (v < o->min || v > o->max)
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: option %s=%ld is outside [%d, %d]",
                          policy, o->key, v, o->min, o->max);
    *o->value = (int32_t)v;
    return SPECD_OK;
}

specd_status specd_options_parse(const char *policy, const char *options,
                                 const specd_option_spec *ints, int32_t n_ints,
                                 const specd_option_str *strs, int32_t n_strs, specd_error *err) {
    const char *p = options ? options : "";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq)
            return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: option '%.*s' is not key=value",
                              policy, (int)len, p);
        size_t klen = (size_t)(eq - p);
        const char *val = eq + 1;
        size_t vlen = len - klen - 1;
        int found = 0;
        for (int32_t i = 0; i < n_ints && !found; i++)
            if (strlen(ints[i].key) == klen && !memcmp(ints[i].key, p, klen)) {
                SPECD_TRY(set_int(policy, &ints[i], val, vlen, err));
                found = 1;
            }
        for (int32_t i = 0; i < n_strs && !found; i++)
            if (strlen(strs[i].key) == klen && !memcmp(strs[i].key, p, klen)) {
                if (vlen == 0 || vlen >= (size_t)strs[i].cap)
                    return specd_fail(err, SPECD_E_INVALID_ARG,
                                      "policy %s: option %s has an empty or too long value", policy,
                                      strs[i].key);
                memcpy(strs[i].value, val, vlen);
                strs[i].value[vlen] = '\0';
                found = 1;
            }
        if (!found)
            return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: unknown option '%.*s'", policy,
                              (int)klen, p);
        p += len + (end ? 1 : 0);
    }
    return SPECD_OK;
}

specd_status specd_option_float(const char *policy, const char *key, const char *text, float lo,
                                float hi, float *out, specd_error *err) {
    if (!text[0]) return SPECD_OK;
    char *end;
    const float v = strtof(text, &end);
    if (*end || !(v >= lo && v <= hi))
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: %s=%s (want a number in [%g, %g])",
                          policy, key, text, (double)lo, (double)hi);
    *out = v;
    return SPECD_OK;
}
