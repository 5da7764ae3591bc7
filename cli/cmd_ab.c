/* specd ab: for each prompt, a plain run and a speculative run with the same seed. Under the
 * lossless rules (greedy, coupled) the outputs must be token-identical: any divergence prints the
 * prompt and the first differing position and the command exits 1. Under rejection sampling the
 * outputs agree only in distribution, so agreement is reported instead. Beside speed, quality
 * (cli/ab_quality.h): the outputs' NLL under the base model, repetition, agreement with greedy
 * decoding and, with --tasks, the pass rate on rule-checked items; it matters for lossy outcomes
 * and is computed for all (for lossless ones it must equal plain's). */
#include "cli/ab_calibrate.h"
#include "cli/ab_rounds.h"
#include "cli/ab_quality_report.h"
#include "cli/ab_report.h"
#include "cli/cli_run.h"
#include "cli/commands.h"
#include "cli/policy_help.h"
#include "common/json_out.h"
#include "specd/metrics.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out, "usage: specd ab --policy NAME (--prompts FILE | --tasks FILE) [options]\n"
                 "       specd ab --tasks FILE --calibrate R [--keep-rate P] [--select-out OUT]\n\n"
                 "  --prompts FILE       one prompt per line (examples/prompts.txt is the default set)\n"
                 "  --tasks FILE         rule-checked task items, JSONL (bench/tasks/tasks.jsonl): run\n"
                 "                       their prompts and report each side's pass rate\n"
                 "  --no-quality         skip scoring the outputs under the base model (NLL)\n"
                 "  --repeat R           run plain and speculative decoding R times per prompt,\n"
                 "                       alternating which goes first, and report each side's\n"
                 "                       median run (default 1)\n"
                 "  --calibrate R        no A/B: run each task item R times through plain decoding\n"
                 "                       (seeds S..S+R-1) and report its pass rate\n"
                 "  --keep-rate P        with --calibrate: keep items passing >= P (default 0.3)\n"
                 "  --select-out OUT     with --calibrate: write the kept items (JSONL) to OUT\n"
                 "  --json OUT           write per-prompt and overall figures as JSON\n"
                 "  --metrics OUT        write the speculative counters in Prometheus text format\n"
                 "  --report OUT.html    write a self-contained HTML report (setup, identity per\n"
                 "                       prompt with the first divergence in context, charts)\n\n%s\n",
            AB_QUALITY_HELP);
    cli_print_shared_help(out);
}

static int read_prompts(const char *path, char ***out, int *n_out) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "specd ab: cannot open %s\n", path);
        return 1;
    }
    char **v = NULL;
    int n = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int oom = 0;
    while (!oom && (len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        char **grown = realloc(v, (size_t)(n + 1) * sizeof *v);
        char *copy = grown ? strdup(line) : NULL;
        if (grown) v = grown;
        if (!copy) oom = 1;
        else v[n++] = copy;
    }
    free(line);
    fclose(f);
    if (oom) {
        fprintf(stderr, "specd ab: out of memory reading %s\n", path);
        for (int i = 0; i < n; i++) free(v[i]);
        free(v);
        return 1;
    }
    if (n == 0) {
        fprintf(stderr, "specd ab: %s has no prompts\n", path);
        free(v);
        return 1;
    }
    *out = v;
    *n_out = n;
    return 0;
}

static void fill_row(ab_row *r, const cli_result *plain, const cli_result *spec) {
    r->n_plain = plain->n_tokens;
    r->n_spec = spec->n_tokens;
    int64_t n = plain->n_tokens < spec->n_tokens ? plain->n_tokens : spec->n_tokens;
    r->first_diff = -1;
    for (int64_t i = 0; i < n && r->first_diff < 0; i++)
        if (plain->tokens[i] != spec->tokens[i]) r->first_diff = i;
    if (r->first_diff < 0 && plain->n_tokens != spec->n_tokens) r->first_diff = n;
    r->identical = r->first_diff < 0;
    r->seq = spec->seq;
    r->acceptance = cli_acceptance_rate(&spec->seq);
    r->mean_accepted = cli_mean_accepted(&spec->seq);
    r->tpf = cli_tpf(spec);
    r->p_cache = ab_p_cache(spec->seq.n_emitted, spec->seq.n_tokens_run);
    r->tps_plain = cli_decode_tps(plain);
    r->tps_spec = cli_decode_tps(spec);
    r->ns_plain = plain->run.decode_ns;
    r->ns_spec = spec->run.decode_ns;
    r->fwd_ns_spec = spec->run.forward_ns;
    r->tok_plain = plain->run.n_emitted;
    r->tok_spec = spec->run.n_emitted;
    r->steps_spec = spec->run.n_steps;
    r->grammar_rows = spec->grammar.n_rows;
    r->grammar_ns = spec->grammar.mask_ns;
}

static void json_row(FILE *f, const ab_row *r, int lossless, int agreement, int tasks) {
    fprintf(f, "\"identical\": %s, \"first_difference\": %lld, \"acceptance_rate\": ",
            r->identical ? "true" : "false", (long long)r->first_diff);
    json_number(f, r->acceptance);
    fprintf(f, ", \"mean_accepted_length\": ");
    json_number(f, r->mean_accepted);
    fprintf(f, ", \"tpf\": ");
    json_number(f, r->tpf);
    fprintf(f, ", \"p_cache\": ");
    json_number(f, r->p_cache);
    fprintf(f, ", \"tokens_per_s_plain\": ");
    json_number(f, r->tps_plain);
    fprintf(f, ", \"tokens_per_s_spec\": ");
    json_number(f, r->tps_spec);
    fprintf(f, ", \"speedup\": ");
    json_number(f, r->tps_plain > 0 ? r->tps_spec / r->tps_plain : 0.0);
    fprintf(f, ", \"steps\": %lld, \"guard_backoffs\": %lld, \"guard_plain_steps\": %lld",
            (long long)r->seq.n_steps, (long long)r->seq.n_backoffs,
            (long long)r->seq.n_guard_plain);
    fprintf(f, ", \"tokens_plain\": %lld, \"tokens_spec\": %lld, \"lossless_rule\": %s, "
               "\"lossy\": %s, \"acceptance_by_position\": [",
            (long long)r->n_plain, (long long)r->n_spec, lossless ? "true" : "false",
            r->seq.lossy ? "true" : "false");
    for (int i = 0; i < SPECD_MAX_DRAFT && r->seq.drafted_at[i] > 0; i++) {
        if (i) fputs(", ", f);
        json_number(f, (double)r->seq.accepted_at[i] / (double)r->seq.drafted_at[i]);
    }
    fputs("]", f);
    fprintf(f, ", \"grammar_rows\": %lld, \"grammar_us_per_row\": ", (long long)r->grammar_rows);
    json_number(f, r->grammar_rows ? (double)r->grammar_ns / 1e3 / (double)r->grammar_rows : 0.0);
    fprintf(f, ", \"grammar_drafts\": %lld, \"drafts_cut\": %lld", (long long)r->seq.n_forced,
            (long long)r->seq.n_draft_cut);
    ab_quality_json(f, r, agreement, tasks);
}

static int write_json(const char *path, const cli_options *o, const ab_row *rows, int n,
                      const ab_row *all, int lossless, int tasks, int repeat) {
    int agreement = o->sampling.temperature == 0.0f;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "specd ab: cannot write %s\n", path);
        return 1;
    }
    fprintf(f, "{\"policy\": ");
    json_string(f, o->policy, strlen(o->policy));
    fprintf(f, ", \"numerics\": ");
    json_string(f, cli_numerics_label(), strlen(cli_numerics_label()));
    fprintf(f, ", \"temperature\": ");
    json_number(f, o->sampling.temperature);
    fprintf(f, ", \"seed\": %llu, \"n\": %d, \"repeat\": %d", (unsigned long long)o->seed,
            o->n_predict, repeat);
    ab_quality_json_definitions(f);
    fputs(", \"prompts\": [\n", f);
    for (int i = 0; i < n; i++) {
        fputs("  {\"prompt\": ", f);
        json_string(f, rows[i].prompt, strlen(rows[i].prompt));
        fputs(", ", f);
        json_row(f, &rows[i], lossless, agreement, tasks);
        fputs(i + 1 < n ? "},\n" : "}\n", f);
    }
    fputs("], \"overall\": {", f);
    json_row(f, all, lossless, agreement, tasks);
    fputs("}}\n", f);
    return fclose(f) != 0;
}

static int write_metrics(const char *path, const cli_options *o, const specd_seq_stats *s) {
    char labels[256];
    snprintf(labels, sizeof labels, "policy=\"%s\"", o->policy);
    size_t need = specd_metrics_format(s, labels, NULL, 0);
    char *buf = malloc(need + 1);
    FILE *f = buf ? fopen(path, "w") : NULL;
    if (!f) {
        fprintf(stderr, "specd ab: cannot write %s\n", path);
        free(buf);
        return 1;
    }
    specd_metrics_format(s, labels, buf, need + 1);
    fputs(buf, f);
    free(buf);
    return fclose(f) != 0;
}

/* The items' prompts, as read_prompts gives them (each a new string). */
static int load_tasks(const char *path, ab_tasks *tasks, char ***out, int *n_out) {
    char msg[512];
    if (ab_tasks_load(path, tasks, msg, sizeof msg)) {
        fprintf(stderr, "specd ab: --tasks: %s\n", msg);
        return 1;
    }
    char **v = calloc((size_t)tasks->n, sizeof *v);
    for (int i = 0; v && i < tasks->n; i++)
        if (!(v[i] = strdup(tasks->items[i].prompt))) {
            for (int k = 0; k < i; k++) free(v[k]);
            free(v);
            v = NULL;
        }
    if (!v) {
        fprintf(stderr, "specd ab: out of memory reading %s\n", path);
        ab_tasks_free(tasks);
        return 1;
    }
    *out = v;
    *n_out = tasks->n;
    return 0;
}

static int calibrate(const cli_options *o, const char *tasks_path, const char *prompts_path,
                     ab_calibration *cal, int argc, char **argv) {
    if (!tasks_path || prompts_path) {
        fprintf(stderr, "specd ab: --calibrate needs --tasks (and no --prompts)\n");
        return 2;
    }
    ab_tasks tasks;
    char msg[512];
    if (ab_tasks_load(tasks_path, &tasks, msg, sizeof msg)) {
        fprintf(stderr, "specd ab: --tasks: %s\n", msg);
        return 2;
    }
    /* the command as run, recorded beside the figures it produced */
    size_t len = strlen("specd");
    for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 1;
    char *command = malloc(len + 1);
    if (!command) {
        ab_tasks_free(&tasks);
        return 1;
    }
    strcpy(command, "specd");
    for (int i = 0; i < argc; i++) strcat(strcat(command, " "), argv[i]);
    cal->tasks_path = tasks_path;
    cal->command = command;
    cli_engine e;
    int rc = cli_engine_open(&e, o);
    if (!rc) rc = ab_calibrate(&e, o, &tasks, cal) ? 1 : 0;
    cli_engine_close(&e);
    free(command);
    ab_tasks_free(&tasks);
    return rc;
}

/* What the command line asked beyond the shared options. */
typedef struct ab_args {
    const char *prompts_path, *tasks_path, *json_path, *metrics_path, *report_path;
    int score, repeat, keep_rate_set;
} ab_args;

/* Reads argv into o, a and cal. Returns -1 to go on, else the exit code (0 after --help). */
static int parse_args(int argc, char **argv, cli_options *o, ab_args *a, ab_calibration *cal) {
    for (int i = 1; i < argc; i++) {
        int rc = cli_parse_shared(o, argc, argv, &i);
        if (rc < 0) return 2;
        if (rc > 0) continue;
        if (!strcmp(argv[i], "--prompts") && i + 1 < argc)
            a->prompts_path = argv[++i];
        else if (!strcmp(argv[i], "--tasks") && i + 1 < argc)
            a->tasks_path = argv[++i];
        else if (!strcmp(argv[i], "--no-quality"))
            a->score = 0;
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
            if (cli_parse_count("specd ab", "--repeat", argv[++i], 1, 1000, &a->repeat)) return 2;
        } else if (!strcmp(argv[i], "--select-out") && i + 1 < argc)
            cal->select_out = argv[++i];
        else if (!strcmp(argv[i], "--calibrate") && i + 1 < argc) {
            if (cli_parse_count("specd ab", "--calibrate", argv[++i], 1, 1000, &cal->runs))
                return 2;
        } else if (!strcmp(argv[i], "--keep-rate") && i + 1 < argc) {
            char *end;
            double p = strtod(argv[++i], &end);
            if (*end || !(p >= 0.0 && p <= 1.0)) {
                fprintf(stderr, "specd ab: --keep-rate expects a fraction in [0, 1], got '%s'\n",
                        argv[i]);
                return 2;
            }
            cal->keep_rate = p;
            a->keep_rate_set = 1;
        } else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            a->json_path = argv[++i];
        else if (!strcmp(argv[i], "--metrics") && i + 1 < argc)
            a->metrics_path = argv[++i];
        else if (!strcmp(argv[i], "--report") && i + 1 < argc)
            a->report_path = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "specd ab: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    return -1;
}

/* The A/B run's own checks (calibration has its own, in calibrate). 0, or 2 after saying why. */
static int check_ab_args(const cli_options *o, const ab_args *a, const ab_calibration *cal) {
    if (cal->select_out || a->keep_rate_set) {
        fprintf(stderr, "specd ab: --select-out and --keep-rate go with --calibrate\n");
        return 2;
    }
    if (!o->policy || (!a->prompts_path && !a->tasks_path)) {
        fprintf(stderr, "specd ab: --policy and --prompts (or --tasks) are required\n");
        usage(stderr);
        return 2;
    }
    if (a->prompts_path && a->tasks_path) {
        fprintf(stderr, "specd ab: give --prompts or --tasks, not both\n");
        return 2;
    }
    if (!specd_policy_find(o->policy)) {
        fprintf(stderr, "specd ab: unknown policy '%s'\n", o->policy);
        return 2;
    }
    return 0;
}

/* The pooled row's sums of one prompt's figures (its rates are computed at the end). */
static void pool_row(ab_row *all, const ab_row *r, const specd_seq_stats *spec) {
    specd_seq_stats_add(&all->seq, spec);
    all->ns_plain += r->ns_plain;
    all->ns_spec += r->ns_spec;
    all->fwd_ns_spec += r->fwd_ns_spec;
    all->tok_plain += r->tok_plain;
    all->n_plain += r->n_plain;
    all->n_spec += r->n_spec;
    all->tok_spec += r->tok_spec;
    all->steps_spec += r->steps_spec;
    all->grammar_rows += r->grammar_rows;
    all->grammar_ns += r->grammar_ns;
}

/* What stays the same over the prompts of one A/B run. */
typedef struct ab_run {
    cli_engine *e;
    const cli_options *o;
    const ab_args *a;
    const ab_tasks *tasks;
    ab_rounds *rounds;
    int lossless;
    int n;
} ab_run;

/* Prompt i (0-based): its plain and speculative runs into *row, pooled into *all. Sets *diverged
 * when its outputs differ where they must not. Returns 0, or 1 on failure. */
static int run_prompt(const ab_run *r, int i, char *prompt, ab_row *row, ab_row *all,
                      int *diverged) {
    const cli_options *o = r->o;
    int32_t *ids;
    int64_t n_ids;
    cli_result plain = {0}, spec = {0};
    row->prompt = prompt;
    fprintf(stderr, "[%d/%d] ", i + 1, r->n);
    int rc = cli_encode_prompt(r->e, prompt, o->chat, &ids, &n_ids);
    if (rc) return rc;
    ab_side sides[2] = {
        {.policy = "none", .ids = ids, .n_ids = n_ids},
        {.policy = o->policy, .policy_opts = o->policy_opts, .ids = ids, .n_ids = n_ids}};
    rc = ab_run_rounds(r->rounds, r->e, o, sides, 2);
    if (!rc) {
        plain = sides[0].result;
        spec = sides[1].result;
        fill_row(row, &plain, &spec);
        if (!sides[0].stable || !sides[1].stable) {
            /* a fixed seed gives one output: a change between rounds is a defect */
            fprintf(stderr, "specd ab: prompt %d: the %s output changed between rounds\n", i + 1,
                    sides[0].stable ? "speculative" : "plain");
            row->identical = 0;
            *diverged = 1;
        }
        /* after both timed runs: the speed figures above are already taken */
        const ab_task *task = r->a->tasks_path ? &r->tasks->items[i] : NULL;
        rc = ab_quality_row(r->e, ids, n_ids, plain.tokens, plain.n_tokens, spec.tokens,
                            spec.n_tokens, r->a->score, task, row);
        ab_quality_pool(all, row);
    }
    if (!rc) {
        if (r->a->report_path && ab_row_keep_text(row, r->e->tok, plain.tokens, plain.n_tokens,
                                                  spec.tokens, spec.n_tokens)) {
            fprintf(stderr, "specd ab: out of memory keeping the report's text\n");
            rc = 1;
        }
        pool_row(all, row, &spec.seq);
        fprintf(stderr, "%s, acceptance %.2f, speedup %.2fx\n",
                row->identical ? "identical" : "DIFFERENT", row->acceptance,
                row->tps_plain > 0 ? row->tps_spec / row->tps_plain : 0.0);
        /* a policy that flags its steps lossy (mrp mode=direct) may differ: said below */
        if (!row->identical && r->lossless && !spec.seq.lossy) {
            *diverged = 1;
            fprintf(stderr,
                    "DIVERGED: prompt %d \"%s\": first difference at output token "
                    "%lld (plain %d, speculative %d)\n",
                    i + 1, prompt, (long long)row->first_diff,
                    row->first_diff < plain.n_tokens ? plain.tokens[row->first_diff] : -1,
                    row->first_diff < spec.n_tokens ? spec.tokens[row->first_diff] : -1);
        }
    }
    cli_result_free(&plain);
    cli_result_free(&spec);
    free(ids);
    return rc;
}

/* The pooled row's rates from its sums; returns how many prompts were identical. */
static int finish_pool(ab_row *all, const ab_row *rows, int n) {
    int n_identical = 0;
    for (int i = 0; i < n; i++)
        n_identical += rows[i].identical;
    all->identical = n_identical == n;
    all->first_diff = all->identical ? -1 : 0;
    all->acceptance = cli_acceptance_rate(&all->seq);
    all->mean_accepted = cli_mean_accepted(&all->seq);
    all->tpf = all->steps_spec ? (double)all->tok_spec / (double)all->steps_spec : 0.0;
    all->p_cache = ab_p_cache(all->seq.n_emitted, all->seq.n_tokens_run);
    all->tps_plain = all->ns_plain ? (double)all->tok_plain * 1e9 / (double)all->ns_plain : 0.0;
    all->tps_spec = all->ns_spec ? (double)all->tok_spec * 1e9 / (double)all->ns_spec : 0.0;
    return n_identical;
}

/* The table on stdout (a row per prompt, then the pooled one) and the notes under it. */
static void print_summary(const ab_run *r, const ab_row *rows, const ab_row *all, int n_identical) {
    const cli_options *o = r->o;
    const int n = r->n;
    printf("%-4s %-40s %-10s %10s %8s %6s %10s %10s %8s\n", "#", "prompt", "identical",
           "acceptance", "mean_acc", "tpf", "plain t/s", "spec t/s", "speedup");
    for (int i = 0; i <= n; i++) {
        const ab_row *w = i < n ? &rows[i] : all;
        char label[41], idx[12] = "";
        snprintf(label, sizeof label, "%s", i < n ? w->prompt : "(overall)");
        if (i < n) snprintf(idx, sizeof idx, "%d", i + 1);
        printf("%-4s %-40s %-10s %10.3f %8.2f %6.2f %10.1f %10.1f %7.2fx\n", idx, label,
               w->identical ? "yes" : "NO", w->acceptance, w->mean_accepted, w->tpf, w->tps_plain,
               w->tps_spec, w->tps_plain > 0 ? w->tps_spec / w->tps_plain : 0.0);
    }
    if (o->adaptive)
        printf("adaptive guard: turned drafting off %lld times; %lld of %lld speculative "
               "steps plain\n",
               (long long)all->seq.n_backoffs, (long long)all->seq.n_guard_plain,
               (long long)all->seq.n_steps);
    if (o->verifier)
        printf("remote verifier %s: %lld drafting steps verified there, %lld in-process\n",
               o->verifier, (long long)all->seq.n_remote_verified,
               (long long)all->seq.n_remote_fallback);
    if (all->steps_spec > 0)
        printf("per step: target forward %.2f ms, policy %.2f ms (%.1f%% of the forward)\n",
               (double)all->fwd_ns_spec / 1e6 / (double)all->steps_spec,
               (double)all->seq.propose_ns / 1e6 / (double)all->steps_spec,
               all->fwd_ns_spec ? 100.0 * (double)all->seq.propose_ns / (double)all->fwd_ns_spec
                                : 0.0);
    if (o->grammar && all->grammar_rows > 0 && all->steps_spec > 0)
        printf("grammar: %lld rows masked, %.1f us a row (%.1f%% of a target forward); "
               "%lld grammar drafts proposed (--grammar-drafts %s), %lld drafts cut\n",
               (long long)all->grammar_rows,
               (double)all->grammar_ns / 1e3 / (double)all->grammar_rows,
               all->fwd_ns_spec ? 100.0 * (double)all->grammar_ns / (double)all->grammar_rows /
                                      ((double)all->fwd_ns_spec / (double)all->steps_spec)
                                : 0.0,
               (long long)all->seq.n_forced, o->grammar_drafts ? "on" : "off",
               (long long)all->seq.n_draft_cut);
    if (cli_policy_flags(o->policy) & SPECD_POLICY_FIGURE_P_CACHE)
        printf("p_cache (WeDLM eq. 4: tokens emitted / token rows run) %.3f, TPF %.2f\n",
               all->p_cache, all->tpf);
    if (r->lossless && all->seq.lossy)
        printf("policy %s flagged its steps LOSSY: %d of %d prompts identical token for "
               "token (not a divergence of a lossless policy)\n",
               o->policy, n_identical, n);
    if (!r->lossless)
        printf("rule is lossless in distribution only: %d of %d prompts identical token for "
               "token%s\n",
               n_identical, n, all->seq.lossy ? " (relaxed tau: LOSSY)" : "");
    ab_quality_print(stdout, rows, n, all, o->sampling.temperature == 0.0f,
                     r->a->tasks_path != NULL, o->policy);
}

/* --json, --metrics and --report. Returns 0, or nonzero when one could not be written. */
static int write_outputs(const ab_run *r, const ab_row *rows, const ab_row *all) {
    const cli_options *o = r->o;
    const ab_args *a = r->a;
    int rc = 0;
    if (a->json_path)
        rc |= write_json(a->json_path, o, rows, r->n, all, r->lossless, a->tasks_path != NULL,
                         a->repeat);
    if (a->metrics_path) rc |= write_metrics(a->metrics_path, o, &all->seq);
    if (a->report_path) {
        char model_buf[4096];
        ab_setup setup = {.options = o,
                          .model_path =
                              o->model ? o->model : cli_default_model(model_buf, sizeof model_buf),
                          .prompts_path = a->tasks_path ? a->tasks_path : a->prompts_path,
                          .lossless = r->lossless,
                          .tasks = a->tasks_path != NULL};
        rc |= ab_report_write(a->report_path, &setup, rows, r->n, all);
    }
    return rc;
}

int specd_cmd_ab(int argc, char **argv) {
    cli_options o;
    cli_options_init(&o);
    o.policy = NULL;
    ab_args a = {.score = 1, .repeat = 1};
    ab_calibration cal = {.keep_rate = 0.3};
    int rc = parse_args(argc, argv, &o, &a, &cal);
    if (rc >= 0) return rc;
    const int help = cli_policy_help_request(o.policy, o.policy_opts);
    if (help >= 0) return help;
    cal.json_out = a.json_path;
    /* an output that cannot be written is known now, not after the whole run */
    const char *outputs[][2] = {{"--json", a.json_path},
                                {"--metrics", a.metrics_path},
                                {"--report", a.report_path},
                                {"--select-out", cal.select_out}};
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++)
        if (outputs[i][1] && cli_check_writable("specd ab", outputs[i][0], outputs[i][1])) return 2;
    if (cal.runs) {
        /* calibration runs plain decoding only and writes no page or metrics */
        if (o.policy || a.report_path || a.metrics_path || !a.score) {
            fprintf(stderr, "specd ab: --calibrate takes no --policy, --report, --metrics or "
                            "--no-quality\n");
            return 2;
        }
        return calibrate(&o, a.tasks_path, a.prompts_path, &cal, argc, argv);
    }
    if (check_ab_args(&o, &a, &cal)) return 2;
    int lossless = o.rule != SPECD_ACCEPT_REJECTION && o.tau == 0.0f;
    char **prompts;
    int n;
    ab_tasks tasks = {0};
    if (a.tasks_path ? load_tasks(a.tasks_path, &tasks, &prompts, &n)
                     : read_prompts(a.prompts_path, &prompts, &n))
        return 2;
    cli_engine e;
    int open_rc = cli_engine_open(&e, &o);
    if (open_rc) {
        for (int i = 0; i < n; i++) free(prompts[i]);
        free(prompts);
        ab_tasks_free(&tasks);
        return open_rc;
    }
    ab_row *rows = calloc((size_t)n, sizeof *rows);
    ab_row all = {0};
    ab_rounds rounds = {0};
    int diverged = 0;
    rc = rows ? ab_rounds_open(&rounds, &e, &o, a.repeat) : 1;
    char device[32];
    fprintf(stderr,
            "specd ab: policy %s, %d prompts, %d tokens each, %d round%s, T=%g, rule %s, "
            "device %s, numerics %s\n",
            o.policy, n, o.n_predict, a.repeat, a.repeat == 1 ? "" : "s", o.sampling.temperature,
            o.rule == SPECD_ACCEPT_GREEDY      ? "greedy"
            : o.rule == SPECD_ACCEPT_REJECTION ? "rs"
                                               : "coupled",
            cli_device_label(e.device, e.device_index, device, sizeof device),
            specd_numerics_name(specd_context_numerics(e.ctx)));
    const ab_run run = {.e = &e,
                        .o = &o,
                        .a = &a,
                        .tasks = &tasks,
                        .rounds = &rounds,
                        .lossless = lossless,
                        .n = n};
    for (int i = 0; i < n && !rc; i++)
        rc = run_prompt(&run, i, prompts[i], &rows[i], &all, &diverged);
    if (!rc) {
        const int n_identical = finish_pool(&all, rows, n);
        print_summary(&run, rows, &all, n_identical);
        rc |= write_outputs(&run, rows, &all);
    }
    for (int i = 0; i < n; i++) {
        if (rows) ab_row_free_text(&rows[i]);
        free(prompts[i]);
    }
    free(prompts);
    free(rows);
    ab_tasks_free(&tasks);
    ab_rounds_close(&rounds);
    cli_engine_close(&e);
    if (rc) return 1;
    return diverged ? 1 : 0;
}
