/* JSON Schema -> GBNF. Each schema node becomes a rule (s<index>), $ref targets are generated once
 * (so recursive schemas work), and a fixed set of JSON rules (json-*) serves the untyped parts.
 * Whitespace: `ws` is nothing, one space, or a newline and up to 20 spaces or tabs; it may follow
 * '{', '[', ',' and ':', and each value inside an object or array; nowhere else (so a key and its
 * '":' are one forced run). docs/serving.md lists the keywords honoured, ignored and refused. */
#include "grammar/grammar_internal.h"
#include "grammar/schema_pattern.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "model/runtime/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char BASE_RULES[] =
    "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n"
    "json-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
    "json-int ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "json-number ::= json-int ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
    "json-bool ::= \"true\" | \"false\"\n"
    "json-null ::= \"null\"\n"
    "json-value ::= json-object | json-array | json-string | json-number | json-bool | json-null\n"
    "json-member ::= json-string \":\" ws json-value ws\n"
    "json-object ::= \"{\" ws ( json-member ( \",\" ws json-member )* )? \"}\"\n"
    "json-array ::= \"[\" ws ( json-value ws ( \",\" ws json-value ws )* )? \"]\"\n";

typedef struct gen {
    rt_json j;
    sbuf rules;
    specd_error *err;
    specd_status st;
    uint8_t *made; /* per node: its rule s<index> is defined (or being defined) */
    int depth;
} gen;

#define refuse(g, ...) gram_schema_refuse((g)->err, &(g)->st, __VA_ARGS__)

static const rt_json_node *node(const gen *g, uint32_t i) {
    return &g->j.nodes[i];
}
static const char *text(const gen *g, uint32_t i) {
    return g->j.text + node(g, i)->start;
}
static uint32_t tlen(const gen *g, uint32_t i) {
    return node(g, i)->end - node(g, i)->start;
}

static int is_prim(const gen *g, uint32_t i, const char *s) {
    return i && node(g, i)->type == RT_JSON_PRIMITIVE && tlen(g, i) == strlen(s) &&
           !memcmp(text(g, i), s, tlen(g, i));
}

static int count_of(gen *g, uint32_t obj, const char *key, long lo, long *out) {
    uint32_t i = rt_json_get(&g->j, obj, key);
    if (!i) return 1;
    double d;
    if (!rt_json_number(&g->j, i, &d) || d < (double)lo || d > SPECD_GRAMMAR_MAX_REPEAT ||
        d != (long)d)
        return refuse(g, SPECD_E_UNSUPPORTED, "%s must be an integer in %ld..%d", key, lo,
                      SPECD_GRAMMAR_MAX_REPEAT);
    *out = (long)d;
    return 1;
}

/* Appends a GBNF literal of raw bytes: quotes, backslashes and control bytes escaped. */
static void put_literal(sbuf *b, const char *s, size_t n) {
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\x%02x", c);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* The compact JSON text of node i (strings keep their escapes as written). */
static void compact(gen *g, uint32_t i, sbuf *out) {
    const rt_json_node *nd = node(g, i);
    if (nd->type == RT_JSON_STRING) {
        sb_put(out, "\"", 1);
        sb_put(out, text(g, i), tlen(g, i));
        sb_put(out, "\"", 1);
    } else if (nd->type == RT_JSON_PRIMITIVE) {
        sb_put(out, text(g, i), tlen(g, i));
    } else {
        int obj = nd->type == RT_JSON_OBJECT;
        sb_put(out, obj ? "{" : "[", 1);
        uint32_t c = i + 1;
        for (uint32_t m = 0; m < nd->size; m++) {
            if (m) sb_put(out, ",", 1);
            if (obj) {
                compact(g, c, out);
                sb_put(out, ":", 1);
                c++;
            }
            compact(g, c, out);
            c = node(g, c)->next;
        }
        sb_put(out, obj ? "}" : "]", 1);
    }
}

static void put_value_literal(gen *g, uint32_t i, sbuf *b) {
    sbuf t = {0};
    compact(g, i, &t);
    if (t.oom)
        b->oom = 1;
    else
        put_literal(b, t.s, t.n);
    specd_free(t.s);
}

static int rule_for(gen *g, uint32_t i);

/* A JSON string matching the pattern (the raw text of node i, escapes undone for \\ only). */
static int pattern_string(gen *g, uint32_t i, sbuf *b) {
    char *pat = specd_alloc((size_t)tlen(g, i) + 1);
    if (!pat) return refuse(g, SPECD_E_NOMEM, "out of memory");
    size_t n = 0;
    const char *s = text(g, i);
    for (uint32_t k = 0; k < tlen(g, i); k++) { /* JSON escapes of the schema text */
        if (s[k] == '\\' && k + 1 < tlen(g, i)) {
            char e = s[++k];
            pat[n++] = e == 'n'    ? '\n'
                       : e == 't'  ? '\t'
                       : e == '/'  ? '/'
                       : e == '"'  ? '"'
                       : e == '\\' ? '\\'
                                   : 0;
            if (!pat[n - 1]) {
                specd_free(pat);
                return refuse(g, SPECD_E_UNSUPPORTED, "pattern: JSON escape '\\%c' in the pattern",
                              e);
            }
        } else {
            pat[n++] = s[k];
        }
    }
    specd_status st = gram_pattern_gbnf(pat, n, b, g->err);
    specd_free(pat);
    if (st != SPECD_OK && g->st == SPECD_OK) g->st = st;
    return st == SPECD_OK;
}

/* --- schema nodes -------------------------------------------------------------------------- */

static int type_expr(gen *g, uint32_t i, uint32_t type, sbuf *b);

/* An object: required properties in schema order, then the optional ones in order (each may be
 * left out), then extra keys when additionalProperties allows them. */
static int object_expr(gen *g, uint32_t i, sbuf *b) {
    uint32_t props = rt_json_get(&g->j, i, "properties"), req = rt_json_get(&g->j, i, "required");
    uint32_t extra = rt_json_get(&g->j, i, "additionalProperties");
    if (props && node(g, props)->type != RT_JSON_OBJECT)
        return refuse(g, SPECD_E_FORMAT, "properties must be an object");
    if (req && node(g, req)->type != RT_JSON_ARRAY)
        return refuse(g, SPECD_E_FORMAT, "required must be an array");
    if (rt_json_get(&g->j, i, "patternProperties"))
        return refuse(g, SPECD_E_UNSUPPORTED, "patternProperties is not supported");
    int extra_ok = !extra || !is_prim(g, extra, "false");
    int extra_rule = -1;
    if (extra && node(g, extra)->type == RT_JSON_OBJECT)
        extra_rule = rule_for(g, extra);
    else if (extra && !is_prim(g, extra, "true") && !is_prim(g, extra, "false"))
        return refuse(g, SPECD_E_FORMAT, "additionalProperties must be a boolean or a schema");
    /* members: required first */
    uint32_t n = props ? node(g, props)->size : 0;
    uint32_t *key = specd_alloc_array((size_t)n + 1, sizeof *key);
    uint8_t *is_req = specd_alloc_array((size_t)n + 1, 1);
    if (!key || !is_req) {
        specd_free(key);
        specd_free(is_req);
        return refuse(g, SPECD_E_NOMEM, "out of memory");
    }
    uint32_t k = props + 1;
    for (uint32_t m = 0; m < n; m++) {
        key[m] = k;
        if (req)
            for (uint32_t r = req + 1, q = 0; q < node(g, req)->size; q++, r = node(g, r)->next)
                if (node(g, r)->type == RT_JSON_STRING && tlen(g, r) == tlen(g, k) &&
                    !memcmp(text(g, r), text(g, k), tlen(g, k)))
                    is_req[m] = 1;
        k = node(g, k + 1)->next;
    }
    /* kv[m]: the GBNF of member m ("key": ws value ws) */
    sbuf *kv = specd_alloc_array((size_t)n + 1, sizeof *kv);
    int ok = kv != NULL, n_req = 0;
    if (!ok) refuse(g, SPECD_E_NOMEM, "out of memory");
    for (uint32_t m = 0; ok && m < n; m++) {
        int r = rule_for(g, key[m] + 1);
        if (r < 0) {
            ok = 0;
            break;
        }
        sbuf kb = {0};
        sb_put(&kb, "\"", 1);
        sb_put(&kb, text(g, key[m]), tlen(g, key[m]));
        sb_put(&kb, "\":", 2);
        put_literal(&kv[m], kb.s ? kb.s : "", kb.n);
        specd_free(kb.s);
        sb_printf(&kv[m], " ws s%d ws", r);
        n_req += is_req[m];
    }
    char member[64];
    if (extra_rule >= 0)
        snprintf(member, sizeof member, "json-string \":\" ws s%d ws", extra_rule);
    else
        snprintf(member, sizeof member, "json-member");
    sbuf *out = b;
    sb_put(out, "\"{\" ws ", 7);
    if (ok && n_req) {
        int first = 1;
        for (uint32_t m = 0; m < n; m++)
            if (is_req[m]) {
                sb_printf(out, "%s%s ", first ? "" : "\",\" ws ", kv[m].s);
                first = 0;
            }
        for (uint32_t m = 0; m < n; m++)
            if (!is_req[m]) sb_printf(out, "( \",\" ws %s )? ", kv[m].s);
        if (extra_ok) sb_printf(out, "( \",\" ws %s )* ", member);
    } else if (ok) {
        /* no member is required: whichever comes first has no comma; tail rule s<i>-t<m> holds
         * the members that may follow member m - 1 */
        sbuf *r = &g->rules;
        sb_printf(r, "s%u-t%u ::= %s%s%s\n", i, n, extra_ok ? "( \",\" ws " : "",
                  extra_ok ? member : "", extra_ok ? " )*" : "");
        for (uint32_t m = n; m-- > 0;)
            sb_printf(r, "s%u-t%u ::= ( \",\" ws %s )? s%u-t%u\n", i, m, kv[m].s, i, m + 1);
        sb_put(out, "( ", 2);
        for (uint32_t m = 0; m < n; m++)
            sb_printf(out, "%s%s s%u-t%u", m ? " | " : "", kv[m].s, i, m + 1);
        if (extra_ok) sb_printf(out, "%s%s s%u-t%u", n ? " | " : "", member, i, n);
        if (!n && !extra_ok) sb_put(out, "\"\"", 2);
        sb_put(out, " )? ", 4);
    }
    for (uint32_t m = 0; kv && m < n; m++)
        specd_free(kv[m].s);
    specd_free(kv);
    specd_free(key);
    specd_free(is_req);
    if (!ok) return 0;
    sb_put(out, "\"}\"", 3);
    return 1;
}

static int array_expr(gen *g, uint32_t i, sbuf *b) {
    uint32_t items = rt_json_get(&g->j, i, "items");
    if (rt_json_get(&g->j, i, "prefixItems"))
        return refuse(g, SPECD_E_UNSUPPORTED, "prefixItems is not supported");
    if (items && node(g, items)->type == RT_JSON_ARRAY)
        return refuse(g, SPECD_E_UNSUPPORTED, "items as an array (tuples) is not supported");
    long min = 0, max = -1;
    if (!count_of(g, i, "minItems", 0, &min) || !count_of(g, i, "maxItems", 0, &max)) return 0;
    if (max >= 0 && max < min) return refuse(g, SPECD_E_FORMAT, "maxItems < minItems");
    char item[32] = "json-value";
    if (items) {
        int r = rule_for(g, items);
        if (r < 0) return 0;
        snprintf(item, sizeof item, "s%d", r);
    }
    sb_put(b, "\"[\" ws ", 7);
    if (max != 0) {
        if (min == 0) sb_put(b, "( ", 2);
        sb_printf(b, "%s ws", item);
        long rmin = min > 0 ? min - 1 : 0, rmax = max < 0 ? -1 : max - 1;
        if (rmax < 0)
            sb_printf(b, " ( \",\" ws %s ws ){%ld,}", item, rmin);
        else if (rmax > 0)
            sb_printf(b, " ( \",\" ws %s ws ){%ld,%ld}", item, rmin, rmax);
        if (min == 0) sb_put(b, " )?", 3);
        sb_put(b, " ", 1);
    }
    sb_put(b, "\"]\"", 3);
    return 1;
}

static int string_expr(gen *g, uint32_t i, sbuf *b) {
    uint32_t pat = rt_json_get(&g->j, i, "pattern");
    if (pat) {
        if (node(g, pat)->type != RT_JSON_STRING)
            return refuse(g, SPECD_E_FORMAT, "pattern must be a string");
        return pattern_string(g, pat, b);
    }
    long min = 0, max = -1;
    if (!count_of(g, i, "minLength", 0, &min) || !count_of(g, i, "maxLength", 0, &max)) return 0;
    if (max >= 0 && max < min) return refuse(g, SPECD_E_FORMAT, "maxLength < minLength");
    if (!min && max < 0)
        sb_put(b, "json-string", 11);
    else if (max < 0)
        sb_printf(b, "\"\\\"\" json-char{%ld,} \"\\\"\"", min);
    else
        sb_printf(b, "\"\\\"\" json-char{%ld,%ld} \"\\\"\"", min, max);
    return 1;
}

static int type_expr(gen *g, uint32_t i, uint32_t type, sbuf *b) {
    if (type && node(g, type)->type == RT_JSON_ARRAY) {
        sb_put(b, "( ", 2);
        for (uint32_t t = type + 1, m = 0; m < node(g, type)->size; m++, t = node(g, t)->next) {
            if (m) sb_put(b, " | ", 3);
            if (!type_expr(g, i, t, b)) return 0;
        }
        sb_put(b, " )", 2);
        return 1;
    }
    if (type && node(g, type)->type != RT_JSON_STRING)
        return refuse(g, SPECD_E_FORMAT, "type must be a string or an array");
    if (!type) { /* no type: what the other keywords say */
        if (rt_json_get(&g->j, i, "properties") || rt_json_get(&g->j, i, "additionalProperties") ||
            rt_json_get(&g->j, i, "required"))
            return object_expr(g, i, b);
        if (rt_json_get(&g->j, i, "items")) return array_expr(g, i, b);
        if (rt_json_get(&g->j, i, "pattern") || rt_json_get(&g->j, i, "minLength") ||
            rt_json_get(&g->j, i, "maxLength"))
            return string_expr(g, i, b);
        sb_put(b, "json-value", 10);
        return 1;
    }
    if (rt_json_str_eq(&g->j, type, "object")) return object_expr(g, i, b);
    if (rt_json_str_eq(&g->j, type, "array")) return array_expr(g, i, b);
    if (rt_json_str_eq(&g->j, type, "string")) return string_expr(g, i, b);
    if (rt_json_str_eq(&g->j, type, "number"))
        sb_put(b, "json-number", 11);
    else if (rt_json_str_eq(&g->j, type, "integer"))
        sb_put(b, "json-int", 8);
    else if (rt_json_str_eq(&g->j, type, "boolean"))
        sb_put(b, "json-bool", 9);
    else if (rt_json_str_eq(&g->j, type, "null"))
        sb_put(b, "json-null", 9);
    else
        return refuse(g, SPECD_E_UNSUPPORTED, "type '%.*s' is not supported",
                      (int)(tlen(g, type) > 40 ? 40 : tlen(g, type)), text(g, type));
    return 1;
}

/* The node a "#/$defs/name" or "#/definitions/name" reference names. */
static uint32_t resolve_ref(gen *g, uint32_t ref) {
    const char *s = text(g, ref);
    uint32_t n = tlen(g, ref);
    const char *sect = NULL;
    size_t skip = 0;
    if (n > 8 && !memcmp(s, "#/$defs/", 8))
        sect = "$defs", skip = 8;
    else if (n > 14 && !memcmp(s, "#/definitions/", 14))
        sect = "definitions", skip = 14;
    if (!sect)
        return refuse(g, SPECD_E_UNSUPPORTED,
                      "$ref '%.*s': only #/$defs/... and #/definitions/... are supported",
                      (int)(n > 60 ? 60 : n), s),
               0;
    uint32_t defs = rt_json_get(&g->j, 0, sect);
    if (defs && node(g, defs)->type == RT_JSON_OBJECT)
        for (uint32_t k = defs + 1, m = 0; m < node(g, defs)->size; m++, k = node(g, k + 1)->next)
            if (tlen(g, k) == n - skip && !memcmp(text(g, k), s + skip, n - skip)) return k + 1;
    return refuse(g, SPECD_E_FORMAT, "$ref '%.*s' names no definition", (int)(n > 60 ? 60 : n), s),
           0;
}

/* Defines rule s<i> for schema node i (once) and returns i, or -1. */
static int rule_for(gen *g, uint32_t i) {
    if (g->st != SPECD_OK) return -1;
    if (g->made[i]) return (int)i;
    if (g->depth > 64) return refuse(g, SPECD_E_UNSUPPORTED, "schema nested too deeply"), -1;
    const rt_json_node *nd = node(g, i);
    g->made[i] = 1;
    sbuf b = {0};
    sb_printf(&b, "s%u ::= ", i);
    g->depth++;
    int ok = 1;
    if (nd->type == RT_JSON_PRIMITIVE && is_prim(g, i, "true")) {
        sb_put(&b, "json-value", 10);
    } else if (nd->type != RT_JSON_OBJECT) {
        ok = refuse(g, SPECD_E_UNSUPPORTED, "a schema must be an object or true (at byte %u)",
                    nd->start);
    } else {
        uint32_t ref = rt_json_get(&g->j, i, "$ref"), cst = rt_json_get(&g->j, i, "const");
        uint32_t en = rt_json_get(&g->j, i, "enum"), any = rt_json_get(&g->j, i, "anyOf");
        uint32_t all = rt_json_get(&g->j, i, "allOf");
        if (!any) any = rt_json_get(&g->j, i, "oneOf");
        if (rt_json_get(&g->j, i, "not"))
            ok = refuse(g, SPECD_E_UNSUPPORTED, "'not' is not supported");
        else if (all && (node(g, all)->type != RT_JSON_ARRAY || node(g, all)->size != 1))
            ok = refuse(g, SPECD_E_UNSUPPORTED, "allOf is supported with one schema only");
        else if (all)
            any = all;
        if (!ok) {
        } else if (ref) {
            uint32_t t = node(g, ref)->type == RT_JSON_STRING ? resolve_ref(g, ref) : 0;
            int r = t ? rule_for(g, t) : -1;
            if (r < 0)
                ok = refuse(g, SPECD_E_FORMAT, "$ref must be a string");
            else
                sb_printf(&b, "s%d", r);
        } else if (cst) {
            put_value_literal(g, cst, &b);
        } else if (en) {
            if (node(g, en)->type != RT_JSON_ARRAY || !node(g, en)->size)
                ok = refuse(g, SPECD_E_FORMAT, "enum must be a non-empty array");
            for (uint32_t v = en + 1, m = 0; ok && m < node(g, en)->size;
                 m++, v = node(g, v)->next) {
                if (m) sb_put(&b, " | ", 3);
                put_value_literal(g, v, &b);
            }
        } else if (any) {
            if (node(g, any)->type != RT_JSON_ARRAY || !node(g, any)->size)
                ok = refuse(g, SPECD_E_FORMAT, "anyOf/oneOf must be a non-empty array");
            for (uint32_t v = any + 1, m = 0; ok && m < node(g, any)->size;
                 m++, v = node(g, v)->next) {
                int r = rule_for(g, v);
                if (r < 0)
                    ok = 0;
                else
                    sb_printf(&b, "%ss%d", m ? " | " : "", r);
            }
        } else {
            ok = type_expr(g, i, rt_json_get(&g->j, i, "type"), &b);
        }
    }
    g->depth--;
    sb_put(&b, "\n", 1);
    if (b.oom) ok = refuse(g, SPECD_E_NOMEM, "out of memory");
    if (ok) sb_put(&g->rules, b.s, b.n);
    specd_free(b.s);
    return ok && g->st == SPECD_OK ? (int)i : -1;
}

specd_status gram_schema_to_gbnf(const char *schema, size_t len, char **out, size_t *out_len,
                                 specd_error *err) {
    gen g = {.err = err};
    int any_object = !schema || !len;
    if (!any_object) {
        if (len > SPECD_GRAMMAR_MAX_TEXT)
            return specd_fail(err, SPECD_E_UNSUPPORTED, "json schema: %zu bytes, limit %u", len,
                              (unsigned)SPECD_GRAMMAR_MAX_TEXT);
        SPECD_TRY(rt_json_parse(schema, len, &g.j, err));
        any_object = node(&g, 0)->type == RT_JSON_OBJECT && node(&g, 0)->size == 0;
    }
    sbuf *b = &g.rules;
    if (any_object) {
        sb_put(b, "root ::= json-object\n", 21);
    } else {
        g.made = specd_alloc_array(g.j.n, 1);
        if (!g.made) g.st = specd_fail(err, SPECD_E_NOMEM, "json schema: out of memory");
        int r = g.made ? rule_for(&g, 0) : -1;
        if (r >= 0) sb_printf(b, "root ::= s%d\n", r);
    }
    sb_put(b, BASE_RULES, sizeof BASE_RULES - 1);
    rt_json_free(&g.j);
    specd_free(g.made);
    if (g.st == SPECD_OK && b->oom)
        g.st = specd_fail(err, SPECD_E_NOMEM, "json schema: out of memory");
    if (g.st == SPECD_OK && b->n > SPECD_GRAMMAR_MAX_TEXT)
        g.st =
            specd_fail(err, SPECD_E_UNSUPPORTED, "json schema: the grammar is %zu bytes, limit %u",
                       b->n, (unsigned)SPECD_GRAMMAR_MAX_TEXT);
    if (g.st != SPECD_OK) {
        specd_free(b->s);
        return g.st;
    }
    *out = b->s;
    *out_len = b->n;
    return SPECD_OK;
}
