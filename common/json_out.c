#include "common/json_out.h"
#include "common/utf8.h"

#include <math.h>

/* A JSON string literal: quotes, escapes, control characters as \u00XX, and each byte that is not
 * part of valid UTF-8 as U+FFFD, so the output is always valid JSON. */
void json_string(FILE *f, const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < len;) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
        } else if (c == '\n') {
            fputs("\\n", f);
        } else if (c == '\t') {
            fputs("\\t", f);
        } else if (c == '\r') {
            fputs("\\r", f);
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c);
        } else {
            size_t l = utf8_valid_len(p + i, len - i);
            if (l == 0) {
                fputs("\\ufffd", f);
                i++;
                continue;
            }
            fwrite(p + i, 1, l, f);
            i += l;
            continue;
        }
        i++;
    }
    fputc('"', f);
}

void json_number(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fputs("null", f);
}
