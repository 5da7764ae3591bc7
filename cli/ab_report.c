#include "cli/ab_report.h"
#include "cli/svg_chart.h"
#include "cli/html_out.h"
#include "specd/version.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How much text the page keeps: enough to read a divergence in context without a page that grows
 * with -n. */
enum { CONTEXT_BEFORE_TOKENS = 24, CONTEXT_AFTER_TOKENS = 8, HEAD_TOKENS = 64 };

char *ab_decode_text(const specd_tokenizer *tok, const int32_t *ids, int64_t n, uint32_t flags,
                     size_t *len, specd_error *err) {
    size_t need = 0, got = 0;
    if (n > 0 && specd_tokenizer_decode(tok, ids, (size_t)n, flags, NULL, 0, &need, err) !=
                     SPECD_OK &&
        need == 0)
        return NULL;
    char *buf = malloc(need + 1);
    if (!buf) {
        if (err) {
            err->status = SPECD_E_NOMEM;
            snprintf(err->message, sizeof err->message, "out of memory decoding %lld tokens",
                     (long long)n);
        }
        return NULL;
    }
    if (n > 0 && specd_tokenizer_decode(tok, ids, (size_t)n, flags, buf, need, &got, err) !=
                     SPECD_OK) {
        free(buf);
        return NULL;
    }
    buf[got] = '\0';
    if (len) *len = got;
    return buf;
}

/* ids[from..to) rendered with special tokens shown, as a new NUL-terminated string; text that
 * does not decode is shown empty (the page is a view, the figures do not depend on it). NULL
 * when out of memory. */
static char *render(const specd_tokenizer *tok, const int32_t *ids, int64_t from, int64_t to) {
    if (from < 0) from = 0;
    if (to < from) to = from;
    specd_error err = {0};
    char *text =
        ab_decode_text(tok, ids + from, to - from, SPECD_DETOKENIZE_RENDER_SPECIAL, NULL, &err);
    return text || err.status == SPECD_E_NOMEM ? text : strdup("");
}

double ab_p_cache(int64_t n_emitted, int64_t n_tokens_run) {
    return n_tokens_run > 0 ? (double)n_emitted / (double)n_tokens_run : 0.0;
}

int ab_row_keep_text(ab_row *row, const specd_tokenizer *tok, const int32_t *plain,
                     int64_t n_plain, const int32_t *spec, int64_t n_spec) {
    int64_t head = n_plain < HEAD_TOKENS ? n_plain : HEAD_TOKENS;
    row->output_head = render(tok, plain, 0, head);
    if (!row->output_head) return 1;
    if (row->first_diff < 0) return 0;
    int64_t d = row->first_diff;
    int64_t end_plain = d + CONTEXT_AFTER_TOKENS < n_plain ? d + CONTEXT_AFTER_TOKENS : n_plain;
    int64_t end_spec = d + CONTEXT_AFTER_TOKENS < n_spec ? d + CONTEXT_AFTER_TOKENS : n_spec;
    row->context_before = render(tok, plain, d - CONTEXT_BEFORE_TOKENS, d);
    row->context_plain = render(tok, plain, d, end_plain);
    row->context_spec = render(tok, spec, d, end_spec);
    return !row->context_before || !row->context_plain || !row->context_spec;
}

void ab_row_free_text(ab_row *row) {
    free(row->output_head);
    free(row->context_before);
    free(row->context_plain);
    free(row->context_spec);
    row->output_head = row->context_before = row->context_plain = row->context_spec = NULL;
}

static double speedup(const ab_row *r) { return r->tps_plain > 0 ? r->tps_spec / r->tps_plain : 0.0; }

static const char *rule_name(const cli_options *o) {
    return o->rule == SPECD_ACCEPT_GREEDY ? "greedy" : o->rule == SPECD_ACCEPT_REJECTION ? "rs"
                                                                                      : "coupled";
}


static void write_setup(FILE *f, const ab_setup *s) {
    const cli_options *o = s->options;
    char when[64] = "";
    time_t now = time(NULL);
    struct tm tm_utc;
    if (gmtime_r(&now, &tm_utc)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm_utc);
    fputs("<section id=\"setup\"><h2>Setup</h2><table>\n", f);
    html_row_text(f, "specd", specd_version());
    html_row_text(f, "model", s->model_path);
    html_row_text(f, "policy", o->policy);
    html_row_text(f, "policy options", o->policy_opts ? o->policy_opts : "(defaults)");
    html_row_text(f, "acceptance rule", rule_name(o));
    html_row_number(f, "temperature", o->sampling.temperature, -1);
    html_row_number(f, "top-k", o->sampling.top_k, 0);
    html_row_number(f, "top-p", o->sampling.top_p, -1);
    html_row_number(f, "min-p", o->sampling.min_p, -1);
    html_row_number(f, "relaxed tau", o->tau, -1);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    html_row_text(f, "seed", seed);
    html_row_number(f, "tokens per prompt (-n)", o->n_predict, 0);
    html_row_number(f, "max draft", o->max_draft, 0);
    html_row_number(f, "threads (0 = all)", o->n_threads, 0);
    html_row_text(f, "numerics", cli_numerics_label());
    html_row_text(f, "adaptive guard", o->adaptive ? "on" : "off");
    html_row_text(f, "chat template", o->chat ? "on" : "off");
    html_row_text(f, "remote verifier", o->verifier ? o->verifier : "(in-process)");
    html_row_text(f, "prompts file", s->prompts_path);
    html_row_text(f, "generated", when);
    fputs("</table></section>\n", f);
}

static void write_verdict(FILE *f, const ab_setup *s, const ab_row *rows, int n,
                          const ab_row *all) {
    int same = 0;
    for (int i = 0; i < n; i++) same += rows[i].identical;
    fputs("<section id=\"verdict\"><h2>Verdict</h2><p>", f);
    if (s->lossless) {
        fprintf(f, "<span class=\"%s\">%d of %d prompts token-identical to plain decoding</span>",
                same == n ? "ok" : "bad", same, n);
        fprintf(f, " under the %s rule, which promises identity: %s.", rule_name(s->options),
                same == n ? "lossless as promised" : "a divergence is a bug");
    } else {
        fprintf(f, "<span class=\"lossy\">Rule %s is lossless in distribution only%s</span>: "
                   "%d of %d prompts token-identical (agreement, not a verdict).",
                rule_name(s->options), all->seq.lossy ? " and relaxed (LOSSY)" : "", same, n);
    }
    fputs("</p>\n<table><tr><th>acceptance</th><th>mean accepted</th><th>TPF</th>"
          "<th>p_cache (eq. 4)</th><th>plain tok/s</th><th>spec tok/s</th><th>speedup</th><th>guard off-switches</th>"
          "<th>guard plain steps</th></tr>\n", f);
    fprintf(f, "<tr><td>%.3f</td><td>%.2f</td><td>%.2f</td><td>%.3f</td><td>%.1f</td>"
               "<td>%.1f</td><td>%.2fx</td><td>%lld</td><td>%lld of %lld</td></tr></table>"
               "</section>\n",
            all->acceptance, all->mean_accepted, all->tpf, all->p_cache, all->tps_plain,
            all->tps_spec,
            speedup(all), (long long)all->seq.n_backoffs, (long long)all->seq.n_guard_plain,
            (long long)all->seq.n_steps);
}

static void write_charts(FILE *f, const ab_row *rows, int n, const ab_row *all) {
    double *v = malloc(((size_t)n + SPECD_MAX_DRAFT) * sizeof *v);
    if (!v) return;
    fputs("<section id=\"charts\"><h2>Charts</h2>\n", f);
    for (int i = 0; i < n; i++) v[i] = speedup(&rows[i]);
    svg_bar_chart(f, "Speedup over plain decoding per prompt (line: 1.0x)", "#", v, n, 1.0, 2,
                  "x");
    for (int i = 0; i < n; i++) v[i] = rows[i].tpf;
    svg_bar_chart(f, "Tokens per target forward (TPF) per prompt (line: 1, plain)", "#", v, n,
                  1.0, 2, "");
    int k = 0;
    while (k < SPECD_MAX_DRAFT && all->seq.drafted_at[k] > 0) {
        v[k] = (double)all->seq.accepted_at[k] / (double)all->seq.drafted_at[k];
        k++;
    }
    if (k > 0)
        svg_bar_chart(f, "Acceptance by draft position (all prompts)", "", v, k, -1.0, 2, "");
    else
        fputs("<p>No proposals were drafted, so there is no acceptance by position.</p>\n", f);
    fputs("</section>\n", f);
    free(v);
}

static void quality_cells(FILE *f, const ab_row *r, int agreement, int tasks, int per_prompt) {
    if (r->scored)
        fprintf(f, "<td>%.3f</td><td>%.3f</td>", ab_quality_nll(&r->q_plain),
                ab_quality_nll(&r->q_spec));
    else
        fputs("<td>-</td><td>-</td>", f);
    fprintf(f, "<td>%.3f</td><td>%.3f</td>", ab_quality_repeat_rate(&r->q_plain),
            ab_quality_repeat_rate(&r->q_spec));
    if (agreement)
        fprintf(f, "<td>%.3f</td><td>%.3f</td>", ab_agreement_prefix(&r->agree),
                ab_agreement_positions(&r->agree));
    if (tasks && per_prompt)
        fprintf(f, "<td class=\"%s\">%s</td><td class=\"%s\">%s</td>",
                r->pass_plain ? "ok" : "bad", r->pass_plain ? "pass" : "fail",
                r->pass_spec ? "ok" : "bad", r->pass_spec ? "pass" : "fail");
    else if (tasks)
        fprintf(f, "<td>%lld/%lld</td><td>%lld/%lld</td>", (long long)r->q_plain.passed,
                (long long)r->q_plain.tasks, (long long)r->q_spec.passed,
                (long long)r->q_spec.tasks);
}

/* Quality beside speed: what a lossy outcome costs; for a lossless one both sides agree. */
static void write_quality(FILE *f, const ab_setup *s, const ab_row *rows, int n,
                          const ab_row *all) {
    int agreement = s->options->sampling.temperature == 0.0f;
    fputs("<section id=\"quality\"><h2>Quality</h2>\n<p>NLL: mean -log p per generated token "
          "under the base model at temperature 1. rep4: the fraction of the output's 4-token "
          "windows that repeat an earlier one.", f);
    if (agreement)
        fputs(" Agreement with plain greedy decoding: up to the first difference (prefix) and "
              "position by position.", f);
    if (s->tasks) fputs(" Task: the output passes the item's rule (bench/tasks/README.md).", f);
    fputs("</p>\n<table><tr><th>#</th><th class=\"l\">prompt</th><th>NLL plain</th>"
          "<th>NLL spec</th><th>rep4 plain</th><th>rep4 spec</th>", f);
    if (agreement) fputs("<th>agreement prefix</th><th>agreement positions</th>", f);
    if (s->tasks) fputs("<th>task plain</th><th>task spec</th>", f);
    fputs("</tr>\n", f);
    for (int i = 0; i <= n; i++) {
        const ab_row *r = i < n ? &rows[i] : all;
        if (i < n) {
            fprintf(f, "<tr><td>%d</td><td class=\"l\">", i + 1);
            html_text(f, r->prompt, strlen(r->prompt));
            fputs("</td>", f);
        } else {
            fputs("<tr><th></th><th class=\"l\">overall</th>", f);
        }
        quality_cells(f, r, agreement, s->tasks, i < n);
        fputs("</tr>\n", f);
    }
    fputs("</table></section>\n", f);
}

static void write_prompt(FILE *f, int i, const ab_row *r, int lossless) {
    fprintf(f, "<h3 id=\"prompt-%d\">#%d ", i + 1, i + 1);
    html_text(f, r->prompt, strlen(r->prompt));
    fputs("</h3>\n", f);
    if (r->identical) {
        fprintf(f, "<p class=\"ok\">identical: %lld tokens</p>\n", (long long)r->n_plain);
    } else {
        fprintf(f, "<p class=\"%s\">first difference at output token %lld (plain %lld tokens, "
                   "speculative %lld)%s</p>\n",
                lossless ? "bad" : "lossy", (long long)r->first_diff, (long long)r->n_plain, (long long)r->n_spec,
                lossless ? "" : "; the rule agrees in distribution only, so this is allowed");
        if (r->context_before) {
            fputs("<p>plain:</p><pre>\n", f);
            html_text(f, r->context_before, strlen(r->context_before));
            fputs("<mark class=\"plain\">", f);
            html_text(f, r->context_plain, strlen(r->context_plain));
            fputs("</mark></pre>\n<p>speculative:</p><pre>\n", f);
            html_text(f, r->context_before, strlen(r->context_before));
            fputs("<mark class=\"spec\">", f);
            html_text(f, r->context_spec, strlen(r->context_spec));
            fputs("</mark></pre>\n", f);
        }
    }
    if (r->output_head) {
        fputs("<details><summary>plain output, opening</summary><pre>\n", f);
        html_text(f, r->output_head, strlen(r->output_head));
        fputs("</pre></details>\n", f);
    }
}

static void write_prompts(FILE *f, const ab_row *rows, int n, int lossless) {
    fputs("<section id=\"prompts\"><h2>Per prompt</h2>\n<table><tr><th>#</th>"
          "<th class=\"l\">prompt</th><th>identical</th><th>acceptance</th><th>mean accepted</th>"
          "<th>TPF</th><th>plain tok/s</th><th>spec tok/s</th><th>speedup</th></tr>\n", f);
    for (int i = 0; i < n; i++) {
        const ab_row *r = &rows[i];
        fprintf(f, "<tr><td><a href=\"#prompt-%d\">%d</a></td><td class=\"l\">", i + 1, i + 1);
        html_text(f, r->prompt, strlen(r->prompt));
        fprintf(f, "</td><td class=\"%s\">%s</td><td>%.3f</td><td>%.2f</td><td>%.2f</td>"
                   "<td>%.1f</td><td>%.1f</td><td>%.2fx</td></tr>\n",
                r->identical ? "ok" : lossless ? "bad" : "lossy", r->identical ? "yes" : "no",
                r->acceptance,
                r->mean_accepted, r->tpf, r->tps_plain, r->tps_spec, speedup(r));
    }
    fputs("</table>\n", f);
    for (int i = 0; i < n; i++) write_prompt(f, i, &rows[i], lossless);
    fputs("</section>\n", f);
}

int ab_report_write(const char *path, const ab_setup *setup, const ab_row *rows, int n,
                    const ab_row *overall) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "specd ab: cannot write %s\n", path);
        return 1;
    }
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>specd ab: ",
          f);
    html_text(f, setup->options->policy, strlen(setup->options->policy));
    fprintf(f, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>specd A/B report: policy ",
            html_page_style);
    html_text(f, setup->options->policy, strlen(setup->options->policy));
    fputs(" against plain decoding</h1>\n", f);
    write_setup(f, setup);
    write_verdict(f, setup, rows, n, overall);
    write_charts(f, rows, n, overall);
    write_quality(f, setup, rows, n, overall);
    write_prompts(f, rows, n, setup->lossless);
    fputs("</body>\n</html>\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "specd ab: cannot write %s\n", path);
        return 1;
    }
    return 0;
}
