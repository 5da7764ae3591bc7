#include "cli/specbench_tally.h"
#include "cli/html_out.h"
#include "cli/svg_chart.h"
#include "common/json_out.h"
#include "specd/version.h"

#include <math.h>
#include <string.h>

sb_turn *sb_turn_at(const sb_results *r, int question, int turn, int side) {
    size_t per_q = (size_t)SPECBENCH_MAX_TURNS * (size_t)(1 + r->n_policies);
    return &r->turns[(size_t)question * per_q + (size_t)turn * (size_t)(1 + r->n_policies) +
                     (size_t)side];
}

static double tps(const sb_tally *t) { return t->ns ? (double)t->tokens * 1e9 / (double)t->ns : 0; }

double sb_tpf(const sb_tally *t) {
    return t->forwards ? (double)t->tokens / (double)t->forwards : 0.0;
}

static const sb_tally *spec_tally(const sb_results *r, int policy, int column) {
    return &r->spec[(size_t)policy * SB_COLUMNS + (size_t)column];
}

double sb_speedup(const sb_results *r, int policy, int column) {
    double base = tps(&r->plain[column]);
    return base > 0 ? tps(spec_tally(r, policy, column)) / base : 0.0;
}

double sb_geomean(const sb_results *r, int policy) {
    double log_sum = 0.0;
    int n = 0;
    for (int g = 0; g < SPECBENCH_GROUPS; g++) {
        if (!r->questions[g]) continue;
        double s = sb_speedup(r, policy, g);
        if (s <= 0) return 0.0;
        log_sum += log(s);
        n++;
    }
    return n ? exp(log_sum / n) : 0.0;
}

static const char *rule_name(const cli_options *o) {
    return o->rule == SPECD_ACCEPT_GREEDY      ? "greedy"
           : o->rule == SPECD_ACCEPT_REJECTION ? "rs"
                                               : "coupled";
}

/* "name" or "name:options", as the rows are labelled */
static const char *label(const sb_results *r, int p, char *buf, size_t cap) {
    const sb_policy *x = &r->policies[p];
    snprintf(buf, cap, "%s%s%s", x->name, x->opts && *x->opts ? ":" : "", x->opts ? x->opts : "");
    return buf;
}

static const char *verdict(const sb_results *r, const sb_tally *t) {
    if (t->lossy) return "LOSSY";
    if (t->identical == t->turns) return "yes";
    return r->lossless ? "NO" : "in distribution";
}

void sb_print(FILE *out, const sb_results *r) {
    fprintf(out, "\nSpec-Bench (%s): speedup over plain decoding per group, %d tokens a turn, T %g, "
                 "rule %s, numerics %s, median of %d round%s\n",
            r->path, r->options->n_predict, r->options->sampling.temperature,
            rule_name(r->options), cli_numerics_label(), r->repeat, r->repeat == 1 ? "" : "s");
    fprintf(out, "%-22s", "policy");
    for (int g = 0; g < SPECBENCH_GROUPS; g++) {
        char head[24];
        snprintf(head, sizeof head, "%s(%d)", specbench_group_name(g), r->questions[g]);
        fprintf(out, " %9s", head);
    }
    fprintf(out, " %8s %8s %6s %10s\n", "overall", "geomean", "tau", "identical");
    fprintf(out, "%-22s", "none (plain, tok/s)");
    for (int g = 0; g < SB_COLUMNS; g++)
        if (r->plain[g].turns) fprintf(out, " %9.1f", tps(&r->plain[g]));
        else fprintf(out, " %9s", "-");
    fprintf(out, " %8s %6.2f %10s\n", "-", 1.0, "-");
    for (int p = 0; p < r->n_policies; p++) {
        char name[64];
        fprintf(out, "%-22.22s", label(r, p, name, sizeof name));
        for (int g = 0; g < SB_COLUMNS; g++)
            if (r->plain[g].turns) fprintf(out, " %8.2fx", sb_speedup(r, p, g));
            else fprintf(out, " %9s", "-");
        const sb_tally *all = spec_tally(r, p, SB_OVERALL);
        fprintf(out, " %7.2fx %6.2f %10s\n", sb_geomean(r, p), sb_tpf(all), verdict(r, all));
    }
    fprintf(out, "\nmean accepted tokens per target forward (tau) per group\n%-22s", "policy");
    for (int g = 0; g < SB_COLUMNS; g++)
        fprintf(out, " %9s", g < SPECBENCH_GROUPS ? specbench_group_name(g) : "overall");
    fputc('\n', out);
    for (int p = 0; p < r->n_policies; p++) {
        char name[64];
        fprintf(out, "%-22.22s", label(r, p, name, sizeof name));
        for (int g = 0; g < SB_COLUMNS; g++)
            if (r->plain[g].turns) fprintf(out, " %9.2f", sb_tpf(spec_tally(r, p, g)));
            else fprintf(out, " %9s", "-");
        const sb_tally *all = spec_tally(r, p, SB_OVERALL);
        fprintf(out, "   (%d of %d turns identical; guard: %lld of %lld steps plain",
                all->identical, all->turns, (long long)all->seq.n_guard_plain,
                (long long)all->seq.n_steps);
        if (all->seq.n_shadow_drafts > 0)
            fprintf(out, ", %lld shadow drafts", (long long)all->seq.n_shadow_drafts);
        fputs(")\n", out);
    }
}

static void json_tally(FILE *f, const sb_tally *t) {
    fprintf(f, "{\"tokens\": %lld, \"forwards\": %lld, \"decode_s\": ", (long long)t->tokens,
            (long long)t->forwards);
    json_number(f, (double)t->ns / 1e9);
    fputs(", \"tokens_per_s\": ", f);
    json_number(f, tps(t));
    fputs(", \"tpf\": ", f);
    json_number(f, sb_tpf(t));
    fprintf(f, ", \"turns\": %d, \"identical_turns\": %d, \"lossy\": %s", t->turns, t->identical,
            t->lossy ? "true" : "false");
}

static void json_columns(FILE *f, const sb_results *r, int policy) {
    for (int g = 0; g < SB_COLUMNS; g++) {
        const char *name = g < SPECBENCH_GROUPS ? specbench_group_name(g) : "overall";
        fprintf(f, "%s\"%s\": ", g ? ", " : "", name);
        const sb_tally *t = policy < 0 ? &r->plain[g] : spec_tally(r, policy, g);
        json_tally(f, t);
        if (policy >= 0) {
            fputs(", \"speedup\": ", f);
            json_number(f, sb_speedup(r, policy, g));
            fprintf(f, ", \"drafted\": %lld, \"accepted\": %lld", (long long)t->seq.n_draft_tokens,
                    (long long)t->seq.n_accepted);
        }
        fputc('}', f);
    }
}

static void json_questions(FILE *f, const sb_results *r) {
    for (int q = 0; q < r->set->n; q++) {
        const specbench_question *item = &r->set->items[q];
        fprintf(f, "%s\n  {\"question_id\": %lld, \"category\": ", q ? "," : "", item->id);
        json_string(f, item->category, strlen(item->category));
        fprintf(f, ", \"group\": \"%s\", \"turns\": [", specbench_group_name(item->group));
        for (int t = 0; t < item->n_turns; t++) {
            fputs(t ? ", [" : "[", f);
            for (int s = 0; s <= r->n_policies; s++) {
                const sb_turn *x = sb_turn_at(r, q, t, s);
                fprintf(f, "%s{\"side\": ", s ? ", " : "");
                const char *side = s ? r->policies[s - 1].name : "none";
                json_string(f, side, strlen(side));
                fprintf(f, ", \"prompt_tokens\": %lld, \"tokens\": %lld, \"forwards\": %lld, "
                           "\"decode_s\": ",
                        (long long)x->prompt_tokens, (long long)x->tokens, (long long)x->forwards);
                json_number(f, (double)x->ns / 1e9);
                fprintf(f, ", \"identical\": %s}", x->identical ? "true" : "false");
            }
            fputc(']', f);
        }
        fputs("]}", f);
    }
}

int sb_write_json(const char *path, const sb_results *r) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "specd bench: cannot write %s\n", path);
        return 1;
    }
    const cli_options *o = r->options;
    fputs("{\"benchmark\": \"spec-bench\", \"file\": ", f);
    json_string(f, r->path, strlen(r->path));
    fprintf(f, ", \"n\": %d, \"temperature\": ", o->n_predict);
    json_number(f, o->sampling.temperature);
    fprintf(f, ", \"rule\": \"%s\", \"numerics\": \"%s\", \"seed\": %llu, \"repeat\": %d, "
               "\"threads\": %d, \"lossless_rule\": %s, \"version\": \"%s\", "
               "\"questions_per_group\": {",
            rule_name(o), cli_numerics_label(), (unsigned long long)o->seed, r->repeat,
            o->n_threads, r->lossless ? "true" : "false", specd_version());
    for (int g = 0; g < SPECBENCH_GROUPS; g++)
        fprintf(f, "%s\"%s\": %d", g ? ", " : "", specbench_group_name(g), r->questions[g]);
    fputs("},\n \"plain\": {", f);
    json_columns(f, r, -1);
    fputs("},\n \"policies\": [", f);
    for (int p = 0; p < r->n_policies; p++) {
        fprintf(f, "%s\n  {\"policy\": ", p ? "," : "");
        json_string(f, r->policies[p].name, strlen(r->policies[p].name));
        fputs(", \"options\": ", f);
        const char *opts = r->policies[p].opts ? r->policies[p].opts : "";
        json_string(f, opts, strlen(opts));
        fputs(", \"geomean_speedup\": ", f);
        json_number(f, sb_geomean(r, p));
        fputs(", \"groups\": {", f);
        json_columns(f, r, p);
        fputs("}}", f);
    }
    fputs("],\n \"questions\": [", f);
    json_questions(f, r);
    fputs("\n]}\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "specd bench: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

static void report_table(FILE *f, const sb_results *r) {
    fputs("<table>\n<tr><th class=\"l\">policy</th>", f);
    for (int g = 0; g < SPECBENCH_GROUPS; g++) {
        fputs("<th title=\"", f);
        const char *title = specbench_group_title(g);
        html_text(f, title, strlen(title));
        fprintf(f, "\">%s (%d)</th>", specbench_group_name(g), r->questions[g]);
    }
    fputs("<th>overall</th><th>geomean</th><th>tau</th><th>identical</th></tr>\n", f);
    fputs("<tr><td class=\"l\">none (plain decoding, tok/s)</td>", f);
    for (int g = 0; g < SB_COLUMNS; g++)
        if (r->plain[g].turns) fprintf(f, "<td>%.1f</td>", tps(&r->plain[g]));
        else fputs("<td>-</td>", f);
    fputs("<td>-</td><td>1.00</td><td>-</td></tr>\n", f);
    for (int p = 0; p < r->n_policies; p++) {
        char name[256];
        label(r, p, name, sizeof name);
        fputs("<tr><td class=\"l\">", f);
        html_text(f, name, strlen(name));
        fputs("</td>", f);
        for (int g = 0; g < SB_COLUMNS; g++)
            if (r->plain[g].turns) fprintf(f, "<td>%.2fx</td>", sb_speedup(r, p, g));
            else fputs("<td>-</td>", f);
        const sb_tally *all = spec_tally(r, p, SB_OVERALL);
        const char *v = verdict(r, all);
        fprintf(f, "<td>%.2fx</td><td>%.2f</td><td class=\"%s\">%s (%d/%d turns)</td></tr>\n",
                sb_geomean(r, p), sb_tpf(all),
                !strcmp(v, "yes") ? "ok" : !strcmp(v, "LOSSY") ? "lossy" : "bad", v,
                all->identical, all->turns);
    }
    fputs("</table>\n", f);
}

int sb_write_report(const char *path, const sb_results *r) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "specd bench: cannot write %s\n", path);
        return 1;
    }
    const cli_options *o = r->options;
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
               "<title>specd bench: Spec-Bench</title>\n<style>%s</style>\n</head>\n<body>\n"
               "<h1>Spec-Bench: speculative decoding against plain decoding</h1>\n<table>\n",
            html_page_style);
    html_row_text(f, "questions", r->path);
    html_row_text(f, "specd", specd_version());
    html_row_number(f, "tokens a turn (-n)", o->n_predict, 0);
    html_row_number(f, "temperature", o->sampling.temperature, -1);
    html_row_text(f, "rule", rule_name(o));
    html_row_text(f, "numerics", cli_numerics_label());
    html_row_number(f, "rounds (median run kept)", r->repeat, 0);
    html_row_number(f, "threads", o->n_threads, 0);
    fputs("</table>\n<h2>Leaderboard</h2>\n<p>Speedup: decode tokens per second against plain "
          "decoding of the same questions in the same process, the two alternating round by "
          "round. tau: tokens per target forward (Spec-Bench's mean accepted tokens).</p>\n",
          f);
    report_table(f, r);
    fputs("<h2>Speedup per group</h2>\n", f);
    const char *labels[SB_COLUMNS];
    for (int g = 0; g < SPECBENCH_GROUPS; g++) labels[g] = specbench_group_name(g);
    labels[SB_OVERALL] = "all";
    for (int p = 0; p < r->n_policies; p++) {
        double v[SB_COLUMNS], t[SB_COLUMNS];
        for (int g = 0; g < SB_COLUMNS; g++) {
            v[g] = r->plain[g].turns ? sb_speedup(r, p, g) : NAN;
            t[g] = r->plain[g].turns ? sb_tpf(spec_tally(r, p, g)) : NAN;
        }
        char title[160];
        snprintf(title, sizeof title, "%s: speedup per group (dashed: 1x)", r->policies[p].name);
        svg_bar_chart_named(f, title, labels, v, SB_COLUMNS, 1.0, 2, "x");
        snprintf(title, sizeof title, "%s: tokens per target forward", r->policies[p].name);
        svg_bar_chart_named(f, title, labels, t, SB_COLUMNS, 1.0, 2, "");
    }
    fputs("</body>\n</html>\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "specd bench: cannot write %s\n", path);
        return 1;
    }
    return 0;
}
