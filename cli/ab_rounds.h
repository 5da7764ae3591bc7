/* Side-by-side timing that load drift cannot bias: several sides (plain decoding and one or more
 * policies) generate from their prompts over R rounds in one process, the order rotating round by
 * round (plain first, then the policy first, ...), so a slow spell of the machine falls on every
 * side alike. Each side keeps the run whose decode time is its median (the lower middle for an
 * even R): its tokens, step counts and time are one real run's, so its speedup and its tokens per
 * forward always come from the same run. Used by `specd ab --repeat` and `specd bench`. */
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

/* Runs every side rounds times (1 .. 1000). On failure prints an error, frees what it made and
 * returns non-zero with no side's result set. */
int ab_run_rounds(const cli_engine *e, const cli_options *o, ab_side *sides, int n_sides,
                  int rounds);

#endif
