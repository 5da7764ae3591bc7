/* A policy's "key=value,key=value" options, parsed against the table that declares them
 * (specd_policy_option, include/specd/policy.h), and the table printed for people. */
#ifndef SPECD_POLICY_OPTIONS_H
#define SPECD_POLICY_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "specd/policy.h"
#include "specd/status.h"

typedef struct specd_option_table {
    const specd_policy_option *rows;
    int32_t n;
} specd_option_table;

#define SPECD_OPTION_TABLE(rows) {rows, (int32_t)(sizeof rows / sizeof rows[0])}

/* What bounds the rows flagged SPECD_OPTION_MAX_IS_DRAFT / _MAX_IS_LAYERS. */
typedef struct specd_option_bounds {
    int32_t max_draft;
    int32_t n_layer;
} specd_option_bounds;

/* Fills dst: first every row's default (rows without SPECD_OPTION_DEFAULT_DERIVED; a STRING or
 * PATH without one is ""), then each given key=value. Errors are SPECD_E_INVALID_ARG naming the
 * policy and the key: an unknown key (listing the valid ones), a missing '=', a value that is not
 * of the row's kind, out of range (naming the range) or not one of the choices (listing them).
 * options may be NULL or "". */
specd_status specd_options_parse_table(const char *policy, const specd_option_table *table,
                                       const specd_option_bounds *bounds, const char *options,
                                       void *dst, specd_error *err);

/* 1 when options ("key=value,...", may be NULL) gives key. */
int specd_options_has_key(const char *options, const char *key);

/* Writes the table, one row per option: key, type, default, range or choices, help. markdown:
 * a Markdown table (what docs/policies.md holds), else aligned plain text. */
void specd_options_print(FILE *out, const specd_option_table *table, int markdown);

#endif
