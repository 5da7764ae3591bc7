#include "session/remote_verify.h"

#include "common/alloc.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "specd/ipc.h"
#include "specd/sampling.h"

#include <string.h>

/* What the host needs to check the daemon's answers for one sequence: the keyed sample of the row
 * the daemon decided at (its emitted token there is a keyed sample under this seed and position),
 * and whether the sequence still verifies remotely. */
typedef struct rseq {
    int32_t seq;
    uint64_t seed;
    specd_sampler *sampler;
    int distrusted; /* the daemon answered inconsistently: decided here from then on */
} rseq;

struct specd_rverify {
    specd_ipc_client *client;
    rseq *seqs;
    size_t n_seqs, cap_seqs;
    specd_ipc_buffer *buf;
    int32_t n_vocab, max_rows;
    int was_down;
    uint32_t ids[SPECD_MAX_DRAFT + 1];
    specd_ipc_verify_result res;
};

static void went_down(specd_rverify *r, const specd_error *e) {
    if (!r->was_down)
        specd_log(SPECD_LOG_WARN, "spec: verifier unavailable (%s); verifying in-process",
                  e->message);
    r->was_down = 1;
}

void specd_rverify_destroy(specd_rverify *r) {
    if (!r) return;
    specd_ipc_client_destroy(r->client); /* before the buffer it borrows */
    for (size_t i = 0; i < r->n_seqs; i++) specd_sampler_destroy(r->seqs[i].sampler);
    specd_free(r->seqs);
    specd_ipc_buffer_destroy(r->buf);
    specd_free(r);
}

specd_status specd_rverify_create(const specd_spec_params *sp, specd_rverify **out,
                                  specd_error *err) {
    if (sp->verifier_timeout_ms < 1 || sp->verifier_timeout_ms > 60000)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "spec: verifier_timeout_ms %d is outside [1, 60000]",
                          sp->verifier_timeout_ms);
    specd_rverify *r = specd_alloc_array(1, sizeof *r);
    if (!r) return specd_fail(err, SPECD_E_NOMEM, "spec: out of memory for the verifier client");
    r->n_vocab = sp->n_vocab;
    r->max_rows = sp->max_draft + 1;
    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = sp->verifier_endpoint;
    p.name = "verifier";
    p.timeout_ms = sp->verifier_timeout_ms;
    p.retry_ms = 500;
    size_t bytes = (size_t)r->max_rows * (size_t)sp->n_vocab * sizeof(float);
    if (bytes + 4096 > p.max_frame) p.max_frame = bytes + 4096;
    specd_ipc_fingerprint fp = {.vocab_size = (uint32_t)sp->n_vocab,
                                .tokenizer_hash = sp->verifier_tokenizer_hash};
    specd_error e;
    specd_status st = specd_ipc_client_create(&p, SPECD_IPC_ROLE_VERIFIER, &fp, &r->client, &e);
    if (st == SPECD_OK) st = specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, bytes, 0, &r->buf, &e);
    if (st != SPECD_OK) {
        specd_rverify_destroy(r);
        return specd_fail(err, st, "spec: verifier endpoint %s: %s",
                          sp->verifier_endpoint ? sp->verifier_endpoint : "(default)", e.message);
    }
    /* Attaching connects. A daemon that is not up, or that refuses our Hello (a daemon for
     * another model), is a dead peer: steps are decided here until a matching one answers (the
     * buffer is shared on connect). One that refuses the buffer itself is a setup error. */
    st = specd_ipc_client_attach_buffer(r->client, r->buf, &e);
    if (st == SPECD_E_INVALID_ARG || st == SPECD_E_UNSUPPORTED) {
        specd_rverify_destroy(r);
        return specd_fail(err, st, "spec: verifier at %s refused the session: %s",
                          sp->verifier_endpoint ? sp->verifier_endpoint : "(default)", e.message);
    }
    if (st != SPECD_OK) went_down(r, &e);
    *out = r;
    return SPECD_OK;
}

float *specd_rverify_logits(const specd_rverify *r) { return specd_ipc_buffer_data(r->buf); }

static rseq *find_rseq(specd_rverify *r, int32_t seq) {
    for (size_t i = 0; i < r->n_seqs; i++)
        if (r->seqs[i].seq == seq) return &r->seqs[i];
    return NULL;
}

specd_status specd_rverify_open(specd_rverify *r, int32_t seq, const int32_t *prompt,
                                int64_t n_prompt, const specd_seq_params *p, specd_error *err) {
    if (p->rule == SPECD_ACCEPT_REJECTION || p->tau != 0.0f)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "spec: a remote verifier decides under the greedy and coupled rules "
                          "only (rejection sampling needs the draft distributions, which the "
                          "verify request does not carry)");
    if (p->sampling.n_bias > 0)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "spec: a remote verifier cannot apply a logit bias");
    specd_ipc_seq_params sq = {
        .seq_id = (uint64_t)seq,
        .prompt = (const uint32_t *)prompt,
        .n_prompt = (size_t)n_prompt,
        .sampling = {.temperature = p->rule == SPECD_ACCEPT_GREEDY ? 0.0f
                                                                   : p->sampling.temperature,
                     .top_k = (uint32_t)p->sampling.top_k,
                     .top_p = p->sampling.top_p,
                     .min_p = p->sampling.min_p},
        .seed = p->seed,
        .max_draft = (uint32_t)(r->max_rows - 1),
        .rule = p->rule}; /* rejection was refused above */
    rseq *rs = find_rseq(r, seq);
    if (!rs) {
        if (r->n_seqs == r->cap_seqs) {
            size_t cap = r->cap_seqs ? 2 * r->cap_seqs : 8;
            rseq *ns = specd_alloc_array(cap, sizeof *ns);
            if (!ns) return specd_fail(err, SPECD_E_NOMEM, "spec: out of memory");
            if (r->n_seqs) memcpy(ns, r->seqs, r->n_seqs * sizeof *ns);
            specd_free(r->seqs);
            r->seqs = ns;
            r->cap_seqs = cap;
        }
        rs = &r->seqs[r->n_seqs++];
        *rs = (rseq){.seq = seq};
    }
    specd_sampler_destroy(rs->sampler);
    rs->sampler = NULL;
    rs->distrusted = 0;
    rs->seed = p->seed;
    specd_sampling_params check = p->sampling;
    if (p->rule == SPECD_ACCEPT_GREEDY) check.temperature = 0.0f;
    SPECD_TRY(specd_sampler_create(&check, r->n_vocab, &rs->sampler, err));
    specd_error e;
    specd_status st = specd_ipc_client_open_seq(r->client, &sq, &e);
    /* recorded by the client even when the daemon is down or refuses our Hello: opened there on
     * reconnect to a matching daemon */
    if (st != SPECD_OK && st != SPECD_E_PEER && st != SPECD_E_TIMEOUT && st != SPECD_E_MISMATCH)
        return specd_fail(err, st, "spec: verifier: %s", e.message);
    if (st != SPECD_OK) went_down(r, &e);
    return SPECD_OK;
}

void specd_rverify_close(specd_rverify *r, int32_t seq) {
    if (!r) return;
    rseq *rs = find_rseq(r, seq);
    if (rs && !rs->distrusted) specd_ipc_client_close_seq(r->client, (uint64_t)seq, NULL);
    if (rs) {
        specd_sampler_destroy(rs->sampler);
        *rs = r->seqs[--r->n_seqs];
    }
}

/* The daemon's answer does not agree with what this host can check itself: the sequence leaves
 * the daemon (its history there, and the client's copy, took the answer) and every later step of
 * it is decided here, with the same keyed engine, so the output stays the plain one. */
static void distrust(specd_rverify *r, rseq *rs, const char *why) {
    specd_log(SPECD_LOG_WARN,
              "spec: the verifier's answer for sequence %d is inconsistent (%s); verifying it "
              "in-process from now on",
              rs->seq, why);
    rs->distrusted = 1;
    specd_ipc_client_close_seq(r->client, (uint64_t)rs->seq, NULL);
}

specd_status specd_rverify_chain(specd_rverify *r, int32_t seq, uint64_t step,
                                 const int32_t *draft, int32_t k, const float *logits,
                                 int32_t *emitted, int32_t *n_emitted, int32_t *n_accepted,
                                 int *fatal, specd_error *err) {
    *fatal = 0;
    if (k < 1 || k + 1 > r->max_rows)
        return specd_fail(err, SPECD_E_INTERNAL, "spec: %d drafts for the verifier", k);
    rseq *rs = find_rseq(r, seq);
    if (!rs) return specd_fail(err, SPECD_E_STATE, "spec: sequence %d is not open remotely", seq);
    if (rs->distrusted)
        return specd_fail(err, SPECD_E_PROTOCOL, "spec: sequence %d verifies in-process", seq);
    uint64_t n_hist, hist_hash;
    if (specd_ipc_client_history(r->client, (uint64_t)seq, &n_hist, &hist_hash, NULL) != SPECD_OK)
        return specd_fail(err, SPECD_E_STATE, "spec: sequence %d has no remote history", seq);
    float *data = specd_ipc_buffer_data(r->buf);
    size_t row_bytes = (size_t)r->n_vocab * sizeof(float);
    if (logits != data) memcpy(data, logits, (size_t)(k + 1) * row_bytes);
    for (int32_t i = 0; i < k; i++) r->ids[i] = (uint32_t)draft[i];
    specd_error e;
    uint64_t pub;
    specd_ipc_ref ref;
    uint64_t shape[2] = {(uint64_t)k + 1, (uint64_t)r->n_vocab};
    specd_status st = specd_ipc_buffer_publish(r->buf, NULL, &pub, &e);
    if (st == SPECD_OK) st = specd_ipc_buffer_ref(r->buf, 0, 2, shape, SPECD_IPC_F32, pub, &ref, &e);
    if (st == SPECD_OK)
        st = specd_ipc_client_verify(r->client, (uint64_t)seq, step, r->ids, (size_t)k, &ref,
                                     &r->res, &e);
    if (st != SPECD_OK) {
        went_down(r, &e);
        return specd_fail(err, st, "spec: verifier: %s", e.message);
    }
    const specd_ipc_verify_result *v = &r->res;
    int ok = v->accepted <= (uint32_t)k && v->n_emitted == (size_t)v->accepted + 1;
    for (size_t i = 0; ok && i < v->n_emitted; i++)
        ok = v->emitted[i] < (uint32_t)r->n_vocab && (i >= v->accepted || v->emitted[i] == r->ids[i]);
    if (!ok) {
        distrust(r, rs, "an impossible outcome");
        return specd_fail(err, SPECD_E_PROTOCOL, "spec: verifier answered an impossible outcome "
                          "(%u of %d drafts accepted, %zu tokens)", v->accepted, k, v->n_emitted);
    }
    /* The keyed check: the token emitted at the first row not accepted is that row's keyed
     * sample under this sequence's seed and position; one row's sample, cheap beside a step. */
    int32_t keyed;
    specd_sample_key key = {.seed = rs->seed, .sequence = (uint32_t)seq,
                            .position = (uint32_t)(n_hist + v->accepted)};
    specd_status cst = specd_sampler_sample(rs->sampler, data + (size_t)v->accepted * r->n_vocab,
                                            r->n_vocab, key, &keyed, &e);
    if (cst != SPECD_OK || (uint32_t)keyed != v->emitted[v->accepted]) {
        distrust(r, rs, "its token disagrees with the keyed sample");
        return specd_fail(err, SPECD_E_PROTOCOL, "spec: verifier's answer fails the keyed check");
    }
    if (r->was_down) specd_log(SPECD_LOG_WARN, "spec: verifier is back; verifying remotely");
    r->was_down = 0;
    for (size_t i = 0; i < v->n_emitted; i++) emitted[i] = (int32_t)v->emitted[i];
    *n_emitted = (int32_t)v->n_emitted;
    *n_accepted = (int32_t)v->accepted;
    return SPECD_OK;
}

void specd_rverify_commit(specd_rverify *r, int32_t seq, const int32_t *tokens, int32_t n) {
    rseq *rs = find_rseq(r, seq);
    if (!rs || rs->distrusted) return;
    for (int32_t i = 0; i < n && i <= SPECD_MAX_DRAFT; i++) r->ids[i] = (uint32_t)tokens[i];
    specd_error e;
    if (specd_ipc_client_commit(r->client, (uint64_t)seq, r->ids, (size_t)n, &e) != SPECD_OK)
        went_down(r, &e);
}
