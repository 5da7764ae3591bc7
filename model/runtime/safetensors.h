/* safetensors reader (adapter weights). Format: u64 little-endian header length N, N bytes of
 * JSON {"name": {"dtype": "F32"|"F16"|"BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
 * "__metadata__": {...}}, then the data; offsets are relative to the end of the header.
 * Untrusted: N, every offset, shape product and dtype are checked against the buffer. */
#ifndef SPECD_MODEL_RUNTIME_SAFETENSORS_H
#define SPECD_MODEL_RUNTIME_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "specd/status.h"

typedef struct rt_st_tensor {
    const char *name; /* view into the buffer, not NUL-terminated */
    uint32_t name_len;
    int dtype;        /* 0 F32, 1 F16, 2 BF16 */
    int n_dims;       /* 1..4 */
    int64_t shape[4];
    const uint8_t *data; /* borrowed from the buffer */
    size_t n_bytes;
} rt_st_tensor;

typedef struct rt_st_file {
    rt_st_tensor *tensors; /* caller owns: rt_st_free */
    uint32_t n;
} rt_st_file;

/* Parses buf[0..len) (borrowed; must outlive the result). */
specd_status rt_st_parse(const uint8_t *buf, size_t len, rt_st_file *out, specd_error *err);
void rt_st_free(rt_st_file *f);

/* Element i of t as float. */
float rt_st_get(const rt_st_tensor *t, size_t i);

#endif
