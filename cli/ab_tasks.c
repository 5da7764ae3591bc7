#include "cli/ab_tasks.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- field access ------------------------------------------------------------------------- */

static const cJSON *field(const ab_task *t, const char *name) {
    return cJSON_GetObjectItemCaseSensitive((const cJSON *)t->item, name);
}

static int int_value(const cJSON *v, long *out) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        fabs(v->valuedouble) > 1e9)
        return 0;
    *out = (long)v->valuedouble;
    return 1;
}

static long int_field(const ab_task *t, const char *name) {
    long v = 0;
    int_value(field(t, name), &v);
    return v;
}

/* ---- text helpers ------------------------------------------------------------------------- */

static const char *find(const char *hay, size_t n, const char *needle, int fold) {
    size_t m = strlen(needle);
    if (m == 0) return hay;
    for (size_t i = 0; i + m <= n; i++) {
        size_t k = 0;
        while (k < m && (fold ? tolower((unsigned char)hay[i + k]) ==
                                    tolower((unsigned char)needle[k])
                              : hay[i + k] == needle[k]))
            k++;
        if (k == m) return hay + i;
    }
    return NULL;
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Calls fn on each line (without its '\n'); stops early when fn returns non-zero. */
static void each_line(const char *s, size_t n, int (*fn)(const char *, size_t, void *), void *u) {
    size_t start = 0;
    for (size_t i = 0; i <= n; i++)
        if (i == n || s[i] == '\n') {
            if (fn(s + start, i - start, u)) return;
            start = i + 1;
        }
}

/* ---- rules -------------------------------------------------------------------------------- */

/* The next maximal digit run at or after *at: its start and its value (-1 for a run of more than
 * 10 digits, which no rule's number reaches); *at moves past it. 0 when there is none. */
static int next_digits(const char *s, size_t n, size_t *at, size_t *start, long long *value) {
    size_t i = *at;
    while (i < n && !isdigit((unsigned char)s[i])) i++;
    if (i >= n) return 0;
    long long v = 0;
    *start = i;
    for (; i < n && isdigit((unsigned char)s[i]); i++)
        if (i - *start < 10) v = v * 10 + (s[i] - '0');
    *value = i - *start <= 10 ? v : -1;
    *at = i;
    return 1;
}

static int check_count(const ab_task *t, const char *s, size_t n) {
    long from = int_field(t, "from"), to = int_field(t, "to");
    long step = to >= from ? 1 : -1, want = from;
    size_t at = 0, start;
    long long v;
    while (next_digits(s, n, &at, &start, &v))
        if (v == want) {
            if (want == to) return 1;
            want += step;
        }
    return 0;
}

static int check_copy(const ab_task *t, const char *s, size_t n) {
    const cJSON *item;
    const char *at = s;
    cJSON_ArrayForEach(item, field(t, "items")) {
        const char *hit = find(at, n - (size_t)(at - s), item->valuestring, 0);
        if (!hit) return 0;
        at = hit + strlen(item->valuestring);
    }
    return 1;
}

static int check_number(const ab_task *t, const char *s, size_t n) {
    long answer = int_field(t, "answer");
    size_t at = 0, i;
    long long v;
    while (next_digits(s, n, &at, &i, &v)) {
        int decimal_after = at + 1 < n && s[at] == '.' && isdigit((unsigned char)s[at + 1]);
        int decimal_before = i >= 2 && s[i - 1] == '.' && isdigit((unsigned char)s[i - 2]);
        /* a minus directly before, not joining two operands ("5-3"), makes it negative */
        int negative = i >= 1 && s[i - 1] == '-' && (i < 2 || !isalnum((unsigned char)s[i - 2]));
        if (v >= 0 && !decimal_after && !decimal_before && (negative ? -v : v) == answer) return 1;
    }
    return 0;
}

static int check_case(const char *s, size_t n, int upper) {
    int letters = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalpha(c) || c >= 0x80) continue;
        if (upper ? islower(c) : isupper(c)) return 0;
        letters++;
    }
    return letters > 0;
}

static int check_caps(const ab_task *t, const char *s, size_t n) { return (void)t, check_case(s, n, 1); }
static int check_lower(const ab_task *t, const char *s, size_t n) {
    return (void)t, check_case(s, n, 0);
}

static int count_bullet(const char *l, size_t n, void *u) {
    size_t i = 0;
    while (i < n && (l[i] == ' ' || l[i] == '\t')) i++;
    if ((i + 2 <= n && (l[i] == '-' || l[i] == '*') && l[i + 1] == ' ') ||
        (i + 4 <= n && !memcmp(l + i, "\xe2\x80\xa2 ", 4)))
        ++*(long *)u;
    return 0;
}

static int check_bullets(const ab_task *t, const char *s, size_t n) {
    long count = 0;
    each_line(s, n, count_bullet, &count);
    return count == int_field(t, "count");
}

static int count_line(const char *l, size_t n, void *u) {
    for (size_t i = 0; i < n; i++)
        if (!is_blank(l[i])) {
            ++*(long *)u;
            break;
        }
    return 0;
}

static int check_lines(const ab_task *t, const char *s, size_t n) {
    long count = 0;
    each_line(s, n, count_line, &count);
    return count == int_field(t, "count");
}

/* Objects are tried from each '{' that is not inside an object already parsed, so a key of a
 * nested object does not count. */
static int check_json_key(const ab_task *t, const char *s, size_t n) {
    const char *key = field(t, "key")->valuestring;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '{') continue;
        const char *end = NULL;
        cJSON *obj = cJSON_ParseWithLengthOpts(s + i, n - i, &end, 0);
        int ok = cJSON_IsObject(obj) && cJSON_GetObjectItemCaseSensitive(obj, key) != NULL;
        if (obj && end > s + i) i = (size_t)(end - s) - 1;
        cJSON_Delete(obj);
        if (ok) return 1;
    }
    return 0;
}

static int check_max_words(const ab_task *t, const char *s, size_t n) {
    long words = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_blank(s[i]) && (i == 0 || is_blank(s[i - 1]))) words++;
    return words >= 1 && words <= int_field(t, "n");
}

static int check_starts_with(const ab_task *t, const char *s, size_t n) {
    const char *text = field(t, "text")->valuestring;
    size_t i = 0, m = strlen(text);
    while (i < n && is_blank(s[i])) i++;
    return n - i >= m && !memcmp(s + i, text, m);
}

static int check_nothing(const ab_task *t, const char *s, size_t n) {
    return (void)t, (void)s, (void)n, 1;
}

enum field_kind { F_NONE, F_INT, F_STRING, F_STRINGS, F_POSITIVE };

typedef struct rule_def {
    const char *name;
    int (*check)(const ab_task *, const char *, size_t);
    const char *field[2];
    enum field_kind kind[2];
} rule_def;

static const rule_def RULES[] = {
    {"count", check_count, {"from", "to"}, {F_INT, F_INT}},
    {"copy", check_copy, {"items"}, {F_STRINGS}},
    {"number", check_number, {"answer"}, {F_INT}},
    {"caps", check_caps, {0}, {F_NONE}},
    {"lowercase", check_lower, {0}, {F_NONE}},
    {"bullets", check_bullets, {"count"}, {F_POSITIVE}},
    {"lines", check_lines, {"count"}, {F_POSITIVE}},
    {"json_key", check_json_key, {"key"}, {F_STRING}},
    {"max_words", check_max_words, {"n"}, {F_POSITIVE}},
    {"starts_with", check_starts_with, {"text"}, {F_STRING}},
    {"contains", check_nothing, {0}, {F_NONE}},
};

static const rule_def *rule_find(const char *name) {
    for (size_t i = 0; i < sizeof RULES / sizeof RULES[0]; i++)
        if (!strcmp(RULES[i].name, name)) return &RULES[i];
    return NULL;
}

/* ---- parsing ------------------------------------------------------------------------------ */

static int bad(char *msg, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return 1;
}

static int valid_strings(const cJSON *v) {
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0) return 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, v) if (!cJSON_IsString(s) || !s->valuestring[0]) return 0;
    return 1;
}

static int check_field(const cJSON *v, enum field_kind kind, const char *name, char *msg,
                       size_t cap) {
    long x;
    switch (kind) {
    case F_INT:
        if (!int_value(v, &x)) return bad(msg, cap, "field \"%s\" must be an integer", name);
        break;
    case F_POSITIVE:
        if (!int_value(v, &x) || x < 1 || x > 1000)
            return bad(msg, cap, "field \"%s\" must be an integer in [1, 1000]", name);
        break;
    case F_STRING:
        if (!cJSON_IsString(v) || !v->valuestring[0])
            return bad(msg, cap, "field \"%s\" must be a non-empty string", name);
        break;
    case F_STRINGS:
        if (!valid_strings(v))
            return bad(msg, cap, "field \"%s\" must be a non-empty array of non-empty strings",
                       name);
        break;
    case F_NONE:
        break;
    }
    return 0;
}

static int validate(const cJSON *obj, const rule_def *r, char *msg, size_t cap) {
    const cJSON *v;
    cJSON_ArrayForEach(v, obj) {
        const char *k = v->string;
        int known = !strcmp(k, "id") || !strcmp(k, "prompt") || !strcmp(k, "rule") ||
                    !strcmp(k, "note") || !strcmp(k, "contains") || !strcmp(k, "icontains");
        for (int f = 0; f < 2; f++) known |= r->field[f] && !strcmp(k, r->field[f]);
        if (!known) return bad(msg, cap, "unknown field \"%s\" for rule \"%s\"", k, r->name);
    }
    for (int f = 0; f < 2 && r->field[f]; f++) {
        v = cJSON_GetObjectItemCaseSensitive(obj, r->field[f]);
        if (!v) return bad(msg, cap, "rule \"%s\" needs field \"%s\"", r->name, r->field[f]);
        if (check_field(v, r->kind[f], r->field[f], msg, cap)) return 1;
    }
    long from, to;
    if (!strcmp(r->name, "count") &&
        int_value(cJSON_GetObjectItemCaseSensitive(obj, "from"), &from) &&
        int_value(cJSON_GetObjectItemCaseSensitive(obj, "to"), &to) &&
        (from < 0 || to < 0 || labs(to - from) > 1000))
        return bad(msg, cap, "count: from and to must be >= 0 and at most 1000 apart");
    const char *lists[] = {"contains", "icontains"};
    int any = 0;
    for (int i = 0; i < 2; i++)
        if ((v = cJSON_GetObjectItemCaseSensitive(obj, lists[i]))) {
            if (check_field(v, F_STRINGS, lists[i], msg, cap)) return 1;
            any = 1;
        }
    if (!strcmp(r->name, "contains") && !any)
        return bad(msg, cap, "rule \"contains\" needs \"contains\" or \"icontains\"");
    v = cJSON_GetObjectItemCaseSensitive(obj, "note");
    if (v && !cJSON_IsString(v)) return bad(msg, cap, "field \"note\" must be a string");
    return 0;
}

int ab_task_parse(const char *json, size_t len, ab_task *out, char *msg, size_t cap) {
    memset(out, 0, sizeof *out);
    const char *end = NULL;
    cJSON *obj = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!obj) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= json && at <= json + len ? (long)(at - json) : -1;
        return bad(msg, cap, "not valid JSON (near byte %ld)", off);
    }
    while (end && end < json + len && is_blank(*end)) end++;
    const char *fail = NULL;
    char why[200];
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, "id");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(obj, "prompt");
    const cJSON *rule = cJSON_GetObjectItemCaseSensitive(obj, "rule");
    const rule_def *r = NULL;
    if (end != json + len) fail = "text after the JSON object (one item per line)";
    else if (!cJSON_IsObject(obj)) fail = "an item must be a JSON object";
    else if (!cJSON_IsString(id) || !id->valuestring[0]) fail = "field \"id\" must be a non-empty string";
    else if (!cJSON_IsString(prompt) || !prompt->valuestring[0])
        fail = "field \"prompt\" must be a non-empty string";
    else if (!cJSON_IsString(rule)) fail = "field \"rule\" must be a string";
    else if (!(r = rule_find(rule->valuestring))) {
        snprintf(why, sizeof why, "unknown rule \"%.64s\" (count, copy, number, caps, lowercase, "
                 "bullets, lines, json_key, max_words, starts_with, contains)", rule->valuestring);
        fail = why;
    } else if (validate(obj, r, why, sizeof why))
        fail = why;
    if (fail) {
        if (cJSON_IsString(id)) bad(msg, cap, "item \"%.64s\": %s", id->valuestring, fail);
        else bad(msg, cap, "%s", fail);
        cJSON_Delete(obj);
        return 1;
    }
    out->id = strdup(id->valuestring);
    out->prompt = strdup(prompt->valuestring);
    out->rule = strdup(r->name);
    out->line = strndup(json, len);
    out->item = obj;
    if (!out->id || !out->prompt || !out->rule || !out->line) {
        ab_task_free(out);
        return bad(msg, cap, "out of memory");
    }
    return 0;
}

void ab_task_free(ab_task *t) {
    if (!t) return;
    free(t->id);
    free(t->prompt);
    free(t->rule);
    free(t->line);
    cJSON_Delete(t->item);
    memset(t, 0, sizeof *t);
}

int ab_tasks_load(const char *path, ab_tasks *out, char *msg, size_t cap) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f) return bad(msg, cap, "cannot open %s", path);
    ab_tasks t = {0};
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int line_no = 0, rc = 0;
    while (!rc && (len = getline(&line, &lcap, f)) >= 0) {
        line_no++;
        while (len > 0 && is_blank(line[len - 1])) len--;
        size_t skip = 0;
        while (skip < (size_t)len && is_blank(line[skip])) skip++;
        if (skip == (size_t)len) continue;
        if (memchr(line, '\0', (size_t)len)) {
            rc = bad(msg, cap, "%s:%d: a NUL byte in the line", path, line_no);
            break;
        }
        ab_task *grown = realloc(t.items, (size_t)(t.n + 1) * sizeof *grown);
        if (!grown) {
            rc = bad(msg, cap, "out of memory reading %s", path);
            break;
        }
        t.items = grown;
        char why[256];
        if (ab_task_parse(line + skip, (size_t)len - skip, &t.items[t.n], why, sizeof why)) {
            rc = bad(msg, cap, "%s:%d: %s", path, line_no, why);
            break;
        }
        t.items[t.n].line_no = line_no;
        for (int i = 0; i < t.n && !rc; i++)
            if (!strcmp(t.items[i].id, t.items[t.n].id))
                rc = bad(msg, cap, "%s:%d: id \"%.64s\" is already used on line %d", path,
                         line_no, t.items[i].id, t.items[i].line_no);
        t.n++;
    }
    free(line);
    if (!rc && ferror(f)) rc = bad(msg, cap, "cannot read %s", path);
    fclose(f);
    if (!rc && t.n == 0) rc = bad(msg, cap, "%s has no task items", path);
    if (rc) {
        ab_tasks_free(&t);
        return 1;
    }
    *out = t;
    return 0;
}

void ab_tasks_free(ab_tasks *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) ab_task_free(&t->items[i]);
    free(t->items);
    memset(t, 0, sizeof *t);
}

int ab_task_check(const ab_task *t, const char *text, size_t len) {
    const rule_def *r = rule_find(t->rule);
    if (!r || !r->check(t, text, len)) return 0;
    const char *lists[] = {"contains", "icontains"};
    for (int i = 0; i < 2; i++) {
        const cJSON *s;
        cJSON_ArrayForEach(s, field(t, lists[i])) if (!find(text, len, s->valuestring, i)) return 0;
    }
    return 1;
}
