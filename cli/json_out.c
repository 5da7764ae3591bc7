#include "cli/json_out.h"

#include <math.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at p (n bytes left), or 0 when it is not valid. */
static size_t utf8_len(const unsigned char *p, size_t n) {
    size_t len;
    uint32_t cp;
    if (p[0] < 0x80) return 1;
    if ((p[0] & 0xe0) == 0xc0)
        len = 2, cp = p[0] & 0x1f;
    else if ((p[0] & 0xf0) == 0xe0)
        len = 3, cp = p[0] & 0x0f;
    else if ((p[0] & 0xf8) == 0xf0)
        len = 4, cp = p[0] & 0x07;
    else
        return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

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
            size_t l = utf8_len(p + i, len - i);
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

/* Text output: non-printable bytes as \xNN, long strings cut with "..." */
void json_number(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fputs("null", f);
}
