/* Rule-checked task items for specd ab --tasks (bench/tasks/tasks.jsonl): a prompt and a rule the
 * output must pass, checked here in C so a lossy policy's pass rate can be set beside plain
 * decoding's. One JSON object per line (parsed with cJSON):
 *
 *   {"id": "count-1-10", "prompt": "Count from 1 to 10.", "rule": "count", "from": 1, "to": 10}
 *
 * Rules and their fields (every item may add "contains" / "icontains": arrays of strings that
 * must all appear, exactly / ignoring ASCII case, and "note": free text):
 *   count      from, to (integers, |to - from| <= 1000): the integers written in the output
 *              (maximal digit runs, in order) include from, from +- 1, ..., to consecutively
 *   copy       items (non-empty strings): each appears in the output, in order, after the last
 *   number     answer (integer): written in the output as a whole number (not part of a longer
 *              number or decimal; negative only with its minus sign)
 *   caps       the output has a letter and no lowercase ASCII letter
 *   lowercase  the output has a letter and no uppercase ASCII letter
 *   bullets    count: exactly count lines start (after blanks) with "- ", "* " or "\u2022 "
 *   lines      count: exactly count non-blank lines
 *   json_key   key: a JSON object in the output (parsed from a '{' outside any object parsed
 *              before it) has that key at its top level
 *   max_words  n: 1 to n words (runs of non-blanks)
 *   starts_with text: the output, after leading blanks, starts with text
 *   contains   nothing more than contains / icontains (of which it needs at least one)
 */
#ifndef SPECD_CLI_AB_TASKS_H
#define SPECD_CLI_AB_TASKS_H

#include <stddef.h>

typedef struct ab_task {
    char *id;     /* owned */
    char *prompt; /* owned */
    char *rule;   /* owned */
    char *line;   /* owned: the item's JSON text as read (copied into a selection) */
    void *item;   /* owned: the parsed cJSON object the checker reads */
    int line_no;  /* 1-based line in its file; 0 when parsed from a string */
} ab_task;

typedef struct ab_tasks {
    ab_task *items;
    int n;
} ab_tasks;

/* Parses and validates one item. On failure writes a message naming the field to msg and returns
 * non-zero, leaving *out zeroed. */
int ab_task_parse(const char *json, size_t len, ab_task *out, char *msg, size_t cap);
void ab_task_free(ab_task *t);

/* Loads a JSONL file: blank lines are skipped; any malformed item, a duplicate id or a file with
 * no items fails with a message naming the file and line. */
int ab_tasks_load(const char *path, ab_tasks *out, char *msg, size_t cap);
void ab_tasks_free(ab_tasks *t);

/* 1 when text (the output decoded without special tokens) passes t's rule, else 0. */
int ab_task_check(const ab_task *t, const char *text, size_t len);

#endif
