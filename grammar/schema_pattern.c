/* JSON Schema string patterns: a regex subset translated to GBNF (docs/serving.md lists it).
 * The text produced is a JSON string's content without escapes, so characters JSON must escape
 * are never produced: classes lose them, and a pattern that needs one is refused. */
#include "grammar/schema_pattern.h"

#include "common/status_internal.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define rx_fail(x, ...) gram_schema_refuse((x)->err, &(x)->st, __VA_ARGS__)

/* One character inside a GBNF class: printable ASCII as itself, the rest escaped. */
static void put_class_char(sbuf *b, uint32_t cp) {
    if (cp > 0x20 && cp < 0x7f && !strchr("]\\-^\"[", (int)cp)) {
        char c = (char)cp;
        sb_put(b, &c, 1);
    } else if (cp < 0x100) {
        sb_printf(b, "\\x%02x", cp);
    } else if (cp < 0x10000) {
        sb_printf(b, "\\u%04x", cp);
    } else {
        sb_printf(b, "\\U%08x", cp);
    }
}

/* Characters a pattern may produce: those a JSON string holds without an escape. */
static void put_class_ranges(sbuf *b, const uint32_t (*r)[2], size_t n, int neg) {
    /* complement when neg, then remove 0x00-0x1F, '"' and '\\' */
    uint32_t keep[64][2];
    size_t k = 0;
    uint32_t cur[130][2];
    size_t nc = 0;
    if (!neg) {
        for (size_t i = 0; i < n && nc < 128; i++)
            memcpy(cur[nc++], r[i], sizeof cur[0]);
    } else {
        uint32_t next = 0; /* r sorted by the caller */
        for (size_t i = 0; i <= n && nc < 128; i++) {
            uint32_t lo = i < n ? r[i][0] : 0x110000;
            if (lo > next) {
                cur[nc][0] = next;
                cur[nc++][1] = lo - 1;
            }
            if (i < n && r[i][1] + 1 > next) next = r[i][1] + 1;
        }
    }
    static const uint32_t bad[3][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    for (size_t i = 0; i < nc; i++) {
        uint32_t lo = cur[i][0], hi = cur[i][1];
        for (int x = 0; x < 3 && lo <= hi; x++) {
            if (bad[x][1] < lo || bad[x][0] > hi) continue;
            if (bad[x][0] > lo && k < 64) {
                keep[k][0] = lo;
                keep[k++][1] = bad[x][0] - 1;
            }
            lo = bad[x][1] + 1;
        }
        if (lo <= hi && k < 64) {
            keep[k][0] = lo;
            keep[k++][1] = hi;
        }
    }
    sb_put(b, "[", 1);
    if (!k) sb_put(b, "^\\x00-\\U0010ffff", 16); /* nothing: an empty class */
    for (size_t i = 0; i < k; i++) {
        put_class_char(b, keep[i][0]);
        if (keep[i][1] != keep[i][0]) {
            sb_put(b, "-", 1);
            put_class_char(b, keep[i][1]);
        }
    }
    sb_put(b, "]", 1);
}

typedef struct rx {
    specd_error *err;
    specd_status st;
    const char *s;
    size_t n, pos;
    sbuf *out;
} rx;

static int rx_utf8(rx *x, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)x->s + x->pos;
    size_t left = x->n - x->pos;
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : 4;
    if ((size_t)n > left) return rx_fail(x, SPECD_E_FORMAT, "pattern: invalid UTF-8");
    uint32_t v = n == 1 ? s[0] : s[0] & (0x7F >> n);
    for (int i = 1; i < n; i++)
        v = v << 6 | (s[i] & 0x3F);
    x->pos += (size_t)n;
    *cp = v;
    return 1;
}

static int cmp_r(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* One escape inside or outside a class: a class shorthand (ranges out) or one character. */
static int rx_escape(rx *x, uint32_t (*r)[2], size_t *nr, int *neg) {
    if (x->pos >= x->n) return rx_fail(x, SPECD_E_FORMAT, "pattern ends in '\\'");
    char c = x->s[x->pos++];
    static const uint32_t digit[1][2] = {{'0', '9'}};
    static const uint32_t word[4][2] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const uint32_t space[2][2] = {{'\t', '\r'}, {' ', ' '}};
    const uint32_t(*set)[2] = NULL;
    size_t n = 0;
    switch (c) {
    case 'd':
    case 'D':
        set = digit;
        n = 1;
        break;
    case 'w':
    case 'W':
        set = word;
        n = 4;
        break;
    case 's':
    case 'S':
        set = space;
        n = 2;
        break;
    case 'n': r[(*nr)++][0] = '\n'; break;
    case 't': r[(*nr)++][0] = '\t'; break;
    default:
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return rx_fail(x, SPECD_E_UNSUPPORTED, "pattern escape '\\%c' is not supported", c);
        r[(*nr)++][0] = (unsigned char)c;
    }
    if (set) {
        *neg = c >= 'A' && c <= 'Z';
        for (size_t i = 0; i < n; i++)
            memcpy(r[(*nr)++], set[i], sizeof r[0]);
    } else {
        r[*nr - 1][1] = r[*nr - 1][0];
    }
    return 1;
}

static int rx_alternates(rx *x, int depth);

static int rx_atom(rx *x, int depth) {
    char c = x->s[x->pos];
    uint32_t r[64][2];
    size_t nr = 0;
    int neg = 0;
    if (c == '(') {
        x->pos++;
        if (x->pos + 1 < x->n && x->s[x->pos] == '?') {
            if (x->s[x->pos + 1] != ':')
                return rx_fail(x, SPECD_E_UNSUPPORTED,
                               "pattern: lookaround and named groups are not supported");
            x->pos += 2;
        }
        sb_put(x->out, "(", 1);
        if (!rx_alternates(x, depth + 1)) return 0;
        if (x->pos >= x->n || x->s[x->pos] != ')')
            return rx_fail(x, SPECD_E_FORMAT, "pattern: unclosed '('");
        x->pos++;
        sb_put(x->out, ")", 1);
        return 1;
    }
    if (c == '[') {
        x->pos++;
        if (x->pos < x->n && x->s[x->pos] == '^') {
            neg = 1;
            x->pos++;
        }
        int first = 1;
        while (x->pos < x->n && (x->s[x->pos] != ']' || first)) {
            first = 0;
            if (nr >= 60)
                return rx_fail(x, SPECD_E_UNSUPPORTED, "pattern: character class too long");
            if (x->s[x->pos] == '\\') {
                x->pos++;
                int sub_neg = 0;
                if (!rx_escape(x, r, &nr, &sub_neg)) return 0;
                if (sub_neg)
                    return rx_fail(x, SPECD_E_UNSUPPORTED, "pattern: \\D \\W \\S inside a class");
                continue;
            }
            uint32_t lo, hi;
            if (!rx_utf8(x, &lo)) return 0;
            hi = lo;
            if (x->pos + 1 < x->n && x->s[x->pos] == '-' && x->s[x->pos + 1] != ']') {
                x->pos++;
                if (x->s[x->pos] == '\\')
                    return rx_fail(x, SPECD_E_UNSUPPORTED, "pattern: escaped range end");
                if (!rx_utf8(x, &hi)) return 0;
                if (hi < lo) return rx_fail(x, SPECD_E_FORMAT, "pattern: range out of order");
            }
            r[nr][0] = lo;
            r[nr++][1] = hi;
        }
        if (x->pos >= x->n) return rx_fail(x, SPECD_E_FORMAT, "pattern: unclosed '['");
        x->pos++;
    } else if (c == '.') {
        x->pos++;
        r[0][0] = r[0][1] = '\n';
        nr = 1;
        neg = 1;
    } else if (c == '\\') {
        x->pos++;
        if (!rx_escape(x, r, &nr, &neg)) return 0;
    } else if (c == '^' || c == '$') {
        return rx_fail(x, SPECD_E_UNSUPPORTED, "pattern: '%c' inside the pattern is not supported",
                       c);
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return rx_fail(x, SPECD_E_FORMAT, "pattern: '%c' with nothing to repeat", c);
    } else {
        uint32_t cp;
        if (!rx_utf8(x, &cp)) return 0;
        r[0][0] = r[0][1] = cp;
        nr = 1;
    }
    if (nr > 1) qsort(r, nr, sizeof r[0], cmp_r);
    if (!neg && nr == 1 && r[0][0] == r[0][1] &&
        (r[0][0] < 0x20 || r[0][0] == '"' || r[0][0] == '\\'))
        return rx_fail(
            x, SPECD_E_UNSUPPORTED,
            "pattern: a character JSON must escape (control, '\"' or '\\') is not supported");
    put_class_ranges(x->out, (const uint32_t(*)[2])r, nr, neg);
    return 1;
}

static int rx_sequence(rx *x, int depth) {
    if (depth > 32) return rx_fail(x, SPECD_E_UNSUPPORTED, "pattern: groups nested too deeply");
    sb_put(x->out, "(", 1);
    while (x->pos < x->n && x->s[x->pos] != '|' && x->s[x->pos] != ')') {
        if (x->s[x->pos] == '$' && x->pos + 1 == x->n) break;
        sb_put(x->out, " ", 1);
        if (!rx_atom(x, depth)) return 0;
        if (x->pos < x->n && strchr("*+?{", x->s[x->pos])) {
            char q = x->s[x->pos++];
            if (q == '{') {
                size_t close = x->pos;
                while (close < x->n && x->s[close] != '}')
                    close++;
                int commas = 0, ok = close < x->n && close - x->pos <= 20 && close > x->pos &&
                                     x->s[x->pos] >= '0' && x->s[x->pos] <= '9';
                for (size_t at = x->pos; ok && at < close; at++) {
                    commas += x->s[at] == ',';
                    ok = (x->s[at] >= '0' && x->s[at] <= '9') || (x->s[at] == ',' && commas == 1);
                }
                if (!ok) return rx_fail(x, SPECD_E_FORMAT, "pattern: bad {m,n}");
                sb_put(x->out, "{", 1);
                sb_put(x->out, x->s + x->pos, close - x->pos); /* checked by the GBNF parser */
                sb_put(x->out, "}", 1);
                x->pos = close + 1;
            } else {
                sb_put(x->out, &q, 1);
            }
            if (x->pos < x->n && x->s[x->pos] == '?') x->pos++; /* lazy: same language */
        }
    }
    sb_put(x->out, " )", 2);
    return 1;
}

static int rx_alternates(rx *x, int depth) {
    if (!rx_sequence(x, depth)) return 0;
    while (x->pos < x->n && x->s[x->pos] == '|') {
        x->pos++;
        sb_put(x->out, " | ", 3);
        if (!rx_sequence(x, depth)) return 0;
    }
    return 1;
}

int gram_schema_refuse(specd_error *err, specd_status *st, specd_status code, const char *fmt,
                       ...) {
    if (*st != SPECD_OK) return 0; /* the first failure is the one reported */
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *st = specd_fail(err, code, "json schema: %s", msg);
    return 0;
}

specd_status gram_pattern_gbnf(const char *pat, size_t n, sbuf *b, specd_error *err) {
    rx x = {err, SPECD_OK, pat, n, 0, b};
    int anchored_start = n && pat[0] == '^';
    int anchored_end = n && pat[n - 1] == '$' && (n < 2 || pat[n - 2] != '\\');
    if (anchored_start) x.pos = 1;
    sb_put(b, "\"\\\"\" ", 5);
    if (!anchored_start) sb_put(b, "json-char* ", 11);
    sb_put(b, "( ", 2); /* the alternation binds looser than the anchors' padding */
    int ok = rx_alternates(&x, 0);
    sb_put(b, " )", 2);
    if (ok && anchored_end && x.pos < n && pat[x.pos] == '$') x.pos++;
    if (ok && x.pos != n) ok = rx_fail(&x, SPECD_E_FORMAT, "pattern: unexpected '%c'", pat[x.pos]);
    if (!anchored_end) sb_put(b, " json-char*", 11);
    sb_put(b, " \"\\\"\"", 5);
    return ok ? SPECD_OK : x.st;
}
