/* Shared buffers, internals: the owner side (specd_ipc_buffer, public in specd/ipc.h) and the
 * peer side (a table of buffers attached from descriptors, which resolves and checks references).
 *
 * SHM layout: one 4 KiB header page, then the data. The header holds a magic, the buffer id, the
 * data size and the sequence number of the current content; a reference whose seq differs from
 * the header's is stale. CUDA buffers keep the sequence on the owner; the peer refuses a reference
 * older than the newest it has seen. */
#ifndef SPECD_IPC_BUFFER_H
#define SPECD_IPC_BUFFER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/specd.pb-c.h"
#include "specd/ipc.h"

#define SPECD_SHM_HEADER_BYTES 4096u
#define SPECD_SHM_MAGIC "SPECDSHM"
/* Names are /specd-<uid>-<pid>-<random>: the uid and pid let a later create sweep the names of
 * owners that died before their peer mapped (and unlinked) them. */
#define SPECD_SHM_PREFIX "specd-"

typedef struct specd_shm_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    uint64_t buffer_id;
    uint64_t bytes;
    _Atomic uint64_t seq;
} specd_shm_header;

/* Fills desc (its strings/bytes point into buf, which must outlive desc's use). */
void specd_ipc_buffer_describe(const specd_ipc_buffer *buf, SpecdWire__BufferDesc *desc);
/* The peer has mapped the buffer: drop the name now (SHM; no-op for CUDA). */
void specd_ipc_buffer_shared(specd_ipc_buffer *buf);

/* Removes /dev/shm names left by owners of our uid that are no longer alive. Returns how many. */
int specd_ipc_shm_sweep(void);

/* ---- peer side ---- */
typedef struct specd_ipc_buffer_table specd_ipc_buffer_table;

/* What a resolved reference points at; data is a host pointer (SHM) or a device pointer (CUDA,
 * after the owner's event has been waited on, on the default stream). */
typedef struct specd_ipc_view {
    const void *data;
    int on_device;
    specd_ipc_dtype dtype;
    uint32_t rank;
    uint64_t shape[SPECD_IPC_REF_MAX_RANK];
    size_t bytes;
    uint64_t seq;
    const specd_shm_header *header; /* SHM only, to recheck the seq after use */
} specd_ipc_view;

/* Buffers belong to the peer session that attached them (owner, given by the service loop): a
 * peer can only reference, detach or replace its own; max_per_owner (0 = no limit) bounds one
 * peer's share of the table. */
specd_status specd_ipc_buffer_table_create(size_t max_buffers, specd_ipc_buffer_table **out,
                                           specd_error *err);
void specd_ipc_buffer_table_set_quota(specd_ipc_buffer_table *t, size_t max_per_owner);
/* Which CUDA IPC buffers attach: SPECD_IPC_CUDA_ANY (the default) opens each on the device its
 * descriptor names; a device >= 0 only buffers of that device; SPECD_IPC_CUDA_NONE none. */
#define SPECD_IPC_CUDA_ANY (-2)
#define SPECD_IPC_CUDA_NONE (-1)
void specd_ipc_buffer_table_set_cuda_device(specd_ipc_buffer_table *t, int device);
void specd_ipc_buffer_table_destroy(specd_ipc_buffer_table *t);
size_t specd_ipc_buffer_table_count(const specd_ipc_buffer_table *t);
/* Maps the buffer described (once: attaching a known id again with the same identity is a
 * no-op) and unlinks its name. */
specd_status specd_ipc_buffer_table_attach(specd_ipc_buffer_table *t, uint64_t owner,
                                           const SpecdWire__BufferDesc *desc, specd_error *err);
specd_status specd_ipc_buffer_table_detach(specd_ipc_buffer_table *t, uint64_t owner,
                                           uint64_t buffer_id, specd_error *err);
/* Detaches every buffer of owner (a peer that left); returns how many. */
size_t specd_ipc_buffer_table_detach_owner(specd_ipc_buffer_table *t, uint64_t owner);
/* The checks every reference passes before its buffer is touched: dtype, rank and shape (no
 * zero, no overflow), offset + size within buffer_bytes, offset aligned to the dtype. *n_bytes:
 * the tensor's size. */
specd_status specd_ipc_ref_check(const SpecdWire__BufferRef *ref, size_t buffer_bytes,
                                 size_t *n_bytes, specd_error *err);
/* Checks ref against the attached buffer (known id, in bounds, dtype, current seq). */
specd_status specd_ipc_buffer_table_resolve(specd_ipc_buffer_table *t, uint64_t owner,
                                            const SpecdWire__BufferRef *ref, specd_ipc_view *out,
                                            specd_error *err);
/* After using a view: SPECD_E_PROTOCOL if the owner published new content meanwhile. */
specd_status specd_ipc_view_recheck(const specd_ipc_view *v, specd_error *err);

#endif
