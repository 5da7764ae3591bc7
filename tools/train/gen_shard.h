/* A data shard for MRP training (the Python trainers here read it, check_data.py checks it):
 * tokens.i32 (every sequence's ids, concatenated, int32) and hidden.f16 (one row of n_embd halves
 * per token: the target's final hidden state after the output norm) appended one finished sequence
 * at a time, then seqs.json (n_embd, n_tokens, model_sha256, the generation recipe, and per
 * sequence its offset, n_prompt, n_tokens, prompt_id, job, seed, temp, stop), then DONE (written
 * last, so a reader never sees a half-written shard as complete). */
#ifndef SPECD_TOOLS_GEN_SHARD_H
#define SPECD_TOOLS_GEN_SHARD_H

#include <stdint.h>
#include <stdio.h>

typedef struct cJSON cJSON;

typedef struct gen_shard {
    char dir[4096];
    FILE *tokens, *hidden;
    int32_t n_embd;
    int64_t n_tokens, n_seqs;
    cJSON *root, *seqs; /* seqs.json under construction */
} gen_shard;

/* One finished sequence: n_tokens ids and n_tokens x n_embd halves (prompt rows included). */
typedef struct gen_seq_record {
    const int32_t *tokens;
    const uint16_t *hidden;
    int32_t n_tokens, n_prompt;
    int64_t job, prompt_id;
    uint64_t seed;
    float temp;
    const char *stop; /* "eog" or "max" */
    const char *text; /* the continuation's text, or NULL to leave it out */
} gen_seq_record;

/* Creates dir (must not hold a finished shard) and opens the data files. 0 on success, else prints
 * why. */
int gen_shard_open(gen_shard *s, const char *dir, int32_t n_embd, const char *model_sha256);
int gen_shard_append(gen_shard *s, const gen_seq_record *r);
/* Adds recipe (taken over) to seqs.json, writes it and DONE. */
int gen_shard_finish(gen_shard *s, cJSON *recipe);
void gen_shard_close(gen_shard *s);

#endif
