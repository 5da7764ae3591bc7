#include "cli/cli_run.h"
#include "cli/policy_help.h"
#include "policy/options.h"

#include <stdlib.h>
#include <string.h>

typedef struct stream_ctx {
    const specd_tokenizer *tok;
} stream_ctx;

static void stream_tokens(const int32_t *tokens, int32_t n, void *user) {
    const stream_ctx *s = user;
    for (int32_t i = 0; i < n; i++) {
        const char *piece;
        size_t len;
        if (specd_tokenizer_token_to_piece(s->tok, tokens[i], 0, &piece, &len, NULL) == SPECD_OK)
            fwrite(piece, 1, len, stdout);
    }
    fflush(stdout);
}

static int run_open_seq(const cli_engine *e, specd_spec *spec, int stream, int capped,
                        const specd_grammar_processor *gp, cli_result *out);

int cli_run(const cli_engine *e, const cli_options *o, const char *policy, const char *policy_opts,
            const int32_t *ids, int64_t n_ids, int stream, cli_result *out) {
    memset(out, 0, sizeof *out);
    specd_spec *spec = e->spec;
    specd_error err;
    int32_t stop[8];
    char opts[8192];
    policy_opts = cli_policy_options(e, policy, policy_opts, opts, sizeof opts);
    if (!policy_opts) return 1;
    char ropts[8192 + 128];
    const char *hash_key = cli_policy_key_with(policy, SPECD_OPTION_HOST_TOKENIZER_HASH);
    if (hash_key && !specd_options_has_key(policy_opts, hash_key)) {
        /* the policy checks the tokenizer we share with its peer: computed, never typed */
        snprintf(ropts, sizeof ropts, "%s%s%s=%016llx", policy_opts ? policy_opts : "",
                 policy_opts && *policy_opts ? "," : "", hash_key,
                 (unsigned long long)e->tokenizer_hash);
        policy_opts = ropts;
    }
    specd_seq_params p = cli_seq_params(o, e, policy, policy_opts, stop);
    /* The context holds the prompt, what is generated and one step's drafts: a prompt that does
     * not fit is refused before any prefill, and -n is capped to what fits (the run then ends
     * with reason "length" instead of failing when the context is full). */
    int64_t room = (int64_t)e->n_ctx - n_ids - (o->max_draft + 1);
    if (room < 1) {
        fprintf(stderr,
                "specd: the prompt of %lld tokens does not fit the context of %d tokens (with "
                "room for one step of %d drafts)\n",
                (long long)n_ids, e->n_ctx, o->max_draft);
        return 1;
    }
    int capped = p.max_tokens > room;
    if (capped) p.max_tokens = (int32_t)room;
    specd_grammar_processor *gp = NULL;
    if (e->grammar) {
        int drafts = o->grammar_drafts && strcmp(policy, "none") != 0; /* plain stays plain */
        if (specd_grammar_processor_create(e->grammar, drafts, &gp, &err) != SPECD_OK) {
            fprintf(stderr, "specd: %s\n", err.message);
            return 1;
        }
        p.processor = specd_grammar_processor_ops(gp);
    }
    if (specd_spec_seq_open(spec, 0, ids, n_ids, &p, &err) != SPECD_OK) {
        fprintf(stderr, "specd: %s\n", err.message);
        specd_grammar_processor_destroy(gp);
        return 1;
    }
    int rc = run_open_seq(e, spec, stream, capped, gp, out);
    specd_spec_seq_close(spec, 0);
    specd_grammar_processor_destroy(gp);
    return rc;
}

/* Runs the open sequence 0 to its end and fills out. */
static int run_open_seq(const cli_engine *e, specd_spec *spec, int stream, int capped,
                        const specd_grammar_processor *gp, cli_result *out) {
    specd_error err;
    stream_ctx sc = {.tok = e->tok};
    specd_status st = specd_spec_run(spec, 0, e->ctx, 0, stream ? stream_tokens : NULL, &sc,
                                     &out->run, &err);
    if (st != SPECD_OK) {
        fprintf(stderr, "specd: generation failed: %s\n", err.message);
        return 1;
    }
    int64_t n;
    const int32_t *toks = specd_spec_seq_output(spec, 0, &n);
    out->tokens = malloc((size_t)(n ? n : 1) * sizeof *out->tokens);
    if (!out->tokens) {
        fprintf(stderr, "specd: out of memory\n");
        return 1;
    }
    memcpy(out->tokens, toks, (size_t)n * sizeof *toks);
    out->n_tokens = n;
    if (stream) {
        int stopped = n > 0 && specd_tokenizer_is_eog(e->tok, toks[n - 1]);
        fprintf(stderr, "\nstop reason: %s\n",
                stopped ? "stop token"
                : capped ? "length (the context is full)"
                         : "length");
    }
    specd_spec_seq_stats(spec, 0, &out->seq, NULL);
    if (gp) specd_grammar_processor_get_stats(gp, &out->grammar);
    return 0;
}

void cli_result_free(cli_result *r) {
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

double cli_acceptance_rate(const specd_seq_stats *s) {
    return s->n_draft_tokens ? (double)s->n_accepted / (double)s->n_draft_tokens : 0.0;
}

double cli_mean_accepted(const specd_seq_stats *s) {
    return s->n_drafts ? (double)s->n_accepted / (double)s->n_drafts : 0.0;
}

double cli_tpf(const cli_result *r) {
    return r->run.n_steps ? (double)r->run.n_emitted / (double)r->run.n_steps : 0.0;
}

double cli_decode_tps(const cli_result *r) {
    return r->run.decode_ns ? (double)r->run.n_emitted * 1e9 / (double)r->run.decode_ns : 0.0;
}
