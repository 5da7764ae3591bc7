/* A growable text buffer for the GBNF the schema compiler writes (schema.c, schema_pattern.c).
 * A failed allocation sets oom and makes later writes no-ops, so callers check once at the end. */
#ifndef SPECD_GRAMMAR_SBUF_H
#define SPECD_GRAMMAR_SBUF_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"

typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static inline void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *ns = specd_alloc(cap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        if (b->n) memcpy(ns, b->s, b->n);
        specd_free(b->s);
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static inline void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *tmp = n >= 0 ? specd_alloc((size_t)n + 1) : NULL;
    if (!tmp)
        b->oom = 1;
    else {
        vsnprintf(tmp, (size_t)n + 1, fmt, ap2);
        sb_put(b, tmp, (size_t)n);
    }
    va_end(ap2);
    specd_free(tmp);
}

#endif
