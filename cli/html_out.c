#include "cli/html_out.h"
#include "common/utf8.h"

#include <stdint.h>
#include <string.h>

/* The code point of the valid sequence p[0..len). */
static uint32_t code_point(const unsigned char *p, size_t len) {
    if (len == 1) return p[0];
    uint32_t cp = p[0] & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
    for (size_t i = 1; i < len; i++) cp = (cp << 6) | (p[i] & 0x3f);
    return cp;
}

/* HTML's "control-character-in-input-stream" and "noncharacter-in-input-stream" errors. */
static int html_forbidden(uint32_t cp) {
    if (cp == '\t' || cp == '\n' || cp == '\r' || cp == '\f') return 0;
    if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) return 1;
    if (cp >= 0xfdd0 && cp <= 0xfdef) return 1;
    return (cp & 0xfffe) == 0xfffe;
}

void html_text(FILE *f, const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t l = utf8_valid_len(p + i, len - i);
        if (l == 0 || html_forbidden(code_point(p + i, l))) {
            fputs("\xef\xbf\xbd", f);
            i += l ? l : 1;
            continue;
        }
        switch (p[i]) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\r': fputs("&#13;", f); break; /* kept as written, not folded into a newline */
        default: fwrite(p + i, 1, l, f);
        }
        i += l;
    }
}

void html_row_text(FILE *f, const char *name, const char *value) {
    fputs("<tr><th class=\"l\">", f);
    html_text(f, name, strlen(name));
    fputs("</th><td class=\"l\">", f);
    if (value) html_text(f, value, strlen(value));
    else fputs("-", f);
    fputs("</td></tr>\n", f);
}

void html_row_number(FILE *f, const char *name, double value, int decimals) {
    char buf[64];
    if (decimals < 0) snprintf(buf, sizeof buf, "%g", value);
    else snprintf(buf, sizeof buf, "%.*f", decimals, value);
    html_row_text(f, name, buf);
}

/* one look for every page specd writes: tables, verdict colours, inline charts */
const char html_page_style[] =
    "body{font-family:system-ui,sans-serif;max-width:72rem;margin:1.5rem auto;padding:0 1rem;"
    "color:#1b1f24}h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem}"
    "table{border-collapse:collapse;font-size:.9rem}td,th{border:1px solid #d0d7de;padding:.25rem"
    " .5rem;text-align:right}th{background:#f6f8fa}td.l,th.l{text-align:left}"
    ".ok{color:#116329;font-weight:600}.bad{color:#a40e26;font-weight:600}"
    ".lossy{color:#9a6700;font-weight:600}figure{display:inline-block;margin:0 1rem 1rem 0;"
    "vertical-align:top}figcaption{font-size:.85rem;color:#57606a}"
    "pre{white-space:pre-wrap;background:#f6f8fa;padding:.5rem;border-radius:4px}"
    "mark.plain{background:#dafbe1}mark.spec{background:#ffebe9}";
