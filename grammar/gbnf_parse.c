/* GBNF text -> program (grammar_internal.h). One pass of recursive descent; groups and
 * repetitions become rules of their own, so the program has only END, CHAR and REF elements.
 * Then two checks: every referenced rule is defined, and no rule can reach itself without
 * consuming a character (left recursion would make the matcher's closure loop). */
#include "grammar/grammar_internal.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_NEST = 200, MAX_CP = 0x10FFFF };

typedef struct vec32 {
    int32_t *v;
    uint32_t n, cap;
} vec32;

static int vec_push(vec32 *a, int32_t x) {
    if (a->n == a->cap) {
        uint32_t cap = a->cap ? 2 * a->cap : 16;
        int32_t *v = specd_alloc_array(cap, sizeof *v);
        if (!v) return 0;
        if (a->n) memcpy(v, a->v, a->n * sizeof *v);
        specd_free(a->v);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 1;
}

typedef struct rule_info {
    size_t name_pos, name_len; /* name in the text; name_len 0 for rules the parser made */
    size_t first_ref;          /* where it was first referenced, for "undefined rule" */
    int defined;
    vec32 body; /* alternatives, each closed by GE_END */
} rule_info;

typedef struct parser {
    const char *s;
    size_t len, pos;
    specd_error *err;
    specd_status st; /* first failure */
    rule_info *rules;
    int32_t n_rules, rules_cap;
    u64map by_name; /* hash of name -> rule */
    vec32 cs_off, cs_lo, cs_hi;
    u64map single; /* code point -> charset */
    size_t n_el;
} parser;

static void line_col(const parser *p, size_t pos, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos && i < p->len; i++) {
        if (p->s[i] == '\n') {
            ++*line;
            *col = 1;
        } else if (((unsigned char)p->s[i] & 0xC0) != 0x80) {
            ++*col;
        }
    }
}

static int fail_at(parser *p, size_t pos, specd_status st, const char *what, const char *arg) {
    if (p->st != SPECD_OK) return 0;
    int line, col;
    line_col(p, pos, &line, &col);
    p->st = specd_fail(p->err, st, "gbnf: line %d col %d: %s%s", line, col, what, arg ? arg : "");
    return 0;
}

static int fail(parser *p, const char *what) {
    return fail_at(p, p->pos, SPECD_E_FORMAT, what, NULL);
}

static int nomem(parser *p) {
    if (p->st == SPECD_OK) p->st = specd_fail(p->err, SPECD_E_NOMEM, "gbnf: out of memory");
    return 0;
}

static int emit(parser *p, vec32 *out, int32_t e) {
    if (++p->n_el > SPECD_GRAMMAR_MAX_ELEMENTS) {
        char lim[64];
        snprintf(lim, sizeof lim, "%u elements", (unsigned)SPECD_GRAMMAR_MAX_ELEMENTS);
        return fail_at(p, p->pos, SPECD_E_UNSUPPORTED, "grammar too large: more than ", lim);
    }
    return vec_push(out, e) || nomem(p);
}

static int32_t new_rule(parser *p, size_t name_pos, size_t name_len) {
    if (p->n_rules == p->rules_cap) {
        int32_t cap = p->rules_cap ? 2 * p->rules_cap : 32;
        rule_info *r = specd_alloc_array((size_t)cap, sizeof *r);
        if (!r) return nomem(p) - 1;
        if (p->n_rules) memcpy(r, p->rules, (size_t)p->n_rules * sizeof *r);
        specd_free(p->rules);
        p->rules = r;
        p->rules_cap = cap;
    }
    rule_info *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->name_pos = name_pos;
    r->name_len = name_len;
    r->first_ref = name_pos;
    return p->n_rules++;
}

static uint64_t name_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

/* The rule named s[pos .. pos + n), made on first mention. */
static int32_t rule_named(parser *p, size_t pos, size_t n) {
    uint64_t h = name_hash(p->s + pos, n);
    int32_t r = u64map_get(&p->by_name, h);
    if (r >= 0) {
        const rule_info *ri = &p->rules[r];
        if (ri->name_len == n && !memcmp(p->s + ri->name_pos, p->s + pos, n)) return r;
        for (r = 0; r < p->n_rules; r++) /* a 64-bit hash collision: look the slow way */
            if (p->rules[r].name_len == n && !memcmp(p->s + p->rules[r].name_pos, p->s + pos, n))
                return r;
    }
    r = new_rule(p, pos, n);
    if (r >= 0 && u64map_get(&p->by_name, h) < 0 && !u64map_put(&p->by_name, h, r))
        return nomem(p) - 1;
    return r;
}

static int is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static void skip_space(parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->s[p->pos] != '\n')
                p->pos++;
        } else {
            break;
        }
    }
}

/* --- charsets ------------------------------------------------------------------------------ */

typedef struct range {
    uint32_t lo, hi;
} range;

static int cmp_range(const void *a, const void *b) {
    const range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Adds the charset of ranges r[0..n) (sorted and merged here; complemented when neg). */
static int32_t add_charset(parser *p, range *r, size_t n, int neg) {
    if (n > 1) qsort(r, n, sizeof *r, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    int32_t id = (int32_t)p->cs_off.n - 1; /* cs_off starts with one 0 */
    if (!neg) {
        for (size_t i = 0; i < m; i++)
            if (!vec_push(&p->cs_lo, (int32_t)r[i].lo) || !vec_push(&p->cs_hi, (int32_t)r[i].hi))
                return nomem(p) - 1;
    } else {
        uint32_t next = 0;
        for (size_t i = 0; i <= m; i++) {
            uint32_t lo = i < m ? r[i].lo : MAX_CP + 1u;
            if (lo > next &&
                (!vec_push(&p->cs_lo, (int32_t)next) || !vec_push(&p->cs_hi, (int32_t)(lo - 1))))
                return nomem(p) - 1;
            if (i < m) next = r[i].hi + 1;
        }
    }
    if (!vec_push(&p->cs_off, (int32_t)p->cs_lo.n)) return nomem(p) - 1;
    return id;
}

static int32_t single_charset(parser *p, uint32_t cp) {
    int32_t c = u64map_get(&p->single, cp);
    if (c >= 0) return c;
    range r = {cp, cp};
    c = add_charset(p, &r, 1, 0);
    if (c >= 0 && !u64map_put(&p->single, cp, c)) return nomem(p) - 1;
    return c;
}

/* --- characters ---------------------------------------------------------------------------- */

/* Decodes one UTF-8 character of the text. */
static int read_utf8(parser *p, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)p->s + p->pos;
    size_t left = p->len - p->pos;
    unsigned char c = s[0];
    int n = c < 0x80             ? 1
            : (c & 0xE0) == 0xC0 ? 2
            : (c & 0xF0) == 0xE0 ? 3
            : (c & 0xF8) == 0xF0 ? 4
                                 : 0;
    if (!n || (size_t)n > left) return fail(p, "invalid UTF-8");
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return fail(p, "invalid UTF-8");
        v = v << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[n] || v > MAX_CP) return fail(p, "invalid UTF-8");
    p->pos += (size_t)n;
    *cp = v;
    return 1;
}

static int hex_digits(parser *p, int n, uint32_t *cp) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        if (p->pos >= p->len) return fail(p, "escape cut short");
        char c = p->s[p->pos];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return fail(p, "bad hex digit in escape");
        v = v << 4 | (uint32_t)d;
        p->pos++;
    }
    if (v > MAX_CP) return fail(p, "escaped code point beyond U+10FFFF");
    *cp = v;
    return 1;
}

/* One character of a literal or class, escapes decoded. */
static int read_char(parser *p, uint32_t *cp) {
    if (p->pos >= p->len) return fail(p, "unexpected end of grammar");
    if (p->s[p->pos] != '\\') return read_utf8(p, cp);
    size_t at = p->pos++;
    if (p->pos >= p->len) return fail(p, "escape cut short");
    char c = p->s[p->pos++];
    switch (c) {
    case 'n': *cp = '\n'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 't': *cp = '\t'; return 1;
    case '0': *cp = 0; return 1;
    case '\\':
    case '"':
    case '\'':
    case '[':
    case ']':
    case '-':
    case '/':
    case '^': *cp = (uint32_t)c; return 1;
    case 'x': return hex_digits(p, 2, cp);
    case 'u': return hex_digits(p, 4, cp);
    case 'U': return hex_digits(p, 8, cp);
    default: {
        char e[4] = {'\\', c, '\'', 0};
        return fail_at(p, at, SPECD_E_FORMAT, "unknown escape '", e);
    }
    }
}

/* --- grammar ------------------------------------------------------------------------------- */

static int parse_alternates(parser *p, vec32 *out, int depth);

static int parse_literal(parser *p, vec32 *out) {
    size_t start = p->pos++;
    while (p->pos < p->len && p->s[p->pos] != '"') {
        uint32_t cp;
        if (!read_char(p, &cp)) return 0;
        int32_t c = single_charset(p, cp);
        if (c < 0 || !emit(p, out, GE_CHAR | c << 2)) return 0;
    }
    if (p->pos >= p->len) return fail_at(p, start, SPECD_E_FORMAT, "unterminated literal", NULL);
    p->pos++;
    return 1;
}

static int parse_class(parser *p, vec32 *out) {
    size_t start = p->pos++;
    int neg = p->pos < p->len && p->s[p->pos] == '^';
    if (neg) p->pos++;
    range *r = NULL;
    size_t n = 0, cap = 0;
    int ok = 1;
    while (ok && p->pos < p->len && p->s[p->pos] != ']') {
        uint32_t lo, hi;
        ok = read_char(p, &lo);
        hi = lo;
        if (ok && p->pos + 1 < p->len && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
            p->pos++;
            ok = read_char(p, &hi);
            if (ok && hi < lo) ok = fail(p, "range out of order in character class");
        }
        if (ok && n == cap) {
            cap = cap ? 2 * cap : 8;
            range *nr = specd_alloc_array(cap, sizeof *nr);
            if (!nr)
                ok = nomem(p);
            else {
                if (n) memcpy(nr, r, n * sizeof *r);
                specd_free(r);
                r = nr;
            }
        }
        if (ok) r[n++] = (range){lo, hi};
    }
    if (ok && p->pos >= p->len)
        ok = fail_at(p, start, SPECD_E_FORMAT, "unterminated character class", NULL);
    int32_t c = -1;
    if (ok) {
        p->pos++;
        c = add_charset(p, r, n, neg);
    }
    specd_free(r);
    return c >= 0 && emit(p, out, GE_CHAR | c << 2);
}

/* Moves out->v[from ..) into a rule of its own and leaves one REF to it. */
static int wrap(parser *p, vec32 *out, uint32_t from) {
    int32_t r = new_rule(p, p->pos, 0);
    if (r < 0) return 0;
    rule_info *ri = &p->rules[r];
    ri->defined = 1;
    for (uint32_t i = from; i < out->n; i++)
        if (!vec_push(&ri->body, out->v[i])) return nomem(p);
    if (!vec_push(&ri->body, GE_END)) return nomem(p);
    p->n_el++;
    out->n = from;
    return emit(p, out, GE_REF | r << 2);
}

static int parse_count(parser *p, long *v) {
    skip_space(p);
    if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
        return fail(p, "expected a number in {m,n}");
    long x = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        x = x * 10 + (p->s[p->pos++] - '0');
        if (x > SPECD_GRAMMAR_MAX_REPEAT) {
            char lim[32];
            snprintf(lim, sizeof lim, "%d", SPECD_GRAMMAR_MAX_REPEAT);
            return fail_at(p, p->pos, SPECD_E_UNSUPPORTED, "repetition count above ", lim);
        }
    }
    skip_space(p);
    *v = x;
    return 1;
}

/* Applies a postfix operator to the item out->v[from ..): x{min,max} (max -1: unbounded) is x
 * min times, then either a rule S ::= x S | (empty), or max - min nested optional rules. */
static int repeat(parser *p, vec32 *out, uint32_t from) {
    char op = p->s[p->pos++];
    long min = 0, max = -1;
    if (op == '+')
        min = 1;
    else if (op == '?')
        max = 1;
    else if (op == '{') {
        if (!parse_count(p, &min)) return 0;
        max = min;
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            skip_space(p);
            max = -1;
            if (p->pos < p->len && p->s[p->pos] != '}' && !parse_count(p, &max)) return 0;
        }
        if (p->pos >= p->len || p->s[p->pos] != '}') return fail(p, "expected '}'");
        p->pos++;
        if (max >= 0 && max < min) return fail(p, "{m,n} with n < m");
    }
    if (out->n - from != 1 && !wrap(p, out, from)) return 0;
    int32_t x = out->v[--out->n];
    for (long i = 0; i < min; i++)
        if (!emit(p, out, x)) return 0;
    int32_t prev = -1;
    long opt = max < 0 ? 1 : max - min;
    for (long i = 0; i < opt; i++) {
        int32_t r = new_rule(p, p->pos, 0);
        if (r < 0) return 0;
        int32_t self = max < 0 ? r : prev;
        vec32 *b = &p->rules[r].body;
        p->rules[r].defined = 1;
        if (!emit(p, b, x) || (self >= 0 && !emit(p, b, GE_REF | self << 2)) ||
            !emit(p, b, GE_END) || !emit(p, b, GE_END))
            return 0;
        prev = r;
    }
    return prev < 0 || emit(p, out, GE_REF | prev << 2);
}

/* At a name followed by "::=" (the next rule starts here). */
static int at_rule_start(parser *p) {
    size_t q = p->pos;
    while (q < p->len && is_name_char(p->s[q]))
        q++;
    if (q == p->pos) return 0;
    while (q < p->len && (p->s[q] == ' ' || p->s[q] == '\t'))
        q++;
    return p->len - q >= 3 && !memcmp(p->s + q, "::=", 3);
}

static int parse_sequence(parser *p, vec32 *out, int depth) {
    for (;;) {
        skip_space(p);
        if (p->pos >= p->len) return 1;
        char c = p->s[p->pos];
        if (c == '|' || c == ')') return 1;
        if (depth == 0 && at_rule_start(p)) return 1;
        uint32_t from = out->n;
        if (c == '"') {
            if (!parse_literal(p, out)) return 0;
        } else if (c == '[') {
            if (!parse_class(p, out)) return 0;
        } else if (c == '.') {
            p->pos++;
            range any = {0, MAX_CP};
            int32_t cs = add_charset(p, &any, 1, 0);
            if (cs < 0 || !emit(p, out, GE_CHAR | cs << 2)) return 0;
        } else if (c == '(') {
            if (depth >= MAX_NEST) return fail(p, "groups nested too deeply");
            size_t open = p->pos++;
            int32_t r = new_rule(p, open, 0);
            if (r < 0) return 0;
            vec32 body = {0};
            int ok = parse_alternates(p, &body, depth + 1);
            p->rules[r].body = body;
            p->rules[r].defined = 1;
            if (!ok) return 0;
            if (p->pos >= p->len || p->s[p->pos] != ')')
                return fail_at(p, open, SPECD_E_FORMAT, "unclosed '('", NULL);
            p->pos++;
            if (!emit(p, out, GE_REF | r << 2)) return 0;
        } else if (is_name_char(c)) {
            size_t start = p->pos;
            while (p->pos < p->len && is_name_char(p->s[p->pos]))
                p->pos++;
            int32_t r = rule_named(p, start, p->pos - start);
            if (r < 0 || !emit(p, out, GE_REF | r << 2)) return 0;
        } else {
            char e[3] = {c, '\'', 0};
            return fail_at(p, p->pos, SPECD_E_FORMAT, "unexpected character '", e);
        }
        for (;;) { /* postfix operators, possibly after spaces */
            size_t save = p->pos;
            skip_space(p);
            if (p->pos < p->len && strchr("*+?{", p->s[p->pos]) && p->s[p->pos]) {
                if (!repeat(p, out, from)) return 0; /* the result spans [from, out->n) */
            } else {
                p->pos = save;
                break;
            }
        }
    }
}

static int parse_alternates(parser *p, vec32 *out, int depth) {
    for (;;) {
        if (!parse_sequence(p, out, depth) || !emit(p, out, GE_END)) return 0;
        if (p->pos < p->len && p->s[p->pos] == '|') {
            p->pos++;
            continue;
        }
        return 1;
    }
}

static int parse_rules(parser *p) {
    skip_space(p);
    if (p->pos >= p->len) return fail(p, "empty grammar (no root rule)");
    while (p->pos < p->len) {
        size_t start = p->pos;
        while (p->pos < p->len && is_name_char(p->s[p->pos]))
            p->pos++;
        if (p->pos == start) return fail(p, "expected a rule name");
        size_t name_len = p->pos - start;
        skip_space(p);
        if (p->len - p->pos < 3 || memcmp(p->s + p->pos, "::=", 3))
            return fail(p, "expected '::='");
        p->pos += 3;
        int32_t r = rule_named(p, start, name_len);
        if (r < 0) return 0;
        if (p->rules[r].defined) {
            char name[80];
            snprintf(name, sizeof name, "%.*s' defined twice", (int)(name_len > 60 ? 60 : name_len),
                     p->s + start);
            return fail_at(p, start, SPECD_E_FORMAT, "rule '", name);
        }
        p->rules[r].defined = 1;
        vec32 body = {0};
        int ok = parse_alternates(p, &body, 0);
        p->rules[r].body = body;
        if (!ok) return 0;
        if (p->pos < p->len && p->s[p->pos] == ')') return fail(p, "unmatched ')'");
        skip_space(p);
    }
    return 1;
}

/* --- checks -------------------------------------------------------------------------------- */

static int rule_name_arg(const parser *p, int32_t r, char *buf, size_t n) {
    const rule_info *ri = &p->rules[r];
    if (ri->name_len)
        snprintf(buf, n, "%.*s'", (int)(ri->name_len > 60 ? 60 : ri->name_len),
                 p->s + ri->name_pos);
    else
        snprintf(buf, n, "(group)'");
    return 1;
}

/* Left recursion: rule r reaches s when s is called at the start of one of r's alternatives
 * after only nullable elements; a cycle in that graph is refused. */
static int check_left_recursion(parser *p, const gram_prog *g) {
    size_t nr = (size_t)g->n_rules;
    uint8_t *nullable = specd_alloc_array(nr, 1), *color = specd_alloc_array(nr, 1);
    int32_t *frame_r = specd_alloc_array(nr, sizeof(int32_t));
    int64_t *frame_i = specd_alloc_array(nr, sizeof(int64_t)); /* next element to look at */
    int ok = nullable && color && frame_r && frame_i;
    if (!ok) nomem(p);
    for (int changed = 1; ok && changed;) {
        changed = 0;
        for (int32_t r = 0; r < g->n_rules; r++)
            for (int32_t a = 0; a < g->rule_nalt[r] && !nullable[r]; a++) {
                int32_t i = g->alt_start[g->rule_alt[r] + a];
                while (GE_KIND(g->el[i]) == GE_REF && nullable[GE_ARG(g->el[i])])
                    i++;
                if (GE_KIND(g->el[i]) == GE_END) nullable[r] = changed = 1;
            }
    }
    /* Depth-first over rules. A frame's cursor walks the rule's elements in order; within an
     * alternative it stops after the first element that is not a nullable call. */
    for (int32_t root = 0; ok && root < g->n_rules; root++) {
        if (color[root]) continue;
        int32_t sp = 0;
        frame_r[0] = root;
        frame_i[0] = 0;
        color[root] = 1;
        while (ok && sp >= 0) {
            int32_t r = frame_r[sp], found = -1;
            for (;;) {
                /* frame_i encodes (alternative, offset) as alternative * 2^20 + offset */
                int32_t a = (int32_t)(frame_i[sp] >> 20), k = (int32_t)(frame_i[sp] & 0xFFFFF);
                if (a >= g->rule_nalt[r] || found >= 0) break;
                int32_t i = g->alt_start[g->rule_alt[r] + a] + k;
                int32_t e = g->el[i];
                if (GE_KIND(e) == GE_REF) {
                    found = GE_ARG(e);
                    frame_i[sp] = nullable[found] ? frame_i[sp] + 1 : (int64_t)(a + 1) << 20;
                } else {
                    frame_i[sp] = (int64_t)(a + 1) << 20;
                }
            }
            if (found < 0) {
                color[r] = 2;
                sp--;
            } else if (color[found] == 1) {
                char name[80];
                rule_name_arg(p, found, name, sizeof name);
                ok = fail_at(p, p->rules[found].name_pos, SPECD_E_FORMAT,
                             "left recursion: rule reaches itself before any character: '", name);
            } else if (!color[found]) {
                color[found] = 1;
                frame_r[++sp] = found;
                frame_i[sp] = 0;
            }
        }
    }
    specd_free(nullable);
    specd_free(color);
    specd_free(frame_r);
    specd_free(frame_i);
    return ok;
}

static int assemble(parser *p, gram_prog *g) {
    size_t n_el = 0, n_alt = 0;
    for (int32_t r = 0; r < p->n_rules; r++) {
        n_el += p->rules[r].body.n;
        for (uint32_t i = 0; i < p->rules[r].body.n; i++)
            n_alt += p->rules[r].body.v[i] == GE_END;
    }
    g->n_rules = p->n_rules;
    g->n_el = (int32_t)n_el;
    g->n_cs = (int32_t)p->cs_off.n - 1;
    g->el = specd_alloc_array(n_el + 1, sizeof *g->el);
    g->alt_start = specd_alloc_array(n_alt + 1, sizeof *g->alt_start);
    g->rule_alt = specd_alloc_array((size_t)p->n_rules, sizeof *g->rule_alt);
    g->rule_nalt = specd_alloc_array((size_t)p->n_rules, sizeof *g->rule_nalt);
    g->cs_off = specd_alloc_array(p->cs_off.n, sizeof *g->cs_off);
    g->cs_lo = specd_alloc_array(p->cs_lo.n + 1, sizeof *g->cs_lo);
    g->cs_hi = specd_alloc_array(p->cs_lo.n + 1, sizeof *g->cs_hi);
    g->cs_ascii = specd_alloc_array((size_t)g->n_cs + 1, sizeof *g->cs_ascii);
    if (!g->el || !g->alt_start || !g->rule_alt || !g->rule_nalt || !g->cs_off || !g->cs_lo ||
        !g->cs_hi || !g->cs_ascii)
        return nomem(p);
    size_t e = 0, a = 0;
    for (int32_t r = 0; r < p->n_rules; r++) {
        const vec32 *b = &p->rules[r].body;
        g->rule_alt[r] = (int32_t)a;
        size_t start = e;
        for (uint32_t i = 0; i < b->n; i++) {
            g->el[e++] = b->v[i];
            if (b->v[i] == GE_END) {
                g->alt_start[a++] = (int32_t)start;
                start = e;
            }
        }
        g->rule_nalt[r] = (int32_t)a - g->rule_alt[r];
    }
    memcpy(g->cs_off, p->cs_off.v, p->cs_off.n * sizeof *g->cs_off);
    for (uint32_t i = 0; i < p->cs_lo.n; i++) {
        g->cs_lo[i] = (uint32_t)p->cs_lo.v[i];
        g->cs_hi[i] = (uint32_t)p->cs_hi.v[i];
    }
    for (int32_t c = 0; c < g->n_cs; c++)
        for (uint32_t cp = 0; cp < 128; cp++)
            if (gram_cs_has(g, c, cp)) g->cs_ascii[c][cp >> 6] |= 1ULL << (cp & 63);
    return 1;
}

int gram_cs_meets(const gram_prog *p, int32_t c, uint32_t lo, uint32_t hi) {
    int32_t a = p->cs_off[c], b = p->cs_off[c + 1];
    while (a < b) { /* first range whose hi >= lo */
        int32_t m = (a + b) / 2;
        if (p->cs_hi[m] < lo)
            a = m + 1;
        else
            b = m;
    }
    return a < p->cs_off[c + 1] && p->cs_lo[a] <= hi;
}

int gram_cs_has(const gram_prog *p, int32_t c, uint32_t cp) {
    return gram_cs_meets(p, c, cp, cp);
}

void gram_prog_free(gram_prog *g) {
    specd_free(g->el);
    specd_free(g->alt_start);
    specd_free(g->rule_alt);
    specd_free(g->rule_nalt);
    specd_free(g->cs_off);
    specd_free(g->cs_lo);
    specd_free(g->cs_hi);
    specd_free(g->cs_ascii);
    memset(g, 0, sizeof *g);
}

specd_status gram_parse_gbnf(const char *text, size_t len, gram_prog *out, specd_error *err) {
    if (!text && len) return specd_fail(err, SPECD_E_INVALID_ARG, "gbnf: NULL text");
    if (len > SPECD_GRAMMAR_MAX_TEXT)
        return specd_fail(err, SPECD_E_UNSUPPORTED, "gbnf: grammar of %zu bytes, limit %u", len,
                          (unsigned)SPECD_GRAMMAR_MAX_TEXT);
    parser p = {.s = text, .len = len, .err = err};
    gram_prog g = {0};
    int ok = vec_push(&p.cs_off, 0) ? parse_rules(&p) : nomem(&p);
    if (ok) {
        int32_t root = -1;
        for (int32_t r = 0; r < p.n_rules; r++) {
            const rule_info *ri = &p.rules[r];
            if (!ri->defined) {
                char name[80];
                rule_name_arg(&p, r, name, sizeof name);
                ok = fail_at(&p, ri->first_ref, SPECD_E_FORMAT, "undefined rule '", name);
                break;
            }
            if (ri->name_len == 4 && !memcmp(text + ri->name_pos, "root", 4)) root = r;
        }
        if (ok && root < 0) ok = fail_at(&p, 0, SPECD_E_FORMAT, "no rule named 'root'", NULL);
        g.root = root;
    }
    if (ok) ok = assemble(&p, &g) && check_left_recursion(&p, &g);
    for (int32_t r = 0; r < p.n_rules; r++)
        specd_free(p.rules[r].body.v);
    specd_free(p.rules);
    u64map_free(&p.by_name);
    u64map_free(&p.single);
    specd_free(p.cs_off.v);
    specd_free(p.cs_lo.v);
    specd_free(p.cs_hi.v);
    if (!ok) {
        gram_prog_free(&g);
        return p.st != SPECD_OK ? p.st : specd_fail(err, SPECD_E_INTERNAL, "gbnf: failed");
    }
    *out = g;
    return SPECD_OK;
}
