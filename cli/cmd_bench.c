/* specd bench spec-bench FILE: Spec-Bench's leaderboard for specd's policies on its own CPU (or
 * CUDA) runtime. Every question's turns run through the chat template; a second turn's prompt
 * carries the side's own first answer. Plain decoding and each policy run in one process with the
 * same seeds, alternating over --repeat rounds (cli/ab_rounds.h); speedups are decode tokens per
 * second against plain decoding, per group as Spec-Bench reports them. */
#include "cli/ab_report.h"
#include "cli/ab_rounds.h"
#include "cli/commands.h"
#include "cli/policy_help.h"
#include "cli/specbench_tally.h"
#include "specd/metrics.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { MAX_POLICIES = 16 };

static void usage(FILE *out) {
    fprintf(out,
            "usage: specd bench spec-bench FILE --policy NAME [--policy NAME ...] [options]\n\n"
            "  FILE                 Spec-Bench's question.jsonl (question_id, category, turns);\n"
            "                       the benchmark's data is not shipped (docs/benchmarks.md)\n"
            "  --policy NAME        a policy to measure (repeat for more rows); a --policy-opts\n"
            "                       after it applies to it\n"
            "  --limit N            at most N questions per group, in file order (default all)\n"
            "  --groups LIST        only these groups: MT,Trans,Sum,QA,Math,RAG (default all)\n"
            "  --repeat R           rounds per turn, alternating which side goes first; each side's\n"
            "                       median run counts (default 1)\n"
            "  --json OUT           the leaderboard and every turn's figures as JSON\n"
            "  --report OUT.html    a page with the leaderboard and per-group charts\n\n");
    cli_print_shared_help(out);
}

static int parse_groups(const char *list, unsigned *mask) {
    *mask = 0;
    char buf[128];
    if (strlen(list) >= sizeof buf) {
        fprintf(stderr, "specd bench: --groups list too long\n");
        return 1;
    }
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int g = 0; g < SPECBENCH_GROUPS; g++)
            if (!strcasecmp(tok, specbench_group_name(g))) found = g;
        if (found < 0) {
            fprintf(stderr, "specd bench: unknown group '%s' (MT, Trans, Sum, QA, Math, RAG)\n",
                    tok);
            return 1;
        }
        *mask |= 1u << found;
    }
    if (!*mask)
        fprintf(stderr, "specd bench: --groups names no group (MT, Trans, Sum, QA, Math, RAG)\n");
    return *mask ? 0 : 1;
}

/* A conversation's tokens: the user turns so far with this side's answers between them. */
static int encode_turns(const cli_engine *e, const specbench_question *q, int turn,
                        char *const *answers, int32_t **ids, int64_t *n_ids) {
    specd_chat_message msgs[2 * SPECBENCH_MAX_TURNS];
    size_t n = 0;
    for (int t = 0; t <= turn; t++) {
        msgs[n++] = (specd_chat_message){.role = "user", .content = q->turns[t]};
        if (t < turn) msgs[n++] = (specd_chat_message){.role = "assistant", .content = answers[t]};
    }
    specd_error err;
    size_t need = 0;
    specd_tokenizer_encode_chat(e->tok, msgs, n, 1, SPECD_TOKENIZE_ADD_SPECIAL, NULL, 0, &need,
                                NULL);
    int32_t *out = malloc((need ? need : 1) * sizeof *out);
    if (!out || specd_tokenizer_encode_chat(e->tok, msgs, n, 1, SPECD_TOKENIZE_ADD_SPECIAL, out,
                                            need, &need, &err) != SPECD_OK) {
        fprintf(stderr, "specd bench: question %lld turn %d: %s\n", q->id, turn + 1,
                out ? err.message : "out of memory");
        free(out);
        return 1;
    }
    *ids = out;
    *n_ids = (int64_t)need;
    return 0;
}

/* The answer as the next turn's assistant message: its text without the closing stop token. */
static char *answer_text(const cli_engine *e, const cli_result *r) {
    int64_t n = r->n_tokens;
    while (n > 0 && specd_tokenizer_is_eog(e->tok, r->tokens[n - 1])) n--;
    specd_error err;
    size_t len;
    char *text = ab_decode_text(e->tok, r->tokens, n, 0, &len, &err);
    if (text && !text[0]) { /* the template wants some content: an empty answer stays empty */
        free(text);
        text = strdup(" ");
    }
    return text;
}

static void add(sb_tally *t, const cli_result *r, int identical) {
    t->tokens += r->run.n_emitted;
    t->forwards += r->run.n_steps;
    t->ns += r->run.decode_ns;
    t->turns++;
    t->identical += identical;
    t->lossy |= r->seq.lossy;
    specd_seq_stats_add(&t->seq, &r->seq);
}

static int same(const cli_result *a, const cli_result *b) {
    return a->n_tokens == b->n_tokens &&
           !memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof *a->tokens);
}

/* Runs one question's turns for every side and adds them up. */
static int run_question(const cli_engine *e, const cli_options *o, const ab_rounds *rounds,
                        sb_results *res, int qi) {
    const specbench_question *q = &res->set->items[qi];
    int n_sides = 1 + res->n_policies, rc = 0;
    char *answers[1 + MAX_POLICIES][SPECBENCH_MAX_TURNS] = {{0}};
    for (int t = 0; t < q->n_turns && !rc; t++) {
        ab_side sides[1 + MAX_POLICIES] = {{0}};
        int32_t *ids[1 + MAX_POLICIES] = {0};
        for (int s = 0; s < n_sides && !rc; s++) {
            sides[s].policy = s ? res->policies[s - 1].name : "none";
            sides[s].policy_opts = s ? res->policies[s - 1].opts : NULL;
            rc = encode_turns(e, q, t, answers[s], &ids[s], &sides[s].n_ids);
            sides[s].ids = ids[s];
        }
        if (!rc) rc = ab_run_rounds(rounds, e, o, sides, n_sides);
        for (int s = 0; s < n_sides && !rc; s++) {
            int identical = same(&sides[0].result, &sides[s].result) && sides[s].stable &&
                            sides[0].stable;
            sb_tally *col = s ? &res->spec[(size_t)(s - 1) * SB_COLUMNS] : res->plain;
            add(&col[q->group], &sides[s].result, identical);
            add(&col[SB_OVERALL], &sides[s].result, identical);
            *sb_turn_at(res, qi, t, s) = (sb_turn){.prompt_tokens = sides[s].n_ids,
                                                   .tokens = sides[s].result.run.n_emitted,
                                                   .forwards = sides[s].result.run.n_steps,
                                                   .ns = sides[s].result.run.decode_ns,
                                                   .identical = identical};
            if (s && !identical && res->lossless && !sides[s].result.seq.lossy)
                fprintf(stderr, "DIVERGED: question %lld turn %d: %s differs from plain "
                                "decoding\n", q->id, t + 1, sides[s].policy);
            if (t + 1 < q->n_turns && !(answers[s][t] = answer_text(e, &sides[s].result))) {
                fprintf(stderr, "specd bench: cannot decode an answer\n");
                rc = 1;
            }
        }
        for (int s = 0; s < n_sides; s++) {
            cli_result_free(&sides[s].result);
            free(ids[s]);
        }
    }
    for (int s = 0; s < n_sides; s++)
        for (int t = 0; t < SPECBENCH_MAX_TURNS; t++) free(answers[s][t]);
    return rc;
}

static int run_all(const cli_options *o, sb_results *res) {
    cli_engine e;
    int rc = cli_engine_open(&e, o);
    if (rc) return rc;
    ab_rounds rounds = {0};
    rc = ab_rounds_open(&rounds, &e, o, res->repeat);
    for (int qi = 0; qi < res->set->n && !rc; qi++) {
        const specbench_question *q = &res->set->items[qi];
        fprintf(stderr, "[%d/%d] question %lld (%s, %d turn%s)\n", qi + 1, res->set->n, q->id,
                q->category, q->n_turns, q->n_turns == 1 ? "" : "s");
        rc = run_question(&e, o, &rounds, res, qi);
    }
    ab_rounds_close(&rounds);
    cli_engine_close(&e);
    return rc;
}

static int spec_bench(int argc, char **argv) {
    cli_options o;
    cli_options_init(&o);
    sb_policy policies[MAX_POLICIES];
    int n_policies = 0, limit = 0, repeat = 1;
    unsigned groups = (1u << SPECBENCH_GROUPS) - 1;
    const char *path = NULL, *json_path = NULL, *report_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--policy") && i + 1 < argc) {
            if (n_policies == MAX_POLICIES) {
                fprintf(stderr, "specd bench: at most %d policies\n", MAX_POLICIES);
                return 2;
            }
            const char *name = argv[++i];
            int help = cli_policy_help_request(name, NULL);
            if (help >= 0) return help;
            if (!specd_policy_find(name)) {
                fprintf(stderr, "specd bench: unknown policy '%s'\n", name);
                return 2;
            }
            policies[n_policies++] = (sb_policy){.name = name};
            continue;
        }
        if (!strcmp(a, "--policy-opts") && i + 1 < argc) {
            if (!n_policies) {
                fprintf(stderr, "specd bench: --policy-opts goes after the --policy it is for\n");
                return 2;
            }
            policies[n_policies - 1].opts = argv[++i];
            int help = cli_policy_help_request(policies[n_policies - 1].name, argv[i]);
            if (help >= 0) return help;
            continue;
        }
        int rc = cli_parse_shared(&o, argc, argv, &i);
        if (rc < 0) return 2;
        if (rc > 0) continue;
        if ((!strcmp(a, "--limit") || !strcmp(a, "--repeat")) && i + 1 < argc) {
            if (cli_parse_count("specd bench", a, argv[++i], 1, 1000,
                                a[2] == 'l' ? &limit : &repeat))
                return 2;
        } else if (!strcmp(a, "--groups") && i + 1 < argc) {
            if (parse_groups(argv[++i], &groups)) return 2;
        } else if (!strcmp(a, "--json") && i + 1 < argc) {
            json_path = argv[++i];
        } else if (!strcmp(a, "--report") && i + 1 < argc) {
            report_path = argv[++i];
        } else if (a[0] != '-' && !path) {
            path = a;
        } else {
            fprintf(stderr, "specd bench: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!path || !n_policies) {
        fprintf(stderr, "specd bench spec-bench: a question FILE and at least one --policy are "
                        "required\n");
        usage(stderr);
        return 2;
    }
    if (!o.chat) {
        fprintf(stderr, "specd bench spec-bench: questions are chat turns; --raw does not apply\n");
        return 2;
    }
    if ((json_path && cli_check_writable("specd bench", "--json", json_path)) ||
        (report_path && cli_check_writable("specd bench", "--report", report_path)))
        return 2;
    specbench_set set;
    char msg[512];
    if (specbench_load(path, &set, msg, sizeof msg)) {
        fprintf(stderr, "specd bench: %s\n", msg);
        return 2;
    }
    specbench_select(&set, limit, groups);
    if (set.n == 0) {
        fprintf(stderr, "specd bench: no question of the chosen groups in %s\n", path);
        specbench_free(&set);
        return 2;
    }
    sb_results res = {.path = path, .options = &o, .repeat = repeat,
                      .lossless = o.rule != SPECD_ACCEPT_REJECTION && o.tau == 0.0f,
                      .n_policies = n_policies, .policies = policies, .set = &set};
    for (int i = 0; i < set.n; i++) res.questions[set.items[i].group]++;
    res.spec = calloc((size_t)n_policies * SB_COLUMNS, sizeof *res.spec);
    res.turns = calloc((size_t)set.n * SPECBENCH_MAX_TURNS * (size_t)(1 + n_policies),
                       sizeof *res.turns);
    int rc = res.spec && res.turns ? 0 : 1;
    if (rc) fprintf(stderr, "specd bench: out of memory\n");
    if (!rc) {
        fprintf(stderr, "specd bench: Spec-Bench %s, %d questions, %d policies, -n %d, T %g, "
                        "%d round%s\n",
                path, set.n, n_policies, o.n_predict, o.sampling.temperature, repeat,
                repeat == 1 ? "" : "s");
        rc = run_all(&o, &res);
    }
    if (!rc) {
        sb_print(stdout, &res);
        if (json_path) rc |= sb_write_json(json_path, &res);
        if (report_path) rc |= sb_write_report(report_path, &res);
    }
    int diverged = 0;
    for (int p = 0; p < n_policies && !rc; p++) {
        const sb_tally *t = &res.spec[(size_t)p * SB_COLUMNS + SB_OVERALL];
        diverged |= res.lossless && !t->lossy && t->identical != t->turns;
    }
    free(res.spec);
    free(res.turns);
    specbench_free(&set);
    return rc ? 1 : diverged;
}

int specd_cmd_bench(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "spec-bench")) return spec_bench(argc - 1, argv + 1);
    FILE *out = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? stdout
                                                                                     : stderr;
    fprintf(out, "usage: specd bench spec-bench FILE --policy NAME [options]\n"
                 "benchmarks: spec-bench (Spec-Bench's six groups; `specd bench spec-bench --help`)\n");
    return out == stdout ? 0 : 2;
}
