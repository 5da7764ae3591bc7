/* Spec-Bench's question file (its data/spec_bench/question.jsonl): one JSON object a line,
 *
 *   {"question_id": 81, "category": "writing", "turns": ["first user turn", "second"]}
 *
 * read from a path the user gives (the project ships no copy of the data). Categories map to the
 * six groups Spec-Bench reports: MT-bench's eight (writing, roleplay, reasoning, math, coding,
 * extraction, stem, humanities) are one group, multi-turn conversation; the other five are their
 * own group. Parsed with cJSON; every field is checked, and an error names the file and line. */
#ifndef SPECD_CLI_SPECBENCH_H
#define SPECD_CLI_SPECBENCH_H

#include <stddef.h>

enum { SPECBENCH_GROUPS = 6, SPECBENCH_MAX_TURNS = 8 };

typedef struct specbench_question {
    long long id;      /* question_id */
    int group;         /* 0 .. SPECBENCH_GROUPS-1 (specbench_group_name) */
    char *category;    /* owned: as written in the file */
    int n_turns;       /* 1 .. SPECBENCH_MAX_TURNS */
    char *turns[SPECBENCH_MAX_TURNS]; /* owned: the user turns, in order, non-empty */
    int line_no;       /* 1-based line in its file; 0 when parsed from a string */
} specbench_question;

typedef struct specbench_set {
    specbench_question *items;
    int n;
} specbench_set;

/* The group's short column name ("MT", "Trans", "Sum", "QA", "Math", "RAG") and its long name
 * ("multi-turn conversation", ...); NULL for an index out of range. */
const char *specbench_group_name(int group);
const char *specbench_group_title(int group);
/* The group of a category, or -1 when Spec-Bench has no such category. */
int specbench_category_group(const char *category);

/* Parses one line (len bytes, need not be NUL-terminated). On failure writes a message naming the
 * field to msg and returns non-zero, leaving *out zeroed. */
int specbench_parse(const char *json, size_t len, specbench_question *out, char *msg, size_t cap);
void specbench_question_free(specbench_question *q);

/* Loads a file: blank lines are skipped; a malformed line, an unknown category, a duplicate
 * question_id, a missing file or a file without questions fails with a message naming the file
 * (and line). */
int specbench_load(const char *path, specbench_set *out, char *msg, size_t cap);
void specbench_free(specbench_set *s);

/* Keeps, in file order, at most limit questions of each group (limit <= 0 keeps all) and only the
 * groups whose bit is set in group_mask. Never fails; frees what it drops. */
void specbench_select(specbench_set *s, int limit, unsigned group_mask);

#endif
