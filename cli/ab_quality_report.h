/* specd ab's quality block: a prompt's figures computed after its two timed runs, the text table
 * and the JSON object ("quality" per prompt and overall). */
#ifndef SPECD_CLI_AB_QUALITY_REPORT_H
#define SPECD_CLI_AB_QUALITY_REPORT_H

#include "cli/ab_report.h"
#include "cli/ab_tasks.h"

#include <stdio.h>

/* What each figure means, printed by --help and written into the JSON ("quality_definitions"). */
extern const char AB_QUALITY_HELP[];

/* Fills row's quality fields from the two outputs: repetition and agreement always, NLL under
 * e's model when score, the task's rule when task is not NULL. Prints an error and returns
 * non-zero on failure. */
int ab_quality_row(const cli_engine *e, const int32_t *prompt, int64_t n_prompt,
                   const int32_t *plain, int64_t n_plain, const int32_t *spec, int64_t n_spec,
                   int score, const ab_task *task, ab_row *row);

/* Adds a row's quality into the overall row. */
void ab_quality_pool(ab_row *all, const ab_row *row);

/* agreement: the run is greedy (T = 0), where agreement with plain decoding is meaningful;
 * tasks: the prompts were task items. */
void ab_quality_print(FILE *out, const ab_row *rows, int n, const ab_row *all, int agreement,
                      int tasks, const char *policy);
/* Writes ", \"quality\": {...}" for one row (per prompt or overall). */
void ab_quality_json(FILE *f, const ab_row *r, int agreement, int tasks);
/* Writes ", \"quality_definitions\": {...}". */
void ab_quality_json_definitions(FILE *f);

#endif
