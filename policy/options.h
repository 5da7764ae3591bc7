/* Parses a policy's "key=value,key=value" option string. */
#ifndef SPECD_POLICY_OPTIONS_H
#define SPECD_POLICY_OPTIONS_H

#include <stdint.h>

#include "specd/status.h"

typedef struct specd_option_spec {
    const char *key;
    int32_t *value;   /* integer options only; written when the key is present */
    int32_t min, max; /* inclusive range */
} specd_option_spec;

typedef struct specd_option_str {
    const char *key;
    char *value; /* string options; written NUL-terminated when the key is present */
    int32_t cap;
} specd_option_str;

/* Unknown keys, missing '=', non-numbers and out-of-range values are SPECD_E_INVALID_ARG naming
 * the policy and the key. options may be NULL or "". */
specd_status specd_options_parse(const char *policy, const char *options,
                                 const specd_option_spec *ints, int32_t n_ints,
                                 const specd_option_str *strs, int32_t n_strs, specd_error *err);

/* A float option read as a string option: text "" (the key was absent) leaves *out as it is;
 * otherwise a number in [lo, hi] or SPECD_E_INVALID_ARG naming the policy, the key and the range.
 */
specd_status specd_option_float(const char *policy, const char *key, const char *text, float lo,
                                float hi, float *out, specd_error *err);

#endif
