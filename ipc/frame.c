#include "ipc/frame.h"

/* One accept-rule enum (include/specd/accept.h): the wire's AcceptRule is the same values, so the
 * conversions in frame.h are casts. */
_Static_assert((int)SPECD_WIRE__ACCEPT_RULE__ACCEPT_COUPLED == (int)SPECD_ACCEPT_COUPLED,
               "wire AcceptRule COUPLED");
_Static_assert((int)SPECD_WIRE__ACCEPT_RULE__ACCEPT_GREEDY == (int)SPECD_ACCEPT_GREEDY,
               "wire AcceptRule GREEDY");
_Static_assert((int)SPECD_WIRE__ACCEPT_RULE__ACCEPT_REJECTION == (int)SPECD_ACCEPT_REJECTION,
               "wire AcceptRule REJECTION");

#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/status_internal.h"

/* Bump allocator over one fixed block: protobuf-c gets memory only from here, so the budget bounds
 * what any frame can make us allocate, and decoding allocates nothing from the heap. */
typedef struct arena {
    uint8_t *base;
    size_t cap;
    size_t used;
    int exhausted;
} arena;

struct specd_ipc_decoder {
    size_t max_frame;
    arena mem;
    ProtobufCAllocator allocator;
    SpecdWire__Envelope *current;
};

static void *arena_alloc(void *data, size_t size) {
    arena *a = data;
    size_t start = (a->used + 15u) & ~(size_t)15u, end;
    if (start < a->used || !specd_add_ok(start, size, &end) || end > a->cap) {
        a->exhausted = 1;
        return NULL;
    }
    a->used = end;
    return a->base + start;
}

static void arena_free(void *data, void *ptr) {
    (void)data;
    (void)ptr; /* released all at once by the next decode */
}

specd_status specd_ipc_decoder_create(size_t max_frame, specd_ipc_decoder **out, specd_error *err) {
    if (!out) return specd_fail(err, SPECD_E_INVALID_ARG, "decoder: out is NULL");
    if (max_frame == 0) max_frame = SPECD_IPC_FRAME_MAX_DEFAULT;
    /* A packed 1-byte varint becomes a 4-byte (u32) or 8-byte (u64) element; sub-messages cost
     * their struct size (under 256 bytes) for at least 2 wire bytes. 8x + 64 KiB covers both. */
    size_t cap;
    if (max_frame > ((size_t)1 << 31) || !specd_mul_ok(max_frame, 8, &cap))
        return specd_fail(err, SPECD_E_INVALID_ARG, "decoder: max_frame %zu too large", max_frame);
    cap += (size_t)64 << 10;
    specd_ipc_decoder *d = specd_alloc_array(1, sizeof *d);
    if (!d) return specd_fail(err, SPECD_E_NOMEM, "decoder: out of memory");
    d->mem.base = specd_alloc(cap);
    if (!d->mem.base) {
        specd_free(d);
        return specd_fail(err, SPECD_E_NOMEM, "decoder: arena of %zu bytes", cap);
    }
    d->mem.cap = cap;
    d->max_frame = max_frame;
    d->allocator.alloc = arena_alloc;
    d->allocator.free = arena_free;
    d->allocator.allocator_data = &d->mem;
    *out = d;
    return SPECD_OK;
}

void specd_ipc_decoder_destroy(specd_ipc_decoder *dec) {
    if (!dec) return;
    specd_free(dec->mem.base);
    specd_free(dec);
}

size_t specd_ipc_decoder_max_frame(const specd_ipc_decoder *dec) {
    return dec->max_frame;
}

size_t specd_ipc_dtype_size(int dtype) {
    switch (dtype) {
    case SPECD_WIRE__DTYPE__DTYPE_F32: return 4;
    case SPECD_WIRE__DTYPE__DTYPE_F16: return 2;
    case SPECD_WIRE__DTYPE__DTYPE_BF16: return 2;
    case SPECD_WIRE__DTYPE__DTYPE_I32: return 4;
    default: return 0;
    }
}

uint64_t specd_ipc_tokens_hash(const uint32_t *tokens, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) {
            h ^= (tokens[i] >> (8 * b)) & 0xffu;
            h *= 0x100000001b3ULL;
        }
    return h;
}

/* ---- semantic checks, one per message kind ------------------------------------------------ */

static specd_status check_ref(const SpecdWire__BufferRef *r, const char *what, specd_error *err) {
    if (!r) return SPECD_OK;
    size_t es = specd_ipc_dtype_size((int)r->dtype);
    if (es == 0)
        return specd_fail(err, SPECD_E_FORMAT, "%s: unknown dtype %d", what, (int)r->dtype);
    if (r->n_shape == 0 || r->n_shape > SPECD_IPC_MAX_RANK)
        return specd_fail(err, SPECD_E_FORMAT, "%s: rank %zu outside 1..%u", what, r->n_shape,
                          SPECD_IPC_MAX_RANK);
    size_t bytes = es;
    for (size_t i = 0; i < r->n_shape; i++) {
        if (r->shape[i] == 0 || r->shape[i] > SIZE_MAX ||
            !specd_mul_ok(bytes, (size_t)r->shape[i], &bytes))
            return specd_fail(err, SPECD_E_FORMAT, "%s: shape[%zu] = %llu is zero or overflows",
                              what, i, (unsigned long long)r->shape[i]);
    }
    size_t end;
    if (r->offset > SIZE_MAX || !specd_add_ok((size_t)r->offset, bytes, &end))
        return specd_fail(err, SPECD_E_FORMAT, "%s: offset %llu + %zu bytes overflows", what,
                          (unsigned long long)r->offset, bytes);
    if (r->offset % es != 0)
        return specd_fail(err, SPECD_E_FORMAT, "%s: offset %llu not aligned to %zu", what,
                          (unsigned long long)r->offset, es);
    return SPECD_OK;
}

static specd_status check_draft(size_t n_tokens, size_t n_parents, const int32_t *parents,
                                const char *what, specd_error *err) {
    if (n_tokens > SPECD_IPC_MAX_DRAFT)
        return specd_fail(err, SPECD_E_FORMAT, "%s: %zu draft tokens, at most %u", what, n_tokens,
                          SPECD_IPC_MAX_DRAFT);
    if (n_parents == 0) return SPECD_OK;
    if (n_parents != n_tokens)
        return specd_fail(err, SPECD_E_FORMAT, "%s: %zu parents for %zu tokens", what, n_parents,
                          n_tokens);
    /* Parents precede children, so the tree is acyclic and can be walked in order. */
    for (size_t i = 0; i < n_parents; i++)
        if (parents[i] < -1 || parents[i] >= (int64_t)i)
            return specd_fail(err, SPECD_E_FORMAT, "%s: parents[%zu] = %d not in [-1, %zu)", what,
                              i, parents[i], i);
    return SPECD_OK;
}

static specd_status check_sampling(const SpecdWire__SamplingParams *s, specd_error *err) {
    if (!isfinite(s->temperature) || s->temperature < 0.0f)
        return specd_fail(err, SPECD_E_FORMAT, "open_seq: temperature %g not finite and >= 0",
                          (double)s->temperature);
    if (s->has_top_p && (!isfinite(s->top_p) || s->top_p <= 0.0f || s->top_p > 1.0f))
        return specd_fail(err, SPECD_E_FORMAT, "open_seq: top_p %g not in (0, 1]",
                          (double)s->top_p);
    if (s->has_min_p && (!isfinite(s->min_p) || s->min_p < 0.0f || s->min_p > 1.0f))
        return specd_fail(err, SPECD_E_FORMAT, "open_seq: min_p %g not in [0, 1]",
                          (double)s->min_p);
    return SPECD_OK;
}

static specd_status check_desc(const SpecdWire__BufferDesc *d, specd_error *err) {
    if (d->kind == SPECD_WIRE__BUFFER_KIND__BUFFER_SHM) {
        const char *n = d->shm_name;
        size_t len = n ? strlen(n) : 0;
        if (len < 2 || len >= SPECD_IPC_SHM_NAME_MAX || n[0] != '/')
            return specd_fail(err, SPECD_E_FORMAT, "buffer %llu: bad shm name",
                              (unsigned long long)d->buffer_id);
        for (size_t i = 1; i < len; i++) {
            char c = n[i];
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
                return specd_fail(err, SPECD_E_FORMAT, "buffer %llu: shm name has character %d",
                                  (unsigned long long)d->buffer_id, (int)(unsigned char)c);
        }
    } else if (d->kind == SPECD_WIRE__BUFFER_KIND__BUFFER_CUDA) {
        if (!d->has_cuda_mem_handle || d->cuda_mem_handle.len != SPECD_IPC_CUDA_HANDLE_BYTES ||
            !d->has_cuda_event_handle || d->cuda_event_handle.len != SPECD_IPC_CUDA_HANDLE_BYTES)
            return specd_fail(err, SPECD_E_FORMAT, "buffer %llu: CUDA handles must be %u bytes",
                              (unsigned long long)d->buffer_id, SPECD_IPC_CUDA_HANDLE_BYTES);
        if (d->has_cuda_device && d->cuda_device < 0)
            return specd_fail(err, SPECD_E_FORMAT, "buffer %llu: cuda_device %d",
                              (unsigned long long)d->buffer_id, d->cuda_device);
    } else {
        return specd_fail(err, SPECD_E_FORMAT, "buffer %llu: unknown kind %d",
                          (unsigned long long)d->buffer_id, (int)d->kind);
    }
    if (d->bytes == 0 || d->bytes > ((uint64_t)1 << 40))
        return specd_fail(err, SPECD_E_FORMAT, "buffer %llu: size %llu out of range",
                          (unsigned long long)d->buffer_id, (unsigned long long)d->bytes);
    return SPECD_OK;
}

/* Both peers run the same schema (its hash is checked in Hello), so a field this schema does not
 * know is an attack or a bug, never a newer peer: refuse it (it would also not survive a
 * re-encode, e.g. field number 0). Walks every present sub-message. */
static int has_unknown_fields(const ProtobufCMessage *m, int depth) {
    if (!m) return 0;
    if (m->n_unknown_fields || depth > 8) return 1;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(const void *)(base + f->quantifier_offset) != f->id)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(const void *)(base + f->quantifier_offset);
            ProtobufCMessage *const *arr =
                *(ProtobufCMessage *const *const *)(const void *)(base + f->offset);
            for (size_t j = 0; j < n; j++)
                if (has_unknown_fields(arr[j], depth + 1)) return 1;
        } else if (has_unknown_fields(*(ProtobufCMessage *const *)(const void *)(base + f->offset),
                                      depth + 1)) {
            return 1;
        }
    }
    return 0;
}

specd_status specd_ipc_envelope_validate(const SpecdWire__Envelope *e, specd_error *err) {
    if (has_unknown_fields(&e->base, 0))
        return specd_fail(err, SPECD_E_FORMAT, "envelope: field unknown to this schema");
    switch (e->body_case) {
    case SPECD_WIRE__ENVELOPE__BODY_HELLO:
        if ((unsigned)e->hello->role > SPECD_WIRE__ROLE__ROLE_VERIFIER)
            return specd_fail(err, SPECD_E_FORMAT, "hello: unknown role %d", (int)e->hello->role);
        if (e->hello->model->vocab_size == 0)
            return specd_fail(err, SPECD_E_FORMAT, "hello: vocab_size 0");
        return SPECD_OK;
    case SPECD_WIRE__ENVELOPE__BODY_HELLO_OK:
        if ((unsigned)e->hello_ok->role > SPECD_WIRE__ROLE__ROLE_VERIFIER)
            return specd_fail(err, SPECD_E_FORMAT, "hello_ok: unknown role %d",
                              (int)e->hello_ok->role);
        return SPECD_OK;
    case SPECD_WIRE__ENVELOPE__BODY_OPEN_SEQ:
        if (e->open_seq->has_max_draft && e->open_seq->max_draft > SPECD_IPC_MAX_DRAFT)
            return specd_fail(err, SPECD_E_FORMAT, "open_seq: max_draft %u > %u",
                              e->open_seq->max_draft, SPECD_IPC_MAX_DRAFT);
        if (e->open_seq->has_rule && !specd_ipc_rule_valid((int64_t)e->open_seq->rule))
            return specd_fail(err, SPECD_E_FORMAT, "open_seq: unknown accept rule %d",
                              (int)e->open_seq->rule);
        if (e->open_seq->policy && strlen(e->open_seq->policy) > 64)
            return specd_fail(err, SPECD_E_FORMAT, "open_seq: policy name longer than 64");
        return check_sampling(e->open_seq->sampling, err);
    case SPECD_WIRE__ENVELOPE__BODY_ATTACH_BUFFER: return check_desc(e->attach_buffer->desc, err);
    case SPECD_WIRE__ENVELOPE__BODY_PROPOSE:
        if (e->propose->has_max_draft && e->propose->max_draft > SPECD_IPC_MAX_DRAFT)
            return specd_fail(err, SPECD_E_FORMAT, "propose: max_draft %u > %u",
                              e->propose->max_draft, SPECD_IPC_MAX_DRAFT);
        if (e->propose->n_commit_tokens > SPECD_IPC_MAX_DRAFT + 1)
            return specd_fail(err, SPECD_E_FORMAT, "propose: %zu commit tokens",
                              e->propose->n_commit_tokens);
        return SPECD_OK;
    case SPECD_WIRE__ENVELOPE__BODY_DRAFT:
        SPECD_TRY(
            check_draft(e->draft->n_tokens, e->draft->n_parents, e->draft->parents, "draft", err));
        SPECD_TRY(check_ref(e->draft->q, "draft.q", err));
        /* host memory, or a CUDA IPC buffer (specd-drafter --q-device), which the client opens
         * after the buffer table's descriptor checks, and only on its caller's device where the
         * caller names one (ipc/client.c, ipc/buffer_table.c) */
        if (e->draft->q_buffer) SPECD_TRY(check_desc(e->draft->q_buffer, err));
        if (e->draft->q) {
            const SpecdWire__BufferRef *q = e->draft->q;
            /* q lies in the buffer that comes with it, one f32 row per token */
            if (!e->draft->q_buffer || e->draft->q_buffer->buffer_id != q->buffer_id ||
                q->dtype != SPECD_WIRE__DTYPE__DTYPE_F32 || q->n_shape != 2 ||
                q->shape[0] != e->draft->n_tokens)
                return specd_fail(err, SPECD_E_FORMAT,
                                  "draft.q: not [n_tokens, vocab] f32 in the q_buffer sent");
        }
        return SPECD_OK;
    case SPECD_WIRE__ENVELOPE__BODY_VERIFY: {
        const SpecdWire__Verify *v = e->verify;
        SPECD_TRY(check_draft(v->n_draft_tokens, v->n_parents, v->parents, "verify", err));
        SPECD_TRY(check_ref(v->target_logits, "verify.target_logits", err));
        SPECD_TRY(check_ref(v->q, "verify.q", err));
        if (!v->target_logits && !v->has_inline_logits)
            return specd_fail(err, SPECD_E_FORMAT, "verify: no target logits");
        if (v->has_inline_logits && (v->inline_logits.len % 4 != 0 || v->inline_logits.len == 0))
            return specd_fail(err, SPECD_E_FORMAT, "verify: inline logits of %zu bytes",
                              v->inline_logits.len);
        return SPECD_OK;
    }
    case SPECD_WIRE__ENVELOPE__BODY_RESULT: {
        const SpecdWire__Result *r = e->result;
        if (r->n_emitted > SPECD_IPC_MAX_DRAFT + 1 || r->accepted > r->n_emitted ||
            r->n_stats > SPECD_IPC_MAX_DRAFT + 1)
            return specd_fail(err, SPECD_E_FORMAT, "result: accepted %u, %zu emitted, %zu stats",
                              r->accepted, r->n_emitted, r->n_stats);
        return SPECD_OK;
    }
    case SPECD_WIRE__ENVELOPE__BODY_ERROR:
        if (e->error->code == 0 || e->error->code > SPECD_E_INTERNAL)
            return specd_fail(err, SPECD_E_FORMAT, "error: unknown code %u", e->error->code);
        return SPECD_OK;
    case SPECD_WIRE__ENVELOPE__BODY_CLOSE_SEQ:
    case SPECD_WIRE__ENVELOPE__BODY_DETACH_BUFFER:
    case SPECD_WIRE__ENVELOPE__BODY_COMMIT:
    case SPECD_WIRE__ENVELOPE__BODY_ACK:
    case SPECD_WIRE__ENVELOPE__BODY_STATS_REQUEST:
    case SPECD_WIRE__ENVELOPE__BODY_STATS:
    case SPECD_WIRE__ENVELOPE__BODY_PING:
    case SPECD_WIRE__ENVELOPE__BODY_PONG:
    case SPECD_WIRE__ENVELOPE__BODY_SEQ_INFO_REQUEST:
    case SPECD_WIRE__ENVELOPE__BODY_SEQ_INFO: return SPECD_OK;
    default:
        return specd_fail(err, SPECD_E_FORMAT, "envelope: no body (case %d)", (int)e->body_case);
    }
}

specd_status specd_ipc_frame_decode(specd_ipc_decoder *dec, const void *bytes, size_t len,
                                    const SpecdWire__Envelope **out, specd_error *err) {
    if (!dec || !out || (!bytes && len))
        return specd_fail(err, SPECD_E_INVALID_ARG, "frame_decode: NULL argument");
    if (len > dec->max_frame)
        return specd_fail(err, SPECD_E_FORMAT, "frame of %zu bytes exceeds the limit of %zu", len,
                          dec->max_frame);
    dec->current = NULL;
    dec->mem.used = 0;
    dec->mem.exhausted = 0;
    SpecdWire__Envelope *e = specd_wire__envelope__unpack(&dec->allocator, len, bytes);
    if (!e) {
        if (dec->mem.exhausted)
            return specd_fail(err, SPECD_E_FORMAT,
                              "frame of %zu bytes needs more than %zu bytes "
                              "to unpack",
                              len, dec->mem.cap);
        return specd_fail(err, SPECD_E_FORMAT, "frame of %zu bytes is not a valid Envelope", len);
    }
    SPECD_TRY(specd_ipc_envelope_validate(e, err));
    dec->current = e;
    *out = e;
    return SPECD_OK;
}

specd_status specd_ipc_frame_encode(const SpecdWire__Envelope *env, size_t max_frame, uint8_t **out,
                                    size_t *out_len, specd_error *err) {
    if (!env || !out || !out_len)
        return specd_fail(err, SPECD_E_INVALID_ARG, "frame_encode: NULL argument");
    if (max_frame == 0) max_frame = SPECD_IPC_FRAME_MAX_DEFAULT;
    size_t n = specd_wire__envelope__get_packed_size(env);
    if (n > max_frame)
        return specd_fail(err, SPECD_E_INVALID_ARG, "frame of %zu bytes exceeds the limit of %zu",
                          n, max_frame);
    uint8_t *buf = specd_alloc(n ? n : 1);
    if (!buf) return specd_fail(err, SPECD_E_NOMEM, "frame_encode: %zu bytes", n);
    specd_wire__envelope__pack(env, buf);
    *out = buf;
    *out_len = n;
    return SPECD_OK;
}
