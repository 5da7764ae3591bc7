/* fuzz_ab_tasks: one line of a --tasks file (cli/ab_tasks.c) on arbitrary bytes. The input up to
 * its first newline is the item; the rest is an output its rule is checked against (as the
 * decoded text of a generation would be, not NUL-terminated). A parse either refuses with a
 * message or gives an item with a non-empty id, prompt and known rule; checking never reads
 * outside the text (ASan) and answers 0 or 1. The same item bytes also go to the Spec-Bench
 * question parser of `specd bench spec-bench` (cli/specbench.c), one parser of user-given JSONL
 * lines beside the other: it refuses with a message or gives a question of a known group with
 * 1..SPECBENCH_MAX_TURNS non-empty turns. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/ab_tasks.h"
#include "cli/specbench.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    const char *nl = memchr(s, '\n', size);
    size_t item_len = nl ? (size_t)(nl - s) : size;
    /* exact-size copies, so a read past either end is caught */
    char *item = malloc(item_len ? item_len : 1);
    size_t text_len = nl ? size - item_len - 1 : 0;
    char *text = malloc(text_len ? text_len : 1);
    if (!item || !text) abort();
    memcpy(item, s, item_len);
    if (text_len) memcpy(text, nl + 1, text_len);
    ab_task t;
    char msg[256];
    msg[0] = '\0';
    if (ab_task_parse(item, item_len, &t, msg, sizeof msg)) {
        if (!msg[0] || t.item || t.id) abort();
    } else {
        if (!t.id[0] || !t.prompt[0] || !t.rule[0] || !t.item) abort();
        int a = ab_task_check(&t, text, text_len);
        int b = ab_task_check(&t, item, item_len);
        if ((a != 0 && a != 1) || (b != 0 && b != 1)) abort();
        ab_task_free(&t);
    }
    specbench_question q;
    msg[0] = '\0';
    if (specbench_parse(item, item_len, &q, msg, sizeof msg)) {
        if (!msg[0] || q.category || q.n_turns) abort();
    } else {
        if (!specbench_group_name(q.group) || q.n_turns < 1 || q.n_turns > SPECBENCH_MAX_TURNS ||
            specbench_category_group(q.category) != q.group)
            abort();
        for (int i = 0; i < q.n_turns; i++)
            if (!q.turns[i] || !q.turns[i][0]) abort();
        specbench_question_free(&q);
    }
    free(item);
    free(text);
    return 0;
}
