/* Side-by-side timing that load drift cannot bias: several sides (plain decoding and one or more
 * policies) generate from their prompts over R rounds in one process, the order rotating round by
 * round (plain first, then the policy first, ...), so a slow spell of the machine falls on every
 * side alike. Each side keeps the run whose decode time is its median (the lower middle for an
 * even R): its tokens, step counts and time are one real run's, so its speedup and its tokens per
 * forward always come from the same run. Used by `specd ab --repeat` and `specd bench`.
 *
 * Each round has a spec of its own (round 0 the engine's), kept from prompt to prompt: what a
 * policy learns across requests (suffix decoding's cache of finished requests, token recycling's
 * table, the guard's priors) then comes only from earlier prompts of the same round, as on a
 * server that had seen them, never from the same prompt's earlier rounds, whose answer it would
 * simply replay. */
#ifndef SPECD_CLI_AB_ROUNDS_H
#define SPECD_CLI_AB_ROUNDS_H

#include "cli/cli_run.h"

typedef struct ab_side {
    const char *policy;      /* "none" = plain decoding (borrowed) */
    const char *policy_opts; /* borrowed; NULL = defaults */
    const int32_t *ids;      /* the side's prompt (borrowed) */
    int64_t n_ids;
    cli_result result;       /* out: the median run (free with cli_result_free) */
    int stable;              /* out: 1 when every round emitted the same tokens */
} ab_side;

typedef struct ab_rounds {
    int n;              /* rounds, 1 .. 1000 */
    specd_spec **specs; /* owned: rounds 1 .. n-1 (round 0 runs on the engine's spec) */
} ab_rounds;

/* Makes the rounds' specs over e. Prints an error and returns non-zero on failure. */
int ab_rounds_open(ab_rounds *r, const cli_engine *e, const cli_options *o, int rounds);
void ab_rounds_close(ab_rounds *r);

/* Runs every side once per round. On failure prints an error, frees what it made and returns
 * non-zero with no side's result set. */
int ab_run_rounds(const ab_rounds *rr, const cli_engine *e, const cli_options *o, ab_side *sides,
                  int n_sides);

#endif
