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

#endif
