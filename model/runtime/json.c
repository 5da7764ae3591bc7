#include "model/runtime/json.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 64, MAX_NODES = 1 << 22 };

typedef struct parser {
    const char *s;
    uint32_t len, pos, n, cap;
    rt_json_node *nodes;
    specd_error *err;
} parser;

static void skip_ws(parser *p) {
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\n' ||
                               p->s[p->pos] == '\r' || p->s[p->pos] == '\t'))
        p->pos++;
}

static specd_status bad(parser *p, const char *what) {
    return specd_fail(p->err, SPECD_E_FORMAT, "json: %s at byte %u", what, p->pos);
}

static specd_status add(parser *p, rt_json_type t, uint32_t *idx) {
    if (p->n == p->cap) {
        if (p->cap >= MAX_NODES) return bad(p, "too many values");
        uint32_t cap = p->cap ? p->cap * 2 : 64;
        rt_json_node *nn = specd_alloc_array(cap, sizeof *nn);
        if (!nn) return specd_fail(p->err, SPECD_E_NOMEM, "json: out of memory");
        if (p->nodes) memcpy(nn, p->nodes, (size_t)p->n * sizeof *nn);
        specd_free(p->nodes);
        p->nodes = nn;
        p->cap = cap;
    }
    *idx = p->n++;
    p->nodes[*idx] = (rt_json_node){.type = t, .start = p->pos};
    return SPECD_OK;
}

static specd_status parse_string(parser *p) {
    uint32_t idx;
    p->pos++; /* opening quote */
    SPECD_TRY(add(p, RT_JSON_STRING, &idx));
    while (p->pos < p->len) {
        unsigned char ch = (unsigned char)p->s[p->pos];
        if (ch == '"') {
            p->nodes[idx].end = p->pos++;
            p->nodes[idx].next = p->n;
            return SPECD_OK;
        }
        if (ch < 0x20) return bad(p, "control character in string");
        if (ch == '\\') {
            if (p->pos + 1 >= p->len) break;
            char e = p->s[p->pos + 1];
            if (e == 'u') {
                if (p->pos + 5 >= p->len) break;
                for (int k = 2; k < 6; k++) {
                    char h = p->s[p->pos + k];
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F')))
                        return bad(p, "bad \\u escape");
                }
                p->pos += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0) return bad(p, "bad escape");
            p->pos += 2;
            continue;
        }
        p->pos++;
    }
    return bad(p, "unterminated string");
}

static specd_status parse_value(parser *p, int depth);

static specd_status parse_container(parser *p, int depth, int object) {
    if (depth >= MAX_DEPTH) return bad(p, "nesting too deep");
    uint32_t idx;
    SPECD_TRY(add(p, object ? RT_JSON_OBJECT : RT_JSON_ARRAY, &idx));
    p->pos++;
    skip_ws(p);
    const char close = object ? '}' : ']';
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
    } else {
        for (;;) {
            skip_ws(p);
            if (object) {
                if (p->pos >= p->len || p->s[p->pos] != '"') return bad(p, "expected a key");
                SPECD_TRY(parse_string(p));
                skip_ws(p);
                if (p->pos >= p->len || p->s[p->pos] != ':') return bad(p, "expected ':'");
                p->pos++;
            }
            SPECD_TRY(parse_value(p, depth + 1));
            p->nodes[idx].size++;
            skip_ws(p);
            if (p->pos >= p->len) return bad(p, "unterminated container");
            if (p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->s[p->pos] == close) {
                p->pos++;
                break;
            }
            return bad(p, "expected ',' or end of container");
        }
    }
    p->nodes[idx].end = p->pos;
    p->nodes[idx].next = p->n;
    return SPECD_OK;
}

static specd_status parse_value(parser *p, int depth) {
    skip_ws(p);
    if (p->pos >= p->len) return bad(p, "expected a value");
    char ch = p->s[p->pos];
    if (ch == '{' || ch == '[') return parse_container(p, depth, ch == '{');
    if (ch == '"') return parse_string(p);
    uint32_t idx;
    SPECD_TRY(add(p, RT_JSON_PRIMITIVE, &idx));
    while (p->pos < p->len && strchr("+-.0123456789eEtruefalsn", p->s[p->pos]) && p->s[p->pos])
        p->pos++;
    if (p->pos == p->nodes[idx].start) return bad(p, "unexpected character");
    p->nodes[idx].end = p->pos;
    p->nodes[idx].next = p->n;
    const char *v = p->s + p->nodes[idx].start;
    const uint32_t n = p->pos - p->nodes[idx].start;
    if ((n == 4 && !memcmp(v, "true", 4)) || (n == 5 && !memcmp(v, "false", 5)) ||
        (n == 4 && !memcmp(v, "null", 4)))
        return SPECD_OK;
    if (v[0] != '-' && (v[0] < '0' || v[0] > '9')) return bad(p, "bad literal");
    double d;
    if (!rt_json_number(&(rt_json){.text = p->s, .nodes = p->nodes, .n = p->n}, idx, &d))
        return bad(p, "bad number");
    return SPECD_OK;
}

specd_status rt_json_parse(const char *text, size_t len, rt_json *out, specd_error *err) {
    if (len >= (1u << 31)) return specd_fail(err, SPECD_E_FORMAT, "json: %zu bytes is too long", len);
    parser p = {.s = text, .len = (uint32_t)len, .err = err};
    specd_status st = parse_value(&p, 0);
    if (st == SPECD_OK) {
        skip_ws(&p);
        if (p.pos != p.len) st = bad(&p, "trailing bytes");
    }
    if (st != SPECD_OK) {
        specd_free(p.nodes);
        return st;
    }
    out->text = text;
    out->nodes = p.nodes;
    out->n = p.n;
    return SPECD_OK;
}

void rt_json_free(rt_json *j) {
    if (!j) return;
    specd_free(j->nodes);
    j->nodes = NULL;
    j->n = 0;
}

int rt_json_str_eq(const rt_json *j, uint32_t i, const char *s) {
    if (i >= j->n || j->nodes[i].type != RT_JSON_STRING) return 0;
    size_t n = strlen(s);
    return j->nodes[i].end - j->nodes[i].start == n && !memcmp(j->text + j->nodes[i].start, s, n);
}

uint32_t rt_json_get(const rt_json *j, uint32_t obj, const char *key) {
    if (obj >= j->n || j->nodes[obj].type != RT_JSON_OBJECT) return 0;
    uint32_t i = obj + 1;
    for (uint32_t m = 0; m < j->nodes[obj].size; m++) {
        const uint32_t val = i + 1; /* key is a string: no subtree */
        if (rt_json_str_eq(j, i, key)) return val;
        i = j->nodes[val].next;
    }
    return 0;
}

int rt_json_number(const rt_json *j, uint32_t i, double *out) {
    if (i >= j->n || j->nodes[i].type != RT_JSON_PRIMITIVE) return 0;
    char buf[64];
    const uint32_t n = j->nodes[i].end - j->nodes[i].start;
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, j->text + j->nodes[i].start, n);
    buf[n] = 0;
    char *end;
    double d = strtod(buf, &end);
    if (*end || !isfinite(d)) return 0;
    *out = d;
    return 1;
}
