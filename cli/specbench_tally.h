/* What `specd bench spec-bench` adds up: per side (plain decoding, each policy) and per group, the
 * tokens, target forwards and decode time of the median runs, and how many turns came out
 * token-identical to plain decoding; then Spec-Bench's leaderboard as a table, JSON and a page. */
#ifndef SPECD_CLI_SPECBENCH_TALLY_H
#define SPECD_CLI_SPECBENCH_TALLY_H

#include "cli/cli_common.h"
#include "cli/specbench.h"
#include "specd/spec_runtime.h"

#include <stdint.h>
#include <stdio.h>

enum { SB_OVERALL = SPECBENCH_GROUPS, SB_COLUMNS = SPECBENCH_GROUPS + 1 };

typedef struct sb_tally {
    int64_t tokens;      /* emitted after prefill */
    int64_t forwards;    /* target forwards after prefill (plain: one per token) */
    uint64_t ns;         /* decode time */
    int turns, identical; /* turns counted; of them, token-identical to plain decoding */
    int lossy;           /* a step was flagged lossy */
    specd_seq_stats seq; /* summed speculative counters */
} sb_tally;

/* One turn's figures for one side, for the JSON's per-question list. */
typedef struct sb_turn {
    int64_t prompt_tokens; /* the conversation so far, through the chat template */
    int64_t tokens, forwards;
    uint64_t ns;
    int identical;
} sb_turn;

typedef struct sb_policy {
    const char *name; /* borrowed */
    const char *opts; /* borrowed; NULL = defaults */
} sb_policy;

typedef struct sb_results {
    const char *path;            /* the question file */
    const cli_options *options;
    int repeat;
    int lossless;                /* the rule promises token-identical output */
    int n_policies;
    const sb_policy *policies;
    int questions[SPECBENCH_GROUPS];
    sb_tally plain[SB_COLUMNS];
    sb_tally *spec;              /* n_policies x SB_COLUMNS */
    const specbench_set *set;
    sb_turn *turns;              /* per question, SPECBENCH_MAX_TURNS x (1 + n_policies) */
} sb_results;

sb_turn *sb_turn_at(const sb_results *r, int question, int turn, int side);
/* A policy's speedup over plain decoding in a column (tokens per second of the decode phase),
 * its tokens per target forward, and the geometric mean of its group speedups (0 when a column
 * has no tokens). */
double sb_speedup(const sb_results *r, int policy, int column);
double sb_tpf(const sb_tally *t);
double sb_geomean(const sb_results *r, int policy);

/* The leaderboard on out (speedup per group, overall, geometric mean, mean accepted tokens per
 * forward, identity), then the tokens-per-forward table. */
void sb_print(FILE *out, const sb_results *r);
/* Returns non-zero after printing an error when the file cannot be written. */
int sb_write_json(const char *path, const sb_results *r);
int sb_write_report(const char *path, const sb_results *r);

#endif
