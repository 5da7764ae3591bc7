#include "cli/ab_quality_report.h"
#include "common/json_out.h"

#include <stdlib.h>
#include <string.h>

#define DEF_NLL                                                                                   \
    "mean over the output's tokens (stop token included) of -log p(token | prompt, output "      \
    "before it) under the base model at temperature 1 (raw logits, no filters); overall pools "  \
    "all tokens"
#define DEF_REPEAT                                                                                \
    "of the output's windows of 4 consecutive tokens (n - 3 of them), the fraction equal to a "  \
    "window starting earlier in the same output; overall pools all windows"
#define DEF_PREFIX                                                                                \
    "T 0 only: tokens before the first difference from the plain greedy output / the plain "     \
    "output's length"
#define DEF_POSITIONS                                                                             \
    "T 0 only: positions where both outputs have the same token / the longer output's length"
#define DEF_TASK                                                                                  \
    "--tasks only: the fraction of items whose output (decoded without special tokens) passes "  \
    "the item's rule (bench/tasks/README.md)"

/* The same definitions, wrapped for a terminal. */
const char AB_QUALITY_HELP[] =
    "quality, computed after the timed runs for plain and speculative output alike (for a\n"
    "lossless outcome it equals plain's: a sanity check); overall figures pool tokens:\n"
    "  nll        mean over the output's tokens (stop token included) of\n"
    "             -log p(token | prompt, output before it) under the base model at\n"
    "             temperature 1 (raw logits, no filters); plain's is the reference\n"
    "  rep4       of the output's n - 3 windows of 4 consecutive tokens, the fraction\n"
    "             equal to a window starting earlier in the same output\n"
    "  agree pre  T 0 only: tokens before the first difference from the plain greedy\n"
    "             output / the plain output's length\n"
    "  agree pos  T 0 only: positions where both outputs have the same token / the\n"
    "             longer output's length\n"
    "  pass       --tasks only: items whose output (decoded without special tokens)\n"
    "             passes the item's rule (bench/tasks/README.md) / items\n";

/* The output as a task rule reads it: decoded without special tokens. 1 (said on stderr) when it
 * does not decode: a tokenizer error is not the policy's FAIL. */
static int check_task(const cli_engine *e, const ab_task *task, const int32_t *ids, int64_t n,
                      int *pass) {
    size_t len;
    specd_error err;
    char *text = ab_decode_text(e->tok, ids, n, 0, &len, &err);
    if (!text) {
        fprintf(stderr, "specd ab: decoding the output of task %s: %s\n", task->id, err.message);
        return 1;
    }
    *pass = ab_task_check(task, text, len);
    free(text);
    return 0;
}

int ab_quality_row(const cli_engine *e, const int32_t *prompt, int64_t n_prompt,
                   const int32_t *plain, int64_t n_plain, const int32_t *spec, int64_t n_spec,
                   int score, const ab_task *task, ab_row *row) {
    specd_error err;
    memset(&row->q_plain, 0, sizeof row->q_plain);
    memset(&row->q_spec, 0, sizeof row->q_spec);
    if (ab_quality_repeats(plain, n_plain, &row->q_plain) ||
        ab_quality_repeats(spec, n_spec, &row->q_spec)) {
        fprintf(stderr, "specd ab: out of memory computing repetition\n");
        return 1;
    }
    ab_agreement_of(plain, n_plain, spec, n_spec, &row->agree);
    row->scored = score;
    if (score) {
        /* identical outputs (every lossless run) have one score: a second forward adds nothing */
        int same = n_spec == n_plain && !memcmp(spec, plain, (size_t)n_plain * sizeof *plain);
        if (ab_quality_score(e->ctx, prompt, n_prompt, plain, n_plain, &row->q_plain.nll_sum,
                             &err) != SPECD_OK ||
            (same ? (row->q_spec.nll_sum = row->q_plain.nll_sum, 0)
                  : ab_quality_score(e->ctx, prompt, n_prompt, spec, n_spec,
                                     &row->q_spec.nll_sum, &err) != SPECD_OK)) {
            fprintf(stderr, "specd ab: scoring the output under the base model: %s\n",
                    err.message);
            return 1;
        }
        row->q_plain.nll_tokens = n_plain;
        row->q_spec.nll_tokens = n_spec;
    }
    if (task) {
        row->task_id = task->id;
        if (check_task(e, task, plain, n_plain, &row->pass_plain) ||
            check_task(e, task, spec, n_spec, &row->pass_spec))
            return 1;
        row->q_plain.tasks = row->q_spec.tasks = 1;
        row->q_plain.passed = row->pass_plain;
        row->q_spec.passed = row->pass_spec;
    }
    return 0;
}

void ab_quality_pool(ab_row *all, const ab_row *row) {
    all->scored = row->scored;
    ab_quality_add(&all->q_plain, &row->q_plain);
    ab_quality_add(&all->q_spec, &row->q_spec);
    ab_agreement_add(&all->agree, &row->agree);
}

static double pass_rate(const ab_quality *q) {
    return q->tasks ? (double)q->passed / (double)q->tasks : 0.0;
}

void ab_quality_print(FILE *out, const ab_row *rows, int n, const ab_row *all, int agreement,
                      int tasks, const char *policy) {
    fprintf(out, "\nquality (after the timed runs; `specd ab --help` defines each figure)\n");
    fprintf(out, "%-4s %-40s %9s %9s %10s %10s", "#", "prompt", "nll plain", "nll spec",
            "rep4 plain", "rep4 spec");
    if (agreement) fprintf(out, " %9s %9s", "agree pre", "agree pos");
    if (tasks) fprintf(out, " %-20s %10s %10s", "task", "pass plain", "pass spec");
    fputc('\n', out);
    for (int i = 0; i <= n; i++) {
        const ab_row *r = i < n ? &rows[i] : all;
        char label[41], idx[12] = "", nll_p[16] = "-", nll_s[16] = "-";
        snprintf(label, sizeof label, "%s", i < n ? r->prompt : "(overall)");
        if (i < n) snprintf(idx, sizeof idx, "%d", i + 1);
        if (r->scored) {
            snprintf(nll_p, sizeof nll_p, "%.3f", ab_quality_nll(&r->q_plain));
            snprintf(nll_s, sizeof nll_s, "%.3f", ab_quality_nll(&r->q_spec));
        }
        fprintf(out, "%-4s %-40s %9s %9s %10.3f %10.3f", idx, label, nll_p, nll_s,
                ab_quality_repeat_rate(&r->q_plain), ab_quality_repeat_rate(&r->q_spec));
        if (agreement)
            fprintf(out, " %9.3f %9.3f", ab_agreement_prefix(&r->agree),
                    ab_agreement_positions(&r->agree));
        if (tasks && i < n)
            fprintf(out, " %-20.20s %10s %10s", r->task_id ? r->task_id : "-",
                    r->pass_plain ? "pass" : "FAIL", r->pass_spec ? "pass" : "FAIL");
        else if (tasks)
            fprintf(out, " %-20s %10.3f %10.3f", "(pass rate)", pass_rate(&r->q_plain),
                    pass_rate(&r->q_spec));
        fputc('\n', out);
    }
    if (tasks)
        fprintf(out, "task pass rate: plain %lld/%lld (%.1f%%), %s %lld/%lld (%.1f%%)\n",
                (long long)all->q_plain.passed, (long long)all->q_plain.tasks,
                100.0 * pass_rate(&all->q_plain), policy, (long long)all->q_spec.passed,
                (long long)all->q_spec.tasks, 100.0 * pass_rate(&all->q_spec));
}

static void json_side(FILE *f, const char *side, const ab_quality *q, int scored, int tasks) {
    fprintf(f, "\"nll_%s\": ", side);
    if (scored) json_number(f, ab_quality_nll(q));
    else fputs("null", f);
    fprintf(f, ", \"tokens_scored_%s\": %lld, \"repeat_4gram_%s\": ", side,
            scored ? (long long)q->nll_tokens : 0LL, side);
    json_number(f, ab_quality_repeat_rate(q));
    fprintf(f, ", \"windows_4gram_%s\": %lld", side, (long long)q->grams);
    if (tasks) {
        fprintf(f, ", \"task_pass_rate_%s\": ", side);
        json_number(f, pass_rate(q));
        fprintf(f, ", \"tasks_passed_%s\": %lld", side, (long long)q->passed);
    }
    fputs(", ", f);
}

void ab_quality_json(FILE *f, const ab_row *r, int agreement, int tasks) {
    fputs(", \"quality\": {", f);
    json_side(f, "plain", &r->q_plain, r->scored, tasks);
    json_side(f, "spec", &r->q_spec, r->scored, tasks);
    fputs("\"agreement_prefix\": ", f);
    if (agreement) json_number(f, ab_agreement_prefix(&r->agree));
    else fputs("null", f);
    fputs(", \"agreement_positions\": ", f);
    if (agreement) json_number(f, ab_agreement_positions(&r->agree));
    else fputs("null", f);
    if (tasks) {
        fprintf(f, ", \"tasks\": %lld", (long long)r->q_plain.tasks);
        if (r->task_id) {
            fputs(", \"task_id\": ", f);
            json_string(f, r->task_id, strlen(r->task_id));
        }
    }
    fputs("}", f);
}

void ab_quality_json_definitions(FILE *f) {
    static const char *const defs[][2] = {{"nll", DEF_NLL},
                                          {"repeat_4gram", DEF_REPEAT},
                                          {"agreement_prefix", DEF_PREFIX},
                                          {"agreement_positions", DEF_POSITIONS},
                                          {"task_pass_rate", DEF_TASK}};
    fputs(", \"quality_definitions\": {", f);
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        if (i) fputs(", ", f);
        json_string(f, defs[i][0], strlen(defs[i][0]));
        fputs(": ", f);
        json_string(f, defs[i][1], strlen(defs[i][1]));
    }
    fputs("}", f);
}
