/* The session's verifier backends (session/spec_verifier.h): the choice at open, the cpu
 * backend (the acceptance engine on host rows) and the remote one (a specd-verifier daemon). The
 * device backend is session/spec_device.c. */
#include "session/spec_verifier.h"

#include "common/log_internal.h"
#include "common/status_internal.h"
#include "session/spec_device.h"
#include "session/spec_processor.h"

#include <stdio.h>

const spec_verifier_ops *specd_spec_verifier_choose(const specd_spec *spec,
                                                    const specd_seq_params *p) {
    if (spec->rv) return &specd_verifier_remote;
    /* the kernel takes every rule, relaxed tau under REJECTION only (as the engine) */
    if (p->tau != 0.0f && p->rule != SPECD_ACCEPT_REJECTION) return &specd_verifier_cpu;
    return &specd_verifier_device;
}

specd_status specd_spec_seq_host_rows(specd_spec *spec, spec_seq *q, const specd_logits *lg,
                                      int32_t row0, const float **rows, specd_error *err) {
    char what[32];
    snprintf(what, sizeof what, "sequence %d", (int)q->id);
    *rows = NULL;
    if (q->n_step_rows < 1) return SPECD_OK; /* a commit-only step scores no rows */
    if (q->n_proc > 0) return specd_seq_proc_rows(spec, q, lg, row0, what, rows, err);
    int32_t n_flat = 0;
    SPECD_TRY(specd_logits_intake(&spec->scratch, specd_spec_max_step_rows(spec),
                                  spec->params.n_vocab, lg, row0, q->n_step_rows, &q->mask, what,
                                  q->step_gated, &n_flat, rows, err));
    if (n_flat > 0 && !q->warned_gated_nan) {
        q->warned_gated_nan = 1;
        specd_log(SPECD_LOG_WARN,
                  "spec: sequence %d: policy %s's adapter gave NaN/inf logits on %d LoRA-gated "
                  "mask row(s); their proposals are dropped and the base rows decide the step "
                  "(said once per sequence)", (int)q->id, q->ops->name, (int)n_flat);
    }
    return SPECD_OK;
}

void specd_spec_chain_outcome(spec_seq *q, int32_t n_emitted, int32_t n_accepted, int lossy,
                              specd_step_outcome *out) {
    q->keep[0] = 0;
    for (int32_t i = 1; i <= n_accepted; i++) q->keep[i] = q->tree ? 1 + q->tree_path[i - 1] : i;
    *out = (specd_step_outcome){.n_emitted = n_emitted, .emitted = q->emitted,
                                .n_keep = n_accepted + 1, .keep = q->keep,
                                .n_drafted = q->n_draft, .n_accepted = n_accepted,
                                .lossy = lossy};
}

/* The engine's decision of q's [pending | drafts] (a chain, a tree, or a plain step) from host
 * rows, into q->emitted (and q->tree_path). */
static specd_status engine_decide(const specd_spec *spec, spec_seq *q, const float *logits,
                                  int32_t *n_emitted, int32_t *n_accepted, int *lossy,
                                  specd_error *err) {
    int32_t n_vocab = spec->params.n_vocab;
    specd_sample_key key = q->key;
    key.position = (uint32_t)q->n_history;
    *n_accepted = 0;
    *lossy = 0;
    if (q->tree) {
        specd_tree_input in = {.n_nodes = q->n_draft, .parent = q->tree_parent, .token = q->draft,
                               .draft_probs = q->has_q ? q->q : NULL, .q_vocab = n_vocab,
                               .target_logits = logits, .n_vocab = n_vocab, .key = key};
        specd_tree_result res = {.path = q->tree_path, .tokens = q->emitted};
        SPECD_TRY(specd_accept_tree(q->accept, &in, &res, err));
        *n_emitted = res.n_emitted;
        *n_accepted = res.n_accepted;
        *lossy = res.lossy;
    } else if (q->n_draft == 0) {
        SPECD_TRY(specd_sampler_sample(q->sampler, logits, n_vocab, key, &q->emitted[0], err));
        *n_emitted = 1;
    } else {
        specd_chain_input in = {.k = q->n_draft, .draft = q->draft,
                                .draft_probs = q->has_q ? q->q : NULL, .q_vocab = n_vocab,
                                .target_logits = logits, .n_vocab = n_vocab, .key = key};
        specd_chain_result res = {.tokens = q->emitted, .accept_prob = q->accept_prob};
        SPECD_TRY(specd_accept_chain(q->accept, &in, &res, err));
        *n_emitted = res.n_emitted;
        *n_accepted = res.n_accepted;
        *lossy = res.lossy;
    }
    return SPECD_OK;
}

static specd_status cpu_verify(specd_spec *spec, spec_seq *q, const specd_logits *lg,
                               int32_t row0, const spec_decided *decided,
                               specd_step_outcome *out, const float **rows, specd_error *err) {
    (void)decided;
    SPECD_TRY(specd_spec_seq_host_rows(spec, q, lg, row0, rows, err));
    specd_spec_seq_q_to_host(q);
    int32_t n_emitted, n_accepted;
    int lossy;
    SPECD_TRY(engine_decide(spec, q, *rows, &n_emitted, &n_accepted, &lossy, err));
    specd_spec_chain_outcome(q, n_emitted, n_accepted, lossy, out);
    return SPECD_OK;
}

const spec_verifier_ops specd_verifier_cpu = {.name = "cpu", .verify = cpu_verify};

/* ---- remote: a specd-verifier daemon (verifier/remote/) ---- */

static specd_status remote_open(specd_spec *spec, spec_seq *q, const int32_t *prompt,
                                int64_t n_prompt, const specd_seq_params *p, specd_error *err) {
    return specd_rverify_open(spec->rv, q->id, prompt, n_prompt, p, err);
}

static void remote_close(specd_spec *spec, spec_seq *q) { specd_rverify_close(spec->rv, q->id); }

/* The row the client's keyed check reads from CUDA logits, through the logits intake. */
typedef struct check_rows {
    specd_spec *spec;
    const spec_seq *q;
    const specd_logits *lg;
    int32_t row0;
} check_rows;

static specd_status check_row(void *ctx, uint32_t i, const float **row, specd_error *err) {
    const check_rows *c = ctx;
    return specd_logits_intake(&c->spec->rv_check, 1, c->spec->params.n_vocab, c->lg,
                               c->row0 + (int32_t)i, 1, &c->q->mask, "the verifier's row", NULL,
                               NULL, row, err);
}

/* CUDA logits through the daemon's CUDA IPC pool: 1 when it decided. */
static int remote_on_device(specd_spec *spec, spec_seq *q, const specd_logits *lg, int32_t row0,
                            int32_t *n_emitted, int32_t *n_accepted) {
    if (!lg || lg->device != SPECD_DEVICE_CUDA || !q->ops->propose || q->tree ||
        q->n_draft < 1 || q->n_chain != 0 || q->n_step_rows != q->n_draft + 1)
        return 0;
    const float *qrows = !q->has_q ? NULL : q->q_dev ? q->q_dev : q->q;
    check_rows rows = {.spec = spec, .q = q, .lg = lg, .row0 = row0};
    return specd_rverify_chain_device(spec->rv, q->id, (uint64_t)q->stats.n_steps + 1, q->draft,
                                      q->n_draft, lg, row0, check_row, &rows, qrows,
                                      q->has_q && q->q_dev, /* a CUDA drafter's rows, in place */
                                      q->emitted, n_emitted, n_accepted, NULL) == SPECD_OK;
}

/* The daemon decides where it can (its CUDA pool, else host memory); when it does not answer,
 * the engine decides here and the tokens are committed to it, so its history stays the
 * sequence's. */
static specd_status remote_verify(specd_spec *spec, spec_seq *q, const specd_logits *lg,
                                  int32_t row0, const spec_decided *decided,
                                  specd_step_outcome *out, const float **rows, specd_error *err) {
    (void)decided;
    int32_t n_emitted = 0, n_accepted = 0;
    *rows = NULL;
    if (remote_on_device(spec, q, lg, row0, &n_emitted, &n_accepted)) {
        q->stats.n_remote_verified++;
        specd_spec_chain_outcome(q, n_emitted, n_accepted, q->n_draft > 0 && q->tau > 0.0f, out);
        return SPECD_OK;
    }
    SPECD_TRY(specd_spec_seq_host_rows(spec, q, lg, row0, rows, err));
    specd_spec_seq_q_to_host(q);
    int remote = 0, lossy = 0;
    if (q->n_draft > 0 && !q->tree) { /* the verify protocol carries chains */
        int fatal;
        specd_error e;
        specd_status st = specd_rverify_chain(spec->rv, q->id, (uint64_t)q->stats.n_steps + 1,
                                              q->draft, q->n_draft, *rows,
                                              q->has_q ? q->q : NULL, q->emitted, &n_emitted,
                                              &n_accepted, &fatal, &e);
        if (fatal) return specd_fail(err, st, "%s", e.message);
        remote = st == SPECD_OK;
        q->stats.n_remote_verified += remote;
        q->stats.n_remote_fallback += !remote; /* same keyed decision, made here */
    }
    if (!remote) {
        SPECD_TRY(engine_decide(spec, q, *rows, &n_emitted, &n_accepted, &lossy, err));
        specd_rverify_commit(spec->rv, q->id, q->emitted, n_emitted);
    }
    specd_spec_chain_outcome(q, n_emitted, n_accepted, lossy, out);
    return SPECD_OK;
}

const spec_verifier_ops specd_verifier_remote = {.name = "remote", .open = remote_open,
                                                 .close = remote_close, .verify = remote_verify};
