/* specd ab --calibrate R: runs each task item R times through plain decoding (seeds S .. S+R-1 at
 * the given sampling) and keeps the items the base model passes at least a given fraction of the
 * time, so that a policy's pass rate on the kept suite measures what the policy loses, not what
 * the model never could. */
#ifndef SPECD_CLI_AB_CALIBRATE_H
#define SPECD_CLI_AB_CALIBRATE_H

#include "cli/ab_tasks.h"
#include "cli/cli_common.h"

typedef struct ab_calibration {
    int runs;               /* R */
    double keep_rate;       /* keep items with passes / R >= keep_rate */
    const char *select_out; /* the kept items' lines, JSONL; NULL = not written */
    const char *json_out;   /* per-item pass rates; NULL = not written */
    const char *tasks_path;
    const char *command;    /* the command line, recorded in the JSON */
} ab_calibration;

/* Prints the per-item table to stdout. Returns non-zero after printing an error. */
int ab_calibrate(const cli_engine *e, const cli_options *o, const ab_tasks *tasks,
                 const ab_calibration *c);

#endif
