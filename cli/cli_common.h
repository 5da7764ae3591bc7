/* Pieces shared by the model-running subcommands: the default model, flag parsing for sampling
 * and policies, and prompt encoding. */
#ifndef SPECD_CLI_COMMON_H
#define SPECD_CLI_COMMON_H

#include "specd/grammar.h"
#include "specd/runtime.h"
#include "specd/spec.h"
#include "specd/tokenizer.h"

#include <stdio.h>

typedef struct cli_options {
    const char *model;        /* NULL = the default model */
    const char *policy;       /* "none" = plain decoding */
    const char *policy_opts;
    int32_t max_draft;
    int32_t n_predict;
    int32_t n_threads;
    int32_t n_ctx;            /* KV rows of the run's contexts */
    int chat;                 /* wrap prompts in the model's chat template */
    specd_sampling_params sampling;
    uint64_t seed;
    specd_accept_rule rule;
    int rule_given;
    specd_penalties_params penalties; /* --presence-penalty, --frequency-penalty, --repeat-penalty */
    /* --grammar FILE (GBNF) or --json-schema FILE|object: the output's grammar (NULL = none) */
    const char *grammar;
    int grammar_schema;
    int grammar_drafts; /* --grammar-drafts on|off: the grammar's forced tokens as drafts */
    float tau;
    int adaptive;
    const char *verifier;     /* specd-verifier endpoint, or NULL = verify in-process */
    int32_t verifier_timeout_ms;
    /* --device: every context of the run (the target's and the policies' own) lives there;
     * without the flag SPECD_DEVICE's choice, -1 when that variable is unparsable */
    int32_t device;
    int32_t device_index;
} cli_options;

void cli_options_init(cli_options *o);

/* Consumes argv[*i] (and its value) when it is a shared flag. Returns 1 when consumed, 0 when not
 * a shared flag, -1 after printing an error for a bad value. */
int cli_parse_shared(cli_options *o, int argc, char **argv, int *i);
/* --device NAME (cpu, cuda, cuda:N) into *device and *index; NULL name = SPECD_DEVICE's choice
 * (unset: cpu). Prints "<prog>: ..." naming the accepted values and returns non-zero for an
 * unknown name or an unparsable SPECD_DEVICE. */
int cli_parse_device(const char *prog, const char *name, int32_t *device, int32_t *index);
/* --numerics NAME (fast, llama): sets SPECD_NUMERICS for every context the process makes. 0, or 1
 * after printing an error naming prog. */
int cli_parse_numerics(const char *prog, const char *name);
/* The numerics mode the process's contexts get ("fast", "llama"; "?" when SPECD_NUMERICS is bad). */
const char *cli_numerics_label(void);
/* The device as --device spells it ("cpu", "cuda:0"). */
const char *cli_device_label(int32_t device, int32_t index, char *buf, size_t cap);
/* value as a whole number in [lo, hi] into *out; otherwise prints "<prog>: <flag> expects a
 * count in [lo, hi], got '<value>'" and returns non-zero. */
int cli_parse_count(const char *prog, const char *flag, const char *value, long lo, long hi,
                    int *out);
/* Lines of help for the shared flags. */
void cli_print_shared_help(FILE *out);

/* Checks, before a long run, that path can be written (its directory exists and lets us create
 * it, or the file is writable), without changing it: a file made by the check is removed again.
 * Prints "<prog>: cannot write PATH: reason" and returns non-zero when it cannot. */
int cli_check_writable(const char *prog, const char *flag, const char *path);

/* The default model's path: $SPECD_MODEL_DIR or ~/.cache/specd/models, then the file name. */
const char *cli_default_model(char *buf, size_t cap);

/* A loaded model with its tokenizer and a context sized for speculation. */
typedef struct cli_engine {
    specd_model *model;
    specd_tokenizer *tok;
    specd_context *ctx;
    /* one spec for every run: its adaptive guard carries what it learned from run to run */
    specd_spec *spec;
    int32_t n_ctx; /* KV rows of the context: prompt + generation + one step's drafts */
    uint64_t tokenizer_hash; /* computed from the tokenizer: what the daemons must match */
    uint64_t target_fingerprint; /* what artifacts name as their target (policy/artifacts.h) */
    int32_t device, device_index; /* where ctx and the policies' contexts live */
    specd_grammar *grammar; /* --grammar / --json-schema compiled once: runs share its masks */
} cli_engine;

/* Prints a clear error to stderr and returns non-zero on failure: 2 for a usage error (an
 * unparsable SPECD_DEVICE, -t past the cores), 1 otherwise (a device the library cannot run,
 * a model that cannot be read). */
int cli_engine_open(cli_engine *e, const cli_options *o);
/* Another spec over e's model and device, as cli_engine_open makes e->spec (caller owns: release
 * with specd_spec_destroy): its policies' shared state (caches, tables, draft models) and the
 * guard's priors start empty. Prints an error and returns non-zero on failure. */
/* The policy options to use: opts plus each artifact trained over e's model that the policy
 * takes and opts leaves out (specd_policy_default_options), in buf. NULL, with the reason on
 * stderr, when the policy needs an artifact and none matches. */
const char *cli_policy_options(const cli_engine *e, const char *policy, const char *opts,
                               char *buf, size_t cap);

int cli_spec_create(const cli_engine *e, const cli_options *o, specd_spec **out);
void cli_engine_close(cli_engine *e);

/* Encodes text (wrapped in the chat template when chat) into a new array (free with free()). */
int cli_encode_prompt(const cli_engine *e, const char *text, int chat, int32_t **ids,
                      int64_t *n);

/* Sequence parameters for policy (the options' sampling, seed, rule...). */
specd_seq_params cli_seq_params(const cli_options *o, const cli_engine *e, const char *policy,
                                const char *policy_opts, int32_t *stop_storage);

#endif
