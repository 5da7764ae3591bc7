/* specd generate: text from a prompt, plainly or speculatively, with figures on stderr. With a
 * policy it also runs plain decoding in the same process, so the speedup and the identity of the
 * two outputs are measured, not assumed. */
#include "cli/ab_report.h" /* ab_p_cache */
#include "cli/cli_run.h"
#include "cli/commands.h"
#include "cli/policy_help.h"
#include "specd/isd.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out, "usage: specd generate -p PROMPT [options]\n\n");
    cli_print_shared_help(out);
}

static void print_summary(const cli_engine *e, const cli_options *o, const cli_result *spec,
                          const cli_result *plain) {
    const specd_seq_stats *s = &spec->seq;
    fprintf(stderr, "\n--- policy %s (max draft %d, rule %s%s)\n", o->policy, o->max_draft,
            o->rule == SPECD_ACCEPT_GREEDY ? "greedy"
            : o->rule == SPECD_ACCEPT_REJECTION ? "rs" : "coupled",
            s->lossy ? ", LOSSY" : "");
    char opts[8192];
    const char *shown = cli_policy_options(e, o->policy, o->policy_opts, opts, sizeof opts);
    if (shown && *shown) fprintf(stderr, "policy options: %s\n", shown);
    fprintf(stderr, "acceptance rate %.3f (%lld of %lld proposals), mean accepted length %.2f\n",
            cli_acceptance_rate(s), (long long)s->n_accepted, (long long)s->n_draft_tokens,
            cli_mean_accepted(s));
    fprintf(stderr, "acceptance by position:");
    for (int i = 0; i < o->max_draft && s->drafted_at[i] > 0; i++)
        fprintf(stderr, " %.2f", (double)s->accepted_at[i] / (double)s->drafted_at[i]);
    fprintf(stderr, "\ntokens per target forward %.2f\n", cli_tpf(spec));
    if (cli_policy_flags(o->policy) & SPECD_POLICY_FIGURE_P_CACHE)
        fprintf(stderr, "p_cache (WeDLM eq. 4) %.3f (%lld tokens emitted / %lld token rows run), "
                        "TPF %.2f\n",
                ab_p_cache(s->n_emitted, s->n_tokens_run), (long long)s->n_emitted,
                (long long)s->n_tokens_run, cli_tpf(spec));
    if (spec->run.n_steps > 0)
        fprintf(stderr, "per step: target forward %.2f ms, policy %.2f ms (%.1f%% of the "
                        "forward)\n",
                (double)spec->run.forward_ns / 1e6 / (double)spec->run.n_steps,
                (double)s->propose_ns / 1e6 / (double)spec->run.n_steps,
                spec->run.forward_ns
                    ? 100.0 * (double)s->propose_ns / (double)spec->run.forward_ns
                    : 0.0);
    if (o->adaptive)
        fprintf(stderr, "adaptive guard: turned drafting off %lld times; %lld of %lld steps plain\n",
                (long long)s->n_backoffs, (long long)s->n_guard_plain, (long long)s->n_steps);
    if (o->adaptive && s->n_shadow_drafts > 0)
        fprintf(stderr, "shadow drafts while backed off: %lld, %lld of their tokens matched "
                        "the output\n",
                (long long)s->n_shadow_drafts, (long long)s->n_shadow_accepted);
    if (cli_policy_flags(o->policy) & SPECD_POLICY_FIGURE_STRIDED_TPF) {
        double rates[SPECD_MAX_DRAFT];
        int32_t n = specd_isd_accept_rates(s, rates, SPECD_MAX_DRAFT);
        fprintf(stderr, "paper 000 App. B eq. 5 from the measured per-position acceptance: TPF %.2f\n",
                specd_isd_tpf_formula(rates, n));
    }
    if (o->verifier)
        fprintf(stderr, "remote verifier %s: %lld drafting steps verified there, %lld in-process "
                        "(it did not answer)\n", o->verifier, (long long)s->n_remote_verified,
                (long long)s->n_remote_fallback);
    double tps_spec = cli_decode_tps(spec), tps_plain = cli_decode_tps(plain);
    fprintf(stderr, "decode: speculative %.1f tok/s, plain %.1f tok/s, speedup %.2fx\n", tps_spec,
            tps_plain, tps_plain > 0 ? tps_spec / tps_plain : 0.0);
    int same = spec->n_tokens == plain->n_tokens &&
               !memcmp(spec->tokens, plain->tokens, (size_t)spec->n_tokens * sizeof(int32_t));
    fprintf(stderr, "output identical to plain decoding: %s\n", same ? "yes" : "no");
}

int specd_cmd_generate(int argc, char **argv) {
    cli_options o;
    cli_options_init(&o);
    const char *prompt = NULL;
    for (int i = 1; i < argc; i++) {
        int rc = cli_parse_shared(&o, argc, argv, &i);
        if (rc < 0) return 2;
        if (rc > 0) continue;
        if ((!strcmp(argv[i], "-p") || !strcmp(argv[i], "--prompt")) && i + 1 < argc) {
            prompt = argv[++i];
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "specd generate: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    const int help = cli_policy_help_request(o.policy, o.policy_opts);
    if (help >= 0) return help;
    if (!prompt) {
        fprintf(stderr, "specd generate: -p PROMPT is required\n");
        return 2;
    }
    if (!specd_policy_find(o.policy)) {
        fprintf(stderr, "specd generate: unknown policy '%s'\n", o.policy);
        return 2;
    }
    cli_engine e;
    int open_rc = cli_engine_open(&e, &o);
    if (open_rc) return open_rc;
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    int rc = cli_encode_prompt(&e, prompt, o.chat, &ids, &n_ids);
    cli_result spec = {0}, plain = {0};
    int speculative = strcmp(o.policy, "none") != 0;
    if (!rc) rc = cli_run(&e, &o, o.policy, o.policy_opts, ids, n_ids, 1, &spec);
    if (!rc) {
        fputc('\n', stdout);
        fprintf(stderr, "prefill %lld tokens: %.1f tok/s; decode %lld tokens: %.1f tok/s (numerics %s)\n",
                (long long)spec.run.n_prompt,
                spec.run.prefill_ns ? (double)(spec.run.n_prompt - 1) * 1e9 / (double)spec.run.prefill_ns : 0.0,
                (long long)spec.run.n_emitted, cli_decode_tps(&spec),
                specd_numerics_name(specd_context_numerics(e.ctx)));
    }
    if (!rc && speculative) {
        rc = cli_run(&e, &o, "none", NULL, ids, n_ids, 0, &plain);
        if (!rc) print_summary(&e, &o, &spec, &plain);
    }
    cli_result_free(&spec);
    cli_result_free(&plain);
    free(ids);
    cli_engine_close(&e);
    return rc;
}
