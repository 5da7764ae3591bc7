#include "cli/specbench.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const group_names[SPECBENCH_GROUPS] = {"MT", "Trans", "Sum", "QA", "Math",
                                                          "RAG"};
static const char *const group_titles[SPECBENCH_GROUPS] = {
    "multi-turn conversation", "translation", "summarization", "question answering",
    "mathematical reasoning", "retrieval-augmented generation"};

/* Spec-Bench's categories: MT-bench's eight share group 0 */
static const struct {
    const char *category;
    int group;
} categories[] = {
    {"writing", 0},     {"roleplay", 0},      {"reasoning", 0},      {"math", 0},
    {"coding", 0},      {"extraction", 0},    {"stem", 0},           {"humanities", 0},
    {"translation", 1}, {"summarization", 2}, {"qa", 3},             {"math_reasoning", 4},
    {"rag", 5},
};

const char *specbench_group_name(int group) {
    return group >= 0 && group < SPECBENCH_GROUPS ? group_names[group] : NULL;
}

const char *specbench_group_title(int group) {
    return group >= 0 && group < SPECBENCH_GROUPS ? group_titles[group] : NULL;
}

int specbench_category_group(const char *category) {
    for (size_t i = 0; i < sizeof categories / sizeof categories[0]; i++)
        if (!strcmp(categories[i].category, category)) return categories[i].group;
    return -1;
}

static int fail(char *msg, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return 1;
}

void specbench_question_free(specbench_question *q) {
    free(q->category);
    for (int i = 0; i < q->n_turns; i++) free(q->turns[i]);
    memset(q, 0, sizeof *q);
}

/* Checks the parsed object and copies its fields into q (which the caller frees on failure). */
static int take_fields(const cJSON *root, specbench_question *q, char *msg, size_t cap) {
    if (!cJSON_IsObject(root)) return fail(msg, cap, "not a JSON object");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "question_id");
    const cJSON *cat = cJSON_GetObjectItemCaseSensitive(root, "category");
    const cJSON *turns = cJSON_GetObjectItemCaseSensitive(root, "turns");
    /* a double holds integers exactly up to 2^53: past that an id could collide with another */
    if (!cJSON_IsNumber(id) || !isfinite(id->valuedouble) || id->valuedouble != floor(id->valuedouble) ||
        fabs(id->valuedouble) > 9007199254740992.0)
        return fail(msg, cap, "\"question_id\" must be an integer");
    if (!cJSON_IsString(cat) || !cat->valuestring[0])
        return fail(msg, cap, "\"category\" must be a non-empty string");
    int group = specbench_category_group(cat->valuestring);
    if (group < 0)
        return fail(msg, cap, "unknown category \"%.64s\" (Spec-Bench's are writing, roleplay, "
                              "reasoning, math, coding, extraction, stem, humanities, translation, "
                              "summarization, qa, math_reasoning, rag)",
                    cat->valuestring);
    if (!cJSON_IsArray(turns)) return fail(msg, cap, "\"turns\" must be an array of strings");
    int n = cJSON_GetArraySize(turns);
    if (n < 1 || n > SPECBENCH_MAX_TURNS)
        return fail(msg, cap, "\"turns\" must hold 1 to %d strings, not %d", SPECBENCH_MAX_TURNS, n);
    q->id = (long long)id->valuedouble;
    q->group = group;
    if (!(q->category = strdup(cat->valuestring))) return fail(msg, cap, "out of memory");
    for (int i = 0; i < n; i++) {
        const cJSON *t = cJSON_GetArrayItem(turns, i);
        if (!cJSON_IsString(t) || !t->valuestring[0])
            return fail(msg, cap, "\"turns\"[%d] must be a non-empty string", i);
        if (!(q->turns[i] = strdup(t->valuestring))) return fail(msg, cap, "out of memory");
        q->n_turns = i + 1;
    }
    return 0;
}

int specbench_parse(const char *json, size_t len, specbench_question *out, char *msg, size_t cap) {
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return fail(msg, cap, "not valid JSON");
    specbench_question q = {0};
    int rc = take_fields(root, &q, msg, cap);
    cJSON_Delete(root);
    if (rc) {
        specbench_question_free(&q);
        return rc;
    }
    *out = q;
    return 0;
}

void specbench_free(specbench_set *s) {
    for (int i = 0; i < s->n; i++) specbench_question_free(&s->items[i]);
    free(s->items);
    memset(s, 0, sizeof *s);
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

int specbench_load(const char *path, specbench_set *out, char *msg, size_t cap) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f) return fail(msg, cap, "cannot open %s: %s", path, strerror(errno));
    specbench_set s = {0};
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    int line_no = 0, rc = 0;
    while (!rc && (len = getline(&line, &line_cap, f)) >= 0) {
        line_no++;
        if (blank(line, (size_t)len)) continue;
        specbench_question q;
        char why[384];
        if (specbench_parse(line, (size_t)len, &q, why, sizeof why)) {
            rc = fail(msg, cap, "%s:%d: %s", path, line_no, why);
            break;
        }
        q.line_no = line_no;
        for (int i = 0; i < s.n && !rc; i++)
            if (s.items[i].id == q.id)
                rc = fail(msg, cap, "%s:%d: question_id %lld already on line %d", path, line_no,
                          q.id, s.items[i].line_no);
        specbench_question *grown = rc ? NULL : realloc(s.items, (size_t)(s.n + 1) * sizeof *grown);
        if (!rc && !grown) rc = fail(msg, cap, "out of memory reading %s", path);
        if (rc) {
            specbench_question_free(&q);
            break;
        }
        s.items = grown;
        s.items[s.n++] = q;
    }
    if (!rc && ferror(f)) rc = fail(msg, cap, "cannot read %s", path);
    free(line);
    fclose(f);
    if (!rc && s.n == 0) rc = fail(msg, cap, "%s has no questions", path);
    if (rc) {
        specbench_free(&s);
        return rc;
    }
    *out = s;
    return 0;
}

void specbench_select(specbench_set *s, int limit, unsigned group_mask) {
    int kept[SPECBENCH_GROUPS] = {0}, n = 0;
    for (int i = 0; i < s->n; i++) {
        specbench_question *q = &s->items[i];
        if ((group_mask >> q->group & 1u) && (limit <= 0 || kept[q->group] < limit)) {
            kept[q->group]++;
            s->items[n++] = *q;
        } else {
            specbench_question_free(q);
        }
    }
    s->n = n;
}
