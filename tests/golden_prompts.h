/* Prompt token ids of llama.cpp's greedy goldens (tests/data/runtime_greedy_golden.txt), for tests
 * and benchmarks that run the real model without going through the tokenizer. */
#ifndef SPECD_TESTS_GOLDEN_PROMPTS_H
#define SPECD_TESTS_GOLDEN_PROMPTS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads the first n prompts of at most max_len ids each (rows of max_len in ids) from the golden
 * file under source_dir. Returns 0 when n prompts were read. */
static inline int specd_golden_prompts_read(const char *source_dir, int n, int max_len,
                                            int32_t *ids, int64_t *lens) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/runtime_greedy_golden.txt",
             source_dir ? source_dir : ".");
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    static char line[65536];
    int got = 0;
    while (got < n && fgets(line, sizeof line, f)) {
        if (strncmp(line, "prompt ", 7)) continue;
        char *p = line + 7, *end;
        long count = strtol(p, &end, 10);
        if (count < 1 || count > max_len) break;
        for (long i = 0; i < count; i++)
            ids[(size_t)got * (size_t)max_len + (size_t)i] = (int32_t)strtol(p = end, &end, 10);
        lens[got++] = count;
    }
    fclose(f);
    return got == n ? 0 : -1;
}

#endif
