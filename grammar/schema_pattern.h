/* JSON Schema string patterns to GBNF (schema_pattern.c). */
#ifndef SPECD_GRAMMAR_SCHEMA_PATTERN_H
#define SPECD_GRAMMAR_SCHEMA_PATTERN_H

#include <stddef.h>

#include "grammar/sbuf.h"
#include "specd/status.h"

/* Appends to b a GBNF expression for a JSON string (quotes included) whose content matches the
 * regex pat[0..n) (JSON escapes of the schema already undone). Unsupported constructs are
 * SPECD_E_UNSUPPORTED and malformed ones SPECD_E_FORMAT, with err naming them. */
specd_status gram_pattern_gbnf(const char *pat, size_t n, sbuf *b, specd_error *err);

/* Records a schema refusal: when *st is still SPECD_OK, sets it to code and fills err with
 * "json schema: " and the message. Returns 0 (for `return refuse(...)`). */
int gram_schema_refuse(specd_error *err, specd_status *st, specd_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
