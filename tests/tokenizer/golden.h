/* Reading tests/data/tokenizer_golden.tsv (written by scripts/golden/make_token_golden.py). */
#ifndef SPECD_TESTS_TOKENIZER_GOLDEN_H
#define SPECD_TESTS_TOKENIZER_GOLDEN_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whole file into a NUL-terminated buffer (caller frees), or NULL. */
static inline char *golden_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

/* Splits line (modified in place) at tabs into at most max fields; returns the count. */
static inline int golden_fields(char *line, char **f, int max) {
    int n = 0;
    f[n++] = line;
    for (char *p = line; *p && n < max; p++)
        if (*p == '\t') {
            *p = '\0';
            f[n++] = p + 1;
        }
    return n;
}

static inline int golden_hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Hex to bytes (out has room for strlen(hex)/2); returns the byte count or -1. */
static inline long golden_unhex(const char *hex, size_t hex_len, uint8_t *out) {
    if (hex_len % 2) return -1;
    for (size_t i = 0; i < hex_len / 2; i++) {
        int a = golden_hexval(hex[2 * i]), b = golden_hexval(hex[2 * i + 1]);
        if (a < 0 || b < 0) return -1;
        out[i] = (uint8_t)(a * 16 + b);
    }
    return (long)(hex_len / 2);
}

/* Space-separated ids into out (room for cap); returns the count or -1. */
static inline long golden_ids(const char *s, int32_t *out, size_t cap) {
    size_t n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || n >= cap) return -1;
        out[n++] = (int32_t)v;
        s = end;
        while (*s == ' ') s++;
    }
    return (long)n;
}

#endif
