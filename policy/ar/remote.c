/* remote: proposals come from a specd-drafter daemon over ZeroMQ. The host keeps decoding when
 * the daemon is slow, dead, restarting or refusing us (a daemon for another model: its Hello
 * refusal is a dead peer too): a failed propose is a plain step, and the ipc client replays the
 * sequence's history when a matching daemon is back, so the output never depends on it.
 * Under rejection sampling the drafter's draft distributions q come back with a sampled draft
 * (through its shared buffer; specd_ipc_client_propose_q_device), so the session verifies it
 * against the q it was drawn from. A drafter that keeps q on the host's CUDA device
 * (--q-device cuda[:N]) leaves the rows there: the session reads them on the device
 * (policy ABI 3 device_q) and fetches them (fetch_q) only for a host reader. One client per
 * sequence, so the drafter's buffer for this sequence changes only at this sequence's next
 * propose. */
#include "policy/builtin.h"
#include "policy/ar/remote_q.h"

#include "common/alloc.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "policy/options.h"
#include "specd/device.h"
#include "specd/ipc.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct remote_state {
    specd_ipc_client *client;
    specd_ipc_seq_params seq;
    char drafter_policy[128];
    int opened;
    int64_t n_sent;    /* history tokens the client holds for this sequence */
    uint64_t step;
    int was_down;
    uint32_t *scratch; /* max_draft + 1 history ids, then the draft */
    int32_t max_draft;
    int want_q; /* rejection sampling: a sampled draft must come with its q */
    int q_cuda_device; /* the host's CUDA device: a drafter's q there is read in place */
    const float *q_dev; /* the last proposal's q rows on that device, or NULL */
} remote_state;

static atomic_uint_fast64_t n_q_device, n_q_fetched;

uint64_t specd_remote_q_device_count(void) { return (uint64_t)atomic_load(&n_q_device); }
uint64_t specd_remote_q_fetch_count(void) { return (uint64_t)atomic_load(&n_q_fetched); }

/* The daemon is unusable for now (gone, silent, or refusing our Hello): decode plainly. */
static int peer_unusable(specd_status st) {
    return st == SPECD_E_PEER || st == SPECD_E_TIMEOUT || st == SPECD_E_MISMATCH;
}

static void went_down(remote_state *s, const specd_error *e) {
    if (!s->was_down)
        specd_log(SPECD_LOG_WARN, "policy remote: drafter unavailable (%s); decoding plainly",
                  e->message);
    s->was_down = 1;
}

typedef struct remote_opts {
    char endpoint[512], policy[128], tokenizer_hash[32];
    int32_t timeout_ms;
} remote_opts;

static const specd_policy_option option_rows[] = {
    {.key = "endpoint", .kind = SPECD_OPTION_STRING, .offset = offsetof(remote_opts, endpoint),
     .size = sizeof((remote_opts *)0)->endpoint,
     .help = "where the specd-drafter daemon listens (ipc://... or tcp://...; none: the "
             "drafter's default endpoint)"},
    {.key = "policy", .kind = SPECD_OPTION_STRING, .offset = offsetof(remote_opts, policy),
     .size = sizeof((remote_opts *)0)->policy, .dflt = "ngram",
     .help = "the name of the daemon's policy to use"},
    {.key = "timeout_ms", .kind = SPECD_OPTION_INT, .offset = offsetof(remote_opts, timeout_ms),
     .dflt = "200", .min = 1, .max = 60000,
     .help = "wait for an answer; past it the step decodes plainly"},
    {.key = "tokenizer_hash", .kind = SPECD_OPTION_STRING,
     .offset = offsetof(remote_opts, tokenizer_hash),
     .size = sizeof((remote_opts *)0)->tokenizer_hash, .dflt = "0",
     .flags = SPECD_OPTION_HOST_TOKENIZER_HASH,
     .help = "must equal the daemon's (hex; specd fills it in from the model)"},
};
const specd_option_table specd_remote_options = SPECD_OPTION_TABLE(option_rows);

static specd_status remote_create(const specd_policy_env *env, const char *options, void **out,
                                  specd_error *err) {
    remote_opts o;
    SPECD_TRY(specd_options_parse_table("remote", &specd_remote_options, NULL, options, &o, err));
    const char *endpoint = o.endpoint, *policy = o.policy, *hash = o.tokenizer_hash;
    const int32_t timeout_ms = o.timeout_ms;
    char *hash_end;
    errno = 0;
    unsigned long long tokenizer_hash = strtoull(hash, &hash_end, 16);
    if (errno || *hash_end || hash[0] == '-')
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy remote: tokenizer_hash=%s is not a hexadecimal number", hash);
    remote_state *s = specd_alloc_array(1, sizeof *s);
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "policy remote: out of memory");
    s->max_draft = env->max_draft;
    s->want_q = env->rule == SPECD_ACCEPT_REJECTION;
    /* the device the session verifies on (as the remote verifier's pool: index 0 for a CPU
     * spec, whose CUDA logits' device is not named) */
    s->q_cuda_device = env->device_set && env->device == SPECD_DEVICE_CUDA ? env->device_index : 0;
    s->scratch = specd_alloc_array((size_t)env->max_draft * 2 + 2, sizeof(uint32_t));
    memcpy(s->drafter_policy, policy, sizeof o.policy);
    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = endpoint[0] ? endpoint : NULL;
    p.name = "drafter";
    p.timeout_ms = timeout_ms;
    specd_ipc_fingerprint fp = {.vocab_size = (uint32_t)env->n_vocab,
                                .tokenizer_hash = tokenizer_hash};
    specd_status st = s->scratch ? specd_ipc_client_create(&p, SPECD_IPC_ROLE_DRAFTER, &fp,
                                                           &s->client, err)
                                 : specd_fail(err, SPECD_E_NOMEM, "policy remote: out of memory");
    if (st != SPECD_OK) {
        specd_free(s->scratch);
        specd_free(s);
        return st;
    }
    s->seq = (specd_ipc_seq_params){
        .seq_id = env->seq_key,
        .sampling = {.temperature = env->sampling.temperature,
                     .top_k = (uint32_t)env->sampling.top_k,
                     .top_p = env->sampling.top_p,
                     .min_p = env->sampling.min_p},
        .seed = env->seed,
        .policy = s->drafter_policy,
        .max_draft = (uint32_t)env->max_draft,
        .rule = env->rule};
    *out = s;
    return SPECD_OK;
}

static void remote_destroy(void *state) {
    remote_state *s = state;
    if (!s) return;
    if (s->opened) specd_ipc_client_close_seq(s->client, s->seq.seq_id, NULL);
    specd_ipc_client_destroy(s->client);
    specd_free(s->scratch);
    specd_free(s);
}

static specd_status remote_propose(void *state, const int32_t *history, int64_t n,
                                   int32_t max_draft, int32_t *draft, int32_t *n_draft, float *q,
                                   int *has_q, specd_error *err) {
    remote_state *s = state;
    *n_draft = 0;
    *has_q = 0;
    s->q_dev = NULL;
    specd_error e;
    if (!s->opened) {
        /* the client keeps the prompt even when the daemon is down, and opens it there later */
        s->seq.prompt = (const uint32_t *)history;
        s->seq.n_prompt = (size_t)n;
        specd_status st = specd_ipc_client_open_seq(s->client, &s->seq, &e);
        if (st != SPECD_OK && !peer_unusable(st))
            return specd_fail(err, st, "policy remote: %s", e.message);
        s->opened = 1;
        s->n_sent = n;
        if (st != SPECD_OK) {
            went_down(s, &e); /* with the reason: later attempts only say "down" */
            return SPECD_OK;
        }
    }
    if (n < s->n_sent)
        return specd_fail(err, SPECD_E_INTERNAL, "policy remote: history shrank from %lld to %lld",
                          (long long)s->n_sent, (long long)n);
    size_t n_commit = (size_t)(n - s->n_sent);
    if (n_commit > (size_t)s->max_draft + 1) {
        /* A gap: steps decoded without asking us (the adaptive guard's plain steps, a drafter
         * that was down). The drafter catches up by a commit of the whole gap; the client keeps
         * it even when that fails, and replays it with the history on reconnect. */
        /* (token ids are >= 0: int32_t and uint32_t views of them agree) */
        specd_ipc_client_commit(s->client, s->seq.seq_id, (const uint32_t *)history + s->n_sent,
                                n_commit, &e);
        s->n_sent = n;
        n_commit = 0;
    }
    for (size_t i = 0; i < n_commit; i++) s->scratch[i] = (uint32_t)history[s->n_sent + (int64_t)i];
    uint32_t *out = s->scratch + s->max_draft + 1;
    size_t got = 0;
    int got_q = 0;
    /* q has room for max_draft rows (the session sizes it so: SPECD_POLICY_NEEDS_Q) */
    const float *q_dev = NULL;
    specd_status st = specd_ipc_client_propose_q_device(
        s->client, s->seq.seq_id, s->step++, s->scratch, n_commit, out, (size_t)s->max_draft,
        &got, s->want_q ? q : NULL, &got_q, s->q_cuda_device, &q_dev, &e);
    s->n_sent = n; /* the client appended the commit to its history, reachable or not */
    if (st != SPECD_OK) {
        went_down(s, &e);
        return SPECD_OK; /* a plain step: the output does not depend on the drafter */
    }
    if (s->was_down) specd_log(SPECD_LOG_WARN, "policy remote: drafter is back; drafting again");
    s->was_down = 0;
    for (size_t i = 0; i < got && i < (size_t)max_draft; i++) draft[i] = (int32_t)out[i];
    *n_draft = (int32_t)(got < (size_t)max_draft ? got : (size_t)max_draft);
    *has_q = got_q && *n_draft > 0; /* row i of q is draft[i]'s, so truncation keeps it */
    s->q_dev = *has_q ? q_dev : NULL;
    if (s->q_dev) atomic_fetch_add(&n_q_device, 1);
    return SPECD_OK;
}

/* policy ABI 3 device_q / fetch_q (specd/policy.h) */
static const float *remote_device_q(const void *state) {
    return ((const remote_state *)state)->q_dev;
}

static specd_status remote_fetch_q(void *state, float *q, specd_error *err) {
    remote_state *s = state;
    if (!s->q_dev)
        return specd_fail(err, SPECD_E_STATE, "policy remote: no draft distributions on the device");
    specd_status st = specd_ipc_client_fetch_q(s->client, q, err);
    atomic_fetch_add(&n_q_fetched, 1);
    if (st == SPECD_OK) s->q_dev = NULL; /* on the host now */
    return st;
}

const specd_policy_ops specd_policy_remote = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .name = "remote",
    .flags = SPECD_POLICY_NEEDS_Q, /* the drafter's q under rejection sampling */
    .options_help = "endpoint=ipc://... (default: the drafter's default endpoint), policy=ngram "
                    "(what the daemon runs), timeout_ms=200, tokenizer_hash=HEX",
    .create = remote_create,
    .destroy = remote_destroy,
    .propose = remote_propose,
    .device_q = remote_device_q,
    .fetch_q = remote_fetch_q,
};
