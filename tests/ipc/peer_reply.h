/* The answer of a scripted peer (a fake daemon on a ZeroMQ ROUTER socket) to one request: the
 * envelope and the bodies it points at, kept together so that they live as long as the reply. */
#ifndef SPECD_TESTS_IPC_PEER_REPLY_H
#define SPECD_TESTS_IPC_PEER_REPLY_H

#include <stdint.h>

#include "ipc/frame.h"
#include "ipc/schema_hash.h"

typedef struct peer_reply {
    SpecdWire__Envelope e;
    SpecdWire__HelloOk ok;
    SpecdWire__Pong pong;
    SpecdWire__Ack ack;
    SpecdWire__Draft draft;
    SpecdWire__BufferRef ref;
    uint64_t shape[2];
} peer_reply;

/* A drafter's reply to q: HELLO_OK (this instance) to a HELLO, PONG to a PING, ACK to anything
 * else; a caller answers a PROPOSE with peer_reply_draft or peer_reply_draft_q. */
static inline void peer_reply_init(peer_reply *r, const SpecdWire__Envelope *q, uint64_t instance) {
    const SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    const SpecdWire__HelloOk ok = SPECD_WIRE__HELLO_OK__INIT;
    const SpecdWire__Pong pong = SPECD_WIRE__PONG__INIT;
    const SpecdWire__Ack ack = SPECD_WIRE__ACK__INIT;
    const SpecdWire__Draft draft = SPECD_WIRE__DRAFT__INIT;
    const SpecdWire__BufferRef ref = SPECD_WIRE__BUFFER_REF__INIT;
    r->e = e;
    r->ok = ok;
    r->pong = pong;
    r->ack = ack;
    r->draft = draft;
    r->ref = ref;
    r->e.request_id = q->request_id;
    if (q->body_case == SPECD_WIRE__ENVELOPE__BODY_HELLO) {
        r->ok.major = SPECD_IPC_MAJOR;
        r->ok.schema_hash = SPECD_IPC_SCHEMA_HASH;
        r->ok.role = SPECD_WIRE__ROLE__ROLE_DRAFTER;
        r->ok.instance = instance;
        r->e.body_case = SPECD_WIRE__ENVELOPE__BODY_HELLO_OK;
        r->e.hello_ok = &r->ok;
    } else if (q->body_case == SPECD_WIRE__ENVELOPE__BODY_PING) {
        r->e.body_case = SPECD_WIRE__ENVELOPE__BODY_PONG;
        r->e.pong = &r->pong;
    } else {
        r->e.body_case = SPECD_WIRE__ENVELOPE__BODY_ACK;
        r->e.ack = &r->ack;
    }
}

/* Makes the reply the draft of n tokens for the proposal p (no q). */
static inline void peer_reply_draft(peer_reply *r, const SpecdWire__Propose *p, size_t n,
                                    const uint32_t *tokens) {
    r->draft.seq_id = p->seq_id;
    r->draft.step = p->step;
    r->draft.n_tokens = n;
    r->draft.tokens = (uint32_t *)tokens;
    r->e.body_case = SPECD_WIRE__ENVELOPE__BODY_DRAFT;
    r->e.draft = &r->draft;
}

/* The same with its q: n rows of vocab f32 in the buffer desc (published as seq), from offset. */
static inline void peer_reply_draft_q(peer_reply *r, const SpecdWire__Propose *p, size_t n,
                                      const uint32_t *tokens, SpecdWire__BufferDesc *desc,
                                      uint64_t vocab, uint64_t seq, uint64_t offset) {
    peer_reply_draft(r, p, n, tokens);
    r->shape[0] = n;
    r->shape[1] = vocab;
    r->ref.buffer_id = desc->buffer_id;
    r->ref.n_shape = 2;
    r->ref.shape = r->shape;
    r->ref.dtype = SPECD_WIRE__DTYPE__DTYPE_F32;
    r->ref.seq = seq;
    r->ref.offset = offset;
    r->draft.q = &r->ref;
    r->draft.q_buffer = desc;
}

#endif
