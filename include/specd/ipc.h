/* Host side of the specd protocol (wire schema and message sequence: ipc/specd.proto).
 *
 * A specd_ipc_client talks to one daemon (specd-drafter or specd-verifier) over ZeroMQ
 * (DEALER -> ROUTER, request ids, finite timeouts). Endpoints:
 *   ipc://PATH      default; PATH's directory must be private to the user (mode 0700, owned by us).
 *                   NULL endpoint = ipc://$XDG_RUNTIME_DIR/specd/<name>.sock, or
 *                   ipc:///tmp/specd-<uid>/<name>.sock (the directory is created 0700).
 *   tcp://HOST:PORT only with CURVE keys (curve_server_public + curve_public + curve_secret);
 *                   refused without them.
 *   inproc://NAME   library mode; needs zmq_context shared with the service.
 *
 * Failure is expected: when the daemon does not answer within timeout_ms the client drops its
 * socket (so nothing queued can reach a restarted daemon), reports SPECD_E_TIMEOUT or
 * SPECD_E_PEER, and the caller decodes without it. The next call after retry_ms reconnects, says
 * Hello again and replays the session: attached buffers and open sequences with every token
 * committed so far (the client keeps that history, which is the truth the daemon is rebuilt from).
 * So a daemon killed at any point, restarted or not, never loses or duplicates a commit.
 *
 * Threading: a client is used by one thread at a time.
 */
#ifndef SPECD_IPC_H
#define SPECD_IPC_H

#include "specd/api.h"

#include <stddef.h>
#include <stdint.h>

#include "specd/accept.h"
#include "specd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum specd_ipc_role {
    SPECD_IPC_ROLE_DRAFTER = 1,
    SPECD_IPC_ROLE_VERIFIER = 2
} specd_ipc_role;

/* What both sides must agree on before anything else (checked in Hello). */
typedef struct specd_ipc_fingerprint {
    uint32_t vocab_size;
    uint64_t tokenizer_hash;
} specd_ipc_fingerprint;

typedef struct specd_ipc_params {
    const char *endpoint; /* see above; NULL = default ipc:// endpoint for `name` */
    const char *name;     /* default-endpoint name: "drafter" or "verifier" (default: the role) */
    void *zmq_context;    /* borrowed; NULL = the client makes its own (not for inproc://) */
    int timeout_ms;       /* per request, > 0 (default 1000) */
    int retry_ms;         /* least time between reconnect attempts while down (default 200) */
    int hwm;              /* send/receive high-water mark in messages (default 64) */
    size_t max_frame;     /* largest frame sent or accepted (default 1 MiB) */
    int heartbeat_ivl_ms; /* ZMTP heartbeat interval (default 250) */
    int heartbeat_timeout_ms; /* connection dropped after this long without traffic (default 1500)
                               */
    /* tcp:// only, Z85 text (40 characters): */
    const char *curve_server_public;
    const char *curve_public;
    const char *curve_secret;
} specd_ipc_params;

SPECD_API specd_ipc_params specd_ipc_default_params(void);

/* Writes the default endpoint for `name` into out (cap bytes), creating the private runtime
 * directory if needed. Fails if the directory exists but is not ours or not mode 0700. */
SPECD_API specd_status specd_ipc_default_endpoint(const char *name, char *out, size_t cap, specd_error *err);

typedef struct specd_ipc_sampling {
    float temperature;
    uint32_t top_k; /* 0 = off */
    float top_p;    /* 1 = off */
    float min_p;    /* 0 = off */
} specd_ipc_sampling;

/* How the verifier decides: specd/accept.h's specd_accept_rule itself (COUPLED, the default and
 * zero, is token-identical to plain decoding with the same seed). These names are kept for
 * source compatibility; they are the same enum and values. */
typedef specd_accept_rule specd_ipc_accept_rule;
#define SPECD_IPC_ACCEPT_COUPLED SPECD_ACCEPT_COUPLED
#define SPECD_IPC_ACCEPT_GREEDY SPECD_ACCEPT_GREEDY
#define SPECD_IPC_ACCEPT_REJECTION SPECD_ACCEPT_REJECTION

/* Keyed sampling uses (seed, seq_id truncated to 32 bits, position), position being the index of
 * a token in the sequence's history (prompt first). */
typedef struct specd_ipc_seq_params {
    uint64_t seq_id;
    const uint32_t *prompt; /* borrowed during the call; the client keeps a copy */
    size_t n_prompt;
    specd_ipc_sampling sampling;
    uint64_t seed;
    const char *policy; /* may be NULL */
    uint32_t max_draft; /* 0 = the daemon's default */
    specd_accept_rule rule;
} specd_ipc_seq_params;

typedef struct specd_ipc_stats {
    uint64_t requests, errors, sequences_open, proposes, verifies, commits, buffers_attached;
    uint64_t uptime_ns;
} specd_ipc_stats;

typedef struct specd_ipc_client specd_ipc_client;

/* Makes a client for a peer of the given role. Does not connect yet: the first request does
 * (so a client can be created while the daemon is still starting). Caller owns *out. */
SPECD_API specd_status specd_ipc_client_create(const specd_ipc_params *params, specd_ipc_role peer,
                                     const specd_ipc_fingerprint *model, specd_ipc_client **out,
                                     specd_error *err);
SPECD_API void specd_ipc_client_destroy(specd_ipc_client *client);

/* Connects and says Hello now if not connected (honours retry_ms). SPECD_E_MISMATCH when the
 * daemon refuses our version, schema or model; the message carries its reason. */
SPECD_API specd_status specd_ipc_client_connect(specd_ipc_client *client, specd_error *err);
/* 1 while the last exchange succeeded. */
SPECD_API int specd_ipc_client_connected(const specd_ipc_client *client);
/* Times the client (re)established a session, counting the first. */
SPECD_API uint64_t specd_ipc_client_sessions(const specd_ipc_client *client);

/* Opens a sequence here and on the daemon. The client records it even when the daemon is down,
 * so it is opened there on reconnect. */
SPECD_API specd_status specd_ipc_client_open_seq(specd_ipc_client *client, const specd_ipc_seq_params *p,
                                       specd_error *err);
SPECD_API specd_status specd_ipc_client_close_seq(specd_ipc_client *client, uint64_t seq_id,
                                        specd_error *err);

/* Appends tokens to the sequence's history (always) and sends them to the daemon. A failure to
 * reach the daemon is reported but the history keeps the tokens: they reach it on reconnect. */
SPECD_API specd_status specd_ipc_client_commit(specd_ipc_client *client, uint64_t seq_id,
                                     const uint32_t *tokens, size_t n, specd_error *err);

/* Asks the drafter for a draft after committing `commit` (piggybacked, may be n_commit = 0).
 * Writes at most cap tokens to draft and their count to *n_draft. */
SPECD_API specd_status specd_ipc_client_propose(specd_ipc_client *client, uint64_t seq_id, uint64_t step,
                                      const uint32_t *commit, size_t n_commit, uint32_t *draft,
                                      size_t cap, size_t *n_draft, specd_error *err);

/* As specd_ipc_client_propose, and when the drafter's policy sampled the draft (which rejection
 * sampling must know), its draft distributions: row i of q (room for cap rows of the model's
 * vocab_size floats) is the distribution token i was drawn from, read from the drafter's shared
 * buffer (a sealed memfd it owns, mapped here once; or, from a specd-drafter --q-device cuda, a
 * CUDA IPC buffer opened here once, whose rows are copied device to host), and *has_q is 1; a
 * deterministic draft sets *has_q to 0 and leaves q alone. q may be NULL (then only tokens are
 * returned). A draft whose q was announced but cannot be used (a drafter across tcp://, which
 * cannot share memory with us, rows that are not distributions, content replaced meanwhile, a
 * CUDA buffer that cannot be opened here) comes back empty, with a warning logged once: a sampled
 * draft is never passed off as a deterministic one. */
SPECD_API specd_status specd_ipc_client_propose_q(specd_ipc_client *client, uint64_t seq_id,
                                                  uint64_t step, const uint32_t *commit,
                                                  size_t n_commit, uint32_t *draft, size_t cap,
                                                  size_t *n_draft, float *q, int *has_q,
                                                  specd_error *err);

/* As specd_ipc_client_propose_q for a caller that works on CUDA device cuda_device (>= 0): when
 * the drafter keeps q in a CUDA IPC buffer on that device (specd-drafter --q-device cuda:N) and
 * q_device is not NULL, the rows stay there: *q_device points at them (n_draft rows of vocab_size
 * floats, row-major, in this process's mapping of the drafter's buffer; the legacy default stream
 * has waited on the drafter's event, so work queued on it after this call sees the rows), *has_q
 * is 1 and q is left alone. These rows are not checked here (a device kernel checks its own; a
 * host reader calls specd_ipc_client_fetch_q). They stay valid until the next call on this client
 * that talks to the drafter (which may rewrite or unmap them) or its destruction: work reading
 * them must be finished before. Otherwise *q_device is NULL and q is filled as
 * specd_ipc_client_propose_q fills it. A CUDA buffer of another device than cuda_device, or one
 * that cannot be opened here (no CUDA runtime or device, a stale handle, a shape past its
 * allocation), is an unusable q: drafts dropped, a warning logged once. */
SPECD_API specd_status specd_ipc_client_propose_q_device(specd_ipc_client *client, uint64_t seq_id,
                                                         uint64_t step, const uint32_t *commit,
                                                         size_t n_commit, uint32_t *draft,
                                                         size_t cap, size_t *n_draft, float *q,
                                                         int *has_q, int cuda_device,
                                                         const float **q_device, specd_error *err);
/* The last proposal's rows left on the device (specd_ipc_client_propose_q_device's *q_device),
 * copied to q on the host (n_draft rows of vocab_size floats) and checked as
 * specd_ipc_client_propose_q checks host rows: SPECD_E_PROTOCOL when they are not distributions
 * (the caller then drops the drafts), SPECD_E_STATE when there are none (no such proposal, or a
 * request since). */
SPECD_API specd_status specd_ipc_client_fetch_q(specd_ipc_client *client, float *q,
                                                specd_error *err);

/* Length and FNV-1a hash (over little-endian u32 ids) of what the daemon holds for a sequence. */
SPECD_API specd_status specd_ipc_client_seq_info(specd_ipc_client *client, uint64_t seq_id, uint64_t *length,
                                       uint64_t *tokens_hash, specd_error *err);
/* Length and hash of the client's own history for a sequence (prompt + commits). */
SPECD_API specd_status specd_ipc_client_history(const specd_ipc_client *client, uint64_t seq_id,
                                      uint64_t *length, uint64_t *tokens_hash, specd_error *err);

SPECD_API specd_status specd_ipc_client_stats(specd_ipc_client *client, specd_ipc_stats *out,
                                    specd_error *err);
SPECD_API specd_status specd_ipc_client_ping(specd_ipc_client *client, specd_error *err);

/* ---- shared buffers ----------------------------------------------------------------------
 * One API over two kinds. SHM: a POSIX shared-memory segment, pre-faulted, whose name exists only
 * until the peer has mapped it (the peer unlinks it right after mapping; names of owners that
 * died before that are swept by the next create), so no segment outlives a crash. A peer that
 * connects later (a restarted daemon) reopens it through /proc/<owner pid>/fd. CUDA: a dedicated
 * cudaMalloc allocation exported with cudaIpcGetMemHandle plus an interprocess event that orders
 * the writer's stream before the reader's; peers open the handles once and cache them.
 * Every reference carries the buffer id, offset, shape, dtype and the sequence number returned by
 * specd_ipc_buffer_publish; the peer refuses references that are out of bounds or stale. */
typedef enum specd_ipc_buffer_kind {
    SPECD_IPC_BUFFER_SHM = 0,
    SPECD_IPC_BUFFER_CUDA = 1
} specd_ipc_buffer_kind;

typedef enum specd_ipc_dtype {
    SPECD_IPC_F32 = 0,
    SPECD_IPC_F16 = 1,
    SPECD_IPC_BF16 = 2,
    SPECD_IPC_I32 = 3
} specd_ipc_dtype;

#define SPECD_IPC_REF_MAX_RANK 4

typedef struct specd_ipc_ref {
    uint64_t buffer_id;
    uint64_t offset; /* bytes from the start of the buffer's data */
    uint32_t rank;
    uint64_t shape[SPECD_IPC_REF_MAX_RANK];
    specd_ipc_dtype dtype;
    uint64_t seq;
} specd_ipc_ref;

typedef struct specd_ipc_buffer specd_ipc_buffer;

/* Makes a buffer of `bytes` data bytes. cuda_device is used for SPECD_IPC_BUFFER_CUDA only;
 * SPECD_E_UNSUPPORTED there when specd was built without CUDA or no device is present.
 * Caller owns *out. */
SPECD_API specd_status specd_ipc_buffer_create(specd_ipc_buffer_kind kind, size_t bytes, int cuda_device,
                                     specd_ipc_buffer **out, specd_error *err);
/* Unmaps/frees; peers keep their own mapping (SHM) until they detach. NULL is a no-op. */
SPECD_API void specd_ipc_buffer_destroy(specd_ipc_buffer *buf);
/* Host pointer (SHM) or device pointer (CUDA) to the data; borrowed from buf. */
SPECD_API void *specd_ipc_buffer_data(const specd_ipc_buffer *buf);
SPECD_API size_t specd_ipc_buffer_size(const specd_ipc_buffer *buf);
SPECD_API uint64_t specd_ipc_buffer_id(const specd_ipc_buffer *buf);
SPECD_API specd_ipc_buffer_kind specd_ipc_buffer_kind_of(const specd_ipc_buffer *buf);
/* Declares the content written (for CUDA: records the interprocess event on cuda_stream, a
 * cudaStream_t or NULL for the default stream) and returns the sequence number that references
 * to this content must carry. Earlier sequence numbers become stale. */
SPECD_API specd_status specd_ipc_buffer_publish(specd_ipc_buffer *buf, void *cuda_stream, uint64_t *seq,
                                      specd_error *err);
/* Fills a reference to a row-major tensor at offset in buf's current content. */
SPECD_API specd_status specd_ipc_buffer_ref(const specd_ipc_buffer *buf, uint64_t offset, uint32_t rank,
                                  const uint64_t *shape, specd_ipc_dtype dtype, uint64_t seq,
                                  specd_ipc_ref *out, specd_error *err);

/* Shares buf with the daemon (the client keeps a borrowed pointer: buf must outlive the client
 * or be detached first). Re-shared automatically on reconnect. */
SPECD_API specd_status specd_ipc_client_attach_buffer(specd_ipc_client *client, specd_ipc_buffer *buf,
                                            specd_error *err);
SPECD_API specd_status specd_ipc_client_detach_buffer(specd_ipc_client *client, uint64_t buffer_id,
                                            specd_error *err);

#define SPECD_IPC_MAX_DRAFT 256u

typedef struct specd_ipc_verify_result {
    uint32_t accepted; /* draft tokens accepted */
    size_t n_emitted;  /* accepted + 1 (the correction or bonus token) */
    uint32_t emitted[SPECD_IPC_MAX_DRAFT + 1];
    size_t n_stats;
    float accept_prob[SPECD_IPC_MAX_DRAFT + 1]; /* per examined draft position */
    uint8_t position_accepted[SPECD_IPC_MAX_DRAFT + 1];
} specd_ipc_verify_result;

/* Sends a verify request: the draft (chain order) and the target logits by reference
 * (f32, shape [n_draft + 1, vocab], on the host for the CPU engine). On success the emitted
 * tokens are appended to the sequence's history here and on the verifier (no Commit needed);
 * tokens the host emits without the verifier (its fallback) go through specd_ipc_client_commit. */
SPECD_API specd_status specd_ipc_client_verify(specd_ipc_client *client, uint64_t seq_id, uint64_t step,
                                     const uint32_t *draft, size_t n_draft,
                                     const specd_ipc_ref *target_logits,
                                     specd_ipc_verify_result *out, specd_error *err);
/* As specd_ipc_client_verify, with the draft distributions by reference when q is not NULL
 * (f32, shape [n_draft, vocab]: row i is the distribution draft i was sampled from; the
 * REJECTION rule reads them; in host memory for the CPU engine, or a CUDA IPC buffer next to
 * CUDA logits for a verifier started with --device cuda). */
SPECD_API specd_status specd_ipc_client_verify_q(specd_ipc_client *client, uint64_t seq_id,
                                                 uint64_t step, const uint32_t *draft,
                                                 size_t n_draft,
                                                 const specd_ipc_ref *target_logits,
                                                 const specd_ipc_ref *q,
                                                 specd_ipc_verify_result *out, specd_error *err);

#ifdef __cplusplus
}
#endif
#endif
