#include "cli/ab_calibrate.h"
#include "cli/ab_quality_report.h"
#include "cli/cli_run.h"
#include "common/json_out.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* passes / runs >= keep, without 0.3 * 10 landing a rounding step above 3 */
static int is_kept(int passes, int runs, double keep) {
    return passes >= (int)ceil(keep * runs - 1e-9);
}

static int write_selection(const char *path, const ab_tasks *t, const int *passed, int runs,
                           double keep) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "specd ab: cannot write %s\n", path);
        return 1;
    }
    for (int i = 0; i < t->n; i++)
        if (is_kept(passed[i], runs, keep)) fprintf(f, "%s\n", t->items[i].line);
    if (fclose(f) != 0) {
        fprintf(stderr, "specd ab: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

static int write_json(const cli_options *o, const ab_tasks *t, const int *passed,
                      const ab_calibration *c) {
    FILE *f = fopen(c->json_out, "w");
    if (!f) {
        fprintf(stderr, "specd ab: cannot write %s\n", c->json_out);
        return 1;
    }
    int kept = 0;
    for (int i = 0; i < t->n; i++) kept += is_kept(passed[i], c->runs, c->keep_rate);
    fputs("{\"command\": ", f);
    json_string(f, c->command, strlen(c->command));
    fputs(", \"tasks\": ", f);
    json_string(f, c->tasks_path, strlen(c->tasks_path));
    fprintf(f, ", \"runs\": %d, \"seeds_from\": %llu, \"n\": %d, \"temperature\": ", c->runs,
            (unsigned long long)o->seed, o->n_predict);
    json_number(f, o->sampling.temperature);
    fprintf(f, ", \"top_k\": %d, \"top_p\": ", o->sampling.top_k);
    json_number(f, o->sampling.top_p);
    fputs(", \"min_p\": ", f);
    json_number(f, o->sampling.min_p);
    fputs(", \"keep_rate\": ", f);
    json_number(f, c->keep_rate);
    fprintf(f, ", \"items_total\": %d, \"items_kept\": %d, \"items\": [\n", t->n, kept);
    for (int i = 0; i < t->n; i++) {
        fputs("  {\"id\": ", f);
        json_string(f, t->items[i].id, strlen(t->items[i].id));
        fputs(", \"rule\": ", f);
        json_string(f, t->items[i].rule, strlen(t->items[i].rule));
        fprintf(f, ", \"passed\": %d, \"runs\": %d, \"pass_rate\": ", passed[i], c->runs);
        json_number(f, (double)passed[i] / c->runs);
        fprintf(f, ", \"kept\": %s}%s\n",
                is_kept(passed[i], c->runs, c->keep_rate) ? "true" : "false",
                i + 1 < t->n ? "," : "");
    }
    fputs("]}\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "specd ab: cannot write %s\n", c->json_out);
        return 1;
    }
    return 0;
}

int ab_calibrate(const cli_engine *e, const cli_options *o, const ab_tasks *t,
                 const ab_calibration *c) {
    int *passed = calloc((size_t)t->n, sizeof *passed);
    if (!passed) {
        fprintf(stderr, "specd ab: out of memory\n");
        return 1;
    }
    fprintf(stderr, "specd ab: calibrating %d task items, %d plain runs each (seeds %llu..%llu), "
                    "%d tokens, T=%g\n", t->n, c->runs, (unsigned long long)o->seed,
            (unsigned long long)(o->seed + (uint64_t)c->runs - 1), o->n_predict,
            o->sampling.temperature);
    int rc = 0;
    for (int i = 0; i < t->n && !rc; i++) {
        int32_t *ids;
        int64_t n_ids;
        if ((rc = cli_encode_prompt(e, t->items[i].prompt, o->chat, &ids, &n_ids))) break;
        for (int r = 0; r < c->runs && !rc; r++) {
            cli_options run = *o;
            run.seed = o->seed + (uint64_t)r;
            cli_result res = {0};
            rc = cli_run(e, &run, "none", NULL, ids, n_ids, 0, &res);
            size_t len;
            specd_error err;
            char *text =
                rc ? NULL : ab_decode_text(e->tok, res.tokens, res.n_tokens, 0, &len, &err);
            if (!rc && !text) {
                fprintf(stderr, "specd ab: decoding the output of task %s: %s\n",
                        t->items[i].id, err.message);
                rc = 1;
            }
            if (!rc) passed[i] += ab_task_check(&t->items[i], text, len);
            free(text);
            cli_result_free(&res);
        }
        free(ids);
        if (!rc)
            fprintf(stderr, "[%d/%d] %s: %d/%d\n", i + 1, t->n, t->items[i].id, passed[i],
                    c->runs);
    }
    if (!rc) {
        int kept = 0;
        printf("%-4s %-28s %-12s %8s %9s %5s\n", "#", "id", "rule", "passed", "pass rate", "kept");
        for (int i = 0; i < t->n; i++) {
            int keep = is_kept(passed[i], c->runs, c->keep_rate);
            kept += keep;
            printf("%-4d %-28.28s %-12s %4d/%-3d %9.2f %5s\n", i + 1, t->items[i].id,
                   t->items[i].rule, passed[i], c->runs, (double)passed[i] / c->runs,
                   keep ? "yes" : "no");
        }
        printf("kept %d of %d items (pass rate >= %.2f over %d runs)\n", kept, t->n, c->keep_rate,
               c->runs);
        if (c->select_out) rc |= write_selection(c->select_out, t, passed, c->runs, c->keep_rate);
        if (c->json_out) rc |= write_json(o, t, passed, c);
    }
    free(passed);
    return rc;
}
