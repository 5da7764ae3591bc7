/* One generation through the spec session on the CPU runtime, with its figures. */
#ifndef SPECD_CLI_RUN_H
#define SPECD_CLI_RUN_H

#include "cli/cli_common.h"
#include "specd/grammar_processor.h"
#include "specd/spec_runtime.h"

typedef struct cli_result {
    int32_t *tokens;   /* emitted ids (free with free()) */
    int64_t n_tokens;
    specd_seq_stats seq;
    specd_run_stats run;
    specd_grammar_processor_stats grammar; /* zero without --grammar / --json-schema */
} cli_result;

/* Runs prompt ids under policy; streams text to stdout when stream is set. With the engine's
 * grammar, the output follows it (plain decoding included) and the policy's side also gets the
 * grammar's forced tokens as drafts unless --grammar-drafts off. Prints an error and returns
 * non-zero on failure. */
int cli_run(const cli_engine *e, const cli_options *o, const char *policy, const char *policy_opts,
            const int32_t *ids, int64_t n_ids, int stream, cli_result *out);
void cli_result_free(cli_result *r);

/* Derived figures. */
double cli_acceptance_rate(const specd_seq_stats *s);   /* accepted / proposed */
double cli_mean_accepted(const specd_seq_stats *s);     /* accepted per drafting step */
double cli_tpf(const cli_result *r);                    /* tokens per target forward */
double cli_decode_tps(const cli_result *r);             /* tokens per second after prefill */

#endif
