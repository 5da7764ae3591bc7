/* Frame codec: one ZeroMQ message = one packed specd_wire.Envelope (ipc/specd.proto).
 *
 * Decoding treats the bytes as hostile: the frame size is checked before unpacking, protobuf-c
 * unpacks into a fixed arena owned by the decoder (a bounded allocator: a frame can never make us
 * allocate more than the arena), and every count, index, enum, float and shape is checked before
 * the envelope is handed on. A frame that fails any check is refused with SPECD_E_FORMAT and a
 * message naming the field. */
#ifndef SPECD_IPC_FRAME_H
#define SPECD_IPC_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "ipc/specd.pb-c.h"
#include "specd/ipc.h" /* SPECD_IPC_MAX_DRAFT: most draft positions in one message */
#include "specd/status.h"

#define SPECD_IPC_MAJOR 1u
/* Largest frame accepted by default: messages carry ids, counts and references, not tensors. */
#define SPECD_IPC_FRAME_MAX_DEFAULT ((size_t)1 << 20)
/* Most dimensions of a buffer reference. */
#define SPECD_IPC_MAX_RANK 4u
/* Longest shm name, including the leading '/'. */
#define SPECD_IPC_SHM_NAME_MAX 64u
/* cudaIpcMemHandle_t / cudaIpcEventHandle_t size (CUDA_IPC_HANDLE_SIZE). */
#define SPECD_IPC_CUDA_HANDLE_BYTES 64u

typedef struct specd_ipc_decoder specd_ipc_decoder;

/* max_frame: largest frame accepted (0 = SPECD_IPC_FRAME_MAX_DEFAULT). The unpack arena is sized
 * from it (packed varints expand at most 8x, plus per-message overhead). Caller owns *out. */
specd_status specd_ipc_decoder_create(size_t max_frame, specd_ipc_decoder **out, specd_error *err);
void specd_ipc_decoder_destroy(specd_ipc_decoder *dec);
size_t specd_ipc_decoder_max_frame(const specd_ipc_decoder *dec);

/* Decodes and validates one frame. *out is borrowed from the decoder: valid until the next decode
 * on it or its destroy. On failure *out is left untouched. */
specd_status specd_ipc_frame_decode(specd_ipc_decoder *dec, const void *bytes, size_t len,
                                    const SpecdWire__Envelope **out, specd_error *err);

/* Checks an unpacked envelope (also used on what we are about to send, in tests). */
specd_status specd_ipc_envelope_validate(const SpecdWire__Envelope *env, specd_error *err);

/* Bytes of one element of a wire dtype; 0 for an unknown dtype. */
size_t specd_ipc_dtype_size(int dtype);

/* Packs env into a new specd_alloc'd buffer (caller owns *out, release with specd_free) when its
 * packed size is at most max_frame. */
specd_status specd_ipc_frame_encode(const SpecdWire__Envelope *env, size_t max_frame, uint8_t **out,
                                    size_t *out_len, specd_error *err);

/* The accept rule an OpenSeq asks for: the wire's AcceptRule has specd_accept_rule's values
 * (checked at compile time in frame.c), so both directions are casts; absent means COUPLED. The
 * decoder has already refused a value that is not a rule. */
static inline specd_accept_rule specd_ipc_rule_from_wire(const SpecdWire__OpenSeq *m) {
    return m->has_rule ? (specd_accept_rule)m->rule : SPECD_ACCEPT_COUPLED;
}
static inline SpecdWire__AcceptRule specd_ipc_rule_to_wire(specd_accept_rule rule) {
    return (SpecdWire__AcceptRule)rule;
}
/* 1 when rule is one of specd_accept_rule's values. */
static inline int specd_ipc_rule_valid(int64_t rule) {
    return rule == SPECD_ACCEPT_COUPLED || rule == SPECD_ACCEPT_GREEDY ||
           rule == SPECD_ACCEPT_REJECTION;
}

/* FNV-1a over token ids (little-endian u32), as exchanged in SeqInfo. */
uint64_t specd_ipc_tokens_hash(const uint32_t *tokens, size_t n);

#endif
