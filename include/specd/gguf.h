/* GGUF reader: memory-maps a GGUF v2/v3 file and gives zero-copy, validated views of its
 * metadata and tensors.
 *
 * File format (little-endian), as llama.cpp/ggml write it:
 *   u32 magic "GGUF" | u32 version (2 or 3) | u64 n_tensors | u64 n_kv
 *   n_kv x { string key | u32 value_type | value }
 *       string = u64 length + bytes (no NUL); array = u32 elem_type + u64 n + n values
 *   n_tensors x { string name | u32 n_dims (1..4) | n_dims x u64 ne | u32 ggml_type | u64 offset }
 *   padding to `general.alignment` (default 32) | tensor data (each offset relative to here,
 *   aligned, inside the file)
 *
 * Everything is validated at create time: counts against the file size, string lengths, array
 * element types and counts (no nested arrays), dimensions (positive, product without overflow),
 * tensor types known, data offsets aligned and inside the file, names unique. A file that fails
 * any check is refused with SPECD_E_FORMAT (or SPECD_E_UNSUPPORTED for a well-formed but unknown
 * tensor type) and a message naming the key or tensor.
 *
 * Tensor data is aligned to general.alignment relative to the start of the bytes: a file mapping
 * is page-aligned, so its tensors are aligned; bytes given to create_from_memory should be too
 * before their tensors go to the kernels.
 *
 * Ownership: every pointer returned by a getter is borrowed from the specd_gguf and valid until
 * specd_gguf_destroy. Strings are views {ptr, len}: NOT NUL-terminated.
 */
#ifndef SPECD_GGUF_H
#define SPECD_GGUF_H

#include "specd/api.h"

#include <stddef.h>
#include <stdint.h>

#include "specd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct specd_gguf specd_gguf;

typedef enum specd_gguf_type {
    SPECD_GGUF_U8 = 0,
    SPECD_GGUF_I8 = 1,
    SPECD_GGUF_U16 = 2,
    SPECD_GGUF_I16 = 3,
    SPECD_GGUF_U32 = 4,
    SPECD_GGUF_I32 = 5,
    SPECD_GGUF_F32 = 6,
    SPECD_GGUF_BOOL = 7,
    SPECD_GGUF_STRING = 8,
    SPECD_GGUF_ARRAY = 9,
    SPECD_GGUF_U64 = 10,
    SPECD_GGUF_I64 = 11,
    SPECD_GGUF_F64 = 12,
    SPECD_GGUF_INVALID = -1 /* returned for an out-of-range key index; never in a file */
} specd_gguf_type;

typedef struct specd_gguf_str {
    const char *ptr; /* borrowed, not NUL-terminated */
    uint64_t len;
} specd_gguf_str;

typedef struct specd_gguf_tensor {
    specd_gguf_str name;
    uint32_t n_dims;  /* 1..4 */
    int64_t ne[4];    /* elements per dimension, ne[0] fastest; unused dims are 1 */
    uint32_t type;    /* ggml type id (specd_dtype in kernels/cpu/dtype.h) */
    uint64_t offset;  /* from the start of the data section */
    uint64_t n_bytes; /* size of the data */
    const void *data; /* borrowed view into the mapping */
} specd_gguf_tensor;

/* Maps and validates the file at path. On success *out is a new reader (caller owns; release with
 * specd_gguf_destroy). */
SPECD_API specd_status specd_gguf_create(const char *path, specd_gguf **out, specd_error *err);

/* Same over bytes already in memory (fuzzing, tests); the bytes are borrowed and must outlive the
 * reader. */
SPECD_API specd_status specd_gguf_create_from_memory(const void *data, size_t size, specd_gguf **out,
                                           specd_error *err);

/* Releases the reader and its mapping; NULL is a no-op. */
SPECD_API void specd_gguf_destroy(specd_gguf *gguf);

SPECD_API uint32_t specd_gguf_version(const specd_gguf *gguf);
SPECD_API size_t specd_gguf_alignment(const specd_gguf *gguf);
/* Byte offset of the data section from the start of the file. */
SPECD_API uint64_t specd_gguf_data_offset(const specd_gguf *gguf);

/* Short names for display: "u32", "string", "array"...; "?" for an unknown value. Never NULL. */
SPECD_API const char *specd_gguf_type_name(specd_gguf_type type);
/* ggml's name of a tensor type id ("Q4_1", "Q5_K"...), supported by specd or not; "unknown" for
 * ids ggml does not define. Never NULL. */
SPECD_API const char *specd_gguf_tensor_type_name(uint32_t type);

/* --- metadata ------------------------------------------------------------------------------ */
SPECD_API int64_t specd_gguf_key_count(const specd_gguf *gguf);
/* Keys are numbered in file order. key_name of an index out of range is {NULL, 0}, key_type is
 * SPECD_GGUF_INVALID. */
/* Index of key, or -1 when absent. */
SPECD_API int64_t specd_gguf_key_find(const specd_gguf *gguf, const char *key);
SPECD_API specd_gguf_str specd_gguf_key_name(const specd_gguf *gguf, int64_t index);
SPECD_API specd_gguf_type specd_gguf_key_type(const specd_gguf *gguf, int64_t index);

/* Typed getters by key name. Integer getters accept any integer type whose value fits; a missing
 * key is SPECD_E_FORMAT with the key named, a type that cannot convert is SPECD_E_FORMAT too. */
SPECD_API specd_status specd_gguf_get_u32(const specd_gguf *gguf, const char *key, uint32_t *out,
                                specd_error *err);
SPECD_API specd_status specd_gguf_get_i64(const specd_gguf *gguf, const char *key, int64_t *out,
                                specd_error *err);
SPECD_API specd_status specd_gguf_get_u64(const specd_gguf *gguf, const char *key, uint64_t *out,
                                specd_error *err);
/* Floating getters accept F32 and F64 (get_f32 refuses an F64 outside float's range). */
SPECD_API specd_status specd_gguf_get_f32(const specd_gguf *gguf, const char *key, float *out,
                                specd_error *err);
SPECD_API specd_status specd_gguf_get_f64(const specd_gguf *gguf, const char *key, double *out,
                                specd_error *err);
SPECD_API specd_status specd_gguf_get_bool(const specd_gguf *gguf, const char *key, int *out,
                                 specd_error *err);
SPECD_API specd_status specd_gguf_get_str(const specd_gguf *gguf, const char *key, specd_gguf_str *out,
                                specd_error *err);

/* Arrays: element type and count, then elements. For numeric arrays *data points at the raw
 * little-endian elements (possibly unaligned: copy with memcpy); for string arrays at the raw
 * encoded strings (read them with specd_gguf_get_array_str). Any output may be NULL. */
SPECD_API specd_status specd_gguf_get_array(const specd_gguf *gguf, const char *key,
                                  specd_gguf_type *elem_type, uint64_t *count, const void **data,
                                  specd_error *err);
/* Element i of a string array (validated and indexed at create time, so O(1)). i out of range
 * is SPECD_E_INVALID_ARG; a key that is not an array of strings is SPECD_E_FORMAT. */
SPECD_API specd_status specd_gguf_get_array_str(const specd_gguf *gguf, const char *key, uint64_t i,
                                      specd_gguf_str *out, specd_error *err);

/* --- tensors ------------------------------------------------------------------------------- */
SPECD_API int64_t specd_gguf_tensor_count(const specd_gguf *gguf);
/* NULL when index is out of range. */
SPECD_API const specd_gguf_tensor *specd_gguf_tensor_at(const specd_gguf *gguf, int64_t index);
/* NULL when there is no tensor of that name. */
SPECD_API const specd_gguf_tensor *specd_gguf_tensor_find(const specd_gguf *gguf, const char *name);

#ifdef __cplusplus
}
#endif
#endif
