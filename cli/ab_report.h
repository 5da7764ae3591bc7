/* specd ab's figures per prompt, and the self-contained HTML page (--report) a person reads: the
 * run's setup, the identity verdict per prompt with the first divergence in context, and inline
 * SVG charts of speedup and TPF per prompt and of acceptance by draft position. */
#ifndef SPECD_CLI_AB_REPORT_H
#define SPECD_CLI_AB_REPORT_H

#include "cli/ab_quality.h"
#include "cli/cli_common.h"
#include "specd/spec_runtime.h"

typedef struct ab_row {
    char *prompt;
    int identical;
    int64_t first_diff; /* -1 when identical */
    int64_t n_plain, n_spec;
    specd_seq_stats seq;
    double acceptance, mean_accepted, tpf, tps_plain, tps_spec;
    double p_cache; /* WeDLM eq. 4: tokens emitted / token rows the target ran (ab_p_cache) */
    uint64_t ns_plain, ns_spec;
    uint64_t fwd_ns_spec; /* of ns_spec, the target's forwards (the policy's own: seq.propose_ns) */
    int64_t tok_plain, tok_spec, steps_spec;
    int64_t grammar_rows;   /* rows the grammar masked on the speculative side (--grammar) */
    uint64_t grammar_ns;    /* ... and the time that took */
    /* Output text (owned, NUL-terminated, NULL when not kept): the plain output's opening, and
     * at a divergence the text before it and each side's next tokens. */
    char *output_head;
    char *context_before, *context_plain, *context_spec;
    /* Quality (cli/ab_quality.h), computed after the timed runs: the plain output's figures are
     * the reference for the speculative one's. scored: NLL was computed (not --no-quality). */
    int scored;
    ab_quality q_plain, q_spec;
    ab_agreement agree;
    const char *task_id; /* borrowed from the task list; NULL without --tasks */
    int pass_plain, pass_spec;
} ab_row;

/* p_cache (WeDLM paper 003, eq. 4) = N_gen / N_fwd: the tokens emitted over the token rows the
 * target ran in decoding steps (the steps' widths, prefill not counted), so 1 for plain decoding
 * and the share of a wide step's rows that became output otherwise; 0 before any step. */
double ab_p_cache(int64_t n_emitted, int64_t n_tokens_run);

/* ids[0..n) decoded with the tokenizer's flags as a new NUL-terminated string (the caller frees
 * it), its length in *len when len is not NULL; NULL with err set when the ids do not decode or
 * memory runs out. */
char *ab_decode_text(const specd_tokenizer *tok, const int32_t *ids, int64_t n, uint32_t flags,
                     size_t *len, specd_error *err);

/* Fills row's text fields from the two runs' tokens (rendered with special tokens shown). Returns
 * non-zero when out of memory. */
int ab_row_keep_text(ab_row *row, const specd_tokenizer *tok, const int32_t *plain,
                     int64_t n_plain, const int32_t *spec, int64_t n_spec);
void ab_row_free_text(ab_row *row);

typedef struct ab_setup {
    const cli_options *options;
    const char *model_path;
    const char *prompts_path;
    int lossless; /* the rule promises token-identical output */
    int tasks;    /* the prompts were rule-checked task items (--tasks) */
} ab_setup;

/* Writes the page to path. Returns non-zero after printing an error when it cannot be written. */
int ab_report_write(const char *path, const ab_setup *setup, const ab_row *rows, int n,
                    const ab_row *overall);

#endif
