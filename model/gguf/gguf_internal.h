/* The reader's private state, shared by the parser (gguf_parse.c) and the getters (gguf.c). */
#ifndef SPECD_MODEL_GGUF_INTERNAL_H
#define SPECD_MODEL_GGUF_INTERNAL_H

#include "specd/gguf.h"

#include <stddef.h>
#include <stdint.h>

typedef struct specd_gguf_kv {
    specd_gguf_str key;
    specd_gguf_type type;
    const uint8_t *value;      /* scalars: the raw little-endian value */
    specd_gguf_str str;        /* STRING */
    specd_gguf_type elem_type; /* ARRAY */
    uint64_t count;
    const uint8_t *elems; /* ARRAY: first element's raw bytes */
    specd_gguf_str *strs; /* ARRAY of STRING: one view per element (owned) */
} specd_gguf_kv;

/* A name and the index it belongs to; kept sorted by name for lookups. */
typedef struct specd_gguf_name {
    const char *ptr;
    uint64_t len;
    int64_t index;
} specd_gguf_name;

struct specd_gguf {
    const uint8_t *base;
    size_t size;
    void *map; /* non-NULL when we own a mapping of map_size bytes */
    size_t map_size;
    int map_copied; /* map is the file read into common/pages.h's pages, not a file mapping */
    uint32_t version;
    size_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    specd_gguf_kv *kvs;
    specd_gguf_name *kv_sorted;
    int64_t n_tensors;
    specd_gguf_tensor *tensors;
    specd_gguf_name *tensor_sorted;
};

/* Parses and validates size bytes at base into g (whose base/size/map are already set). */
specd_status specd_gguf_parse(specd_gguf *g, specd_error *err);

/* Writes a printable, truncated copy of s into buf (for error messages); returns buf. */
const char *specd_gguf_printable(specd_gguf_str s, char *buf, size_t buf_size);

/* Binary search of a sorted name table; -1 when absent. */
int64_t specd_gguf_name_find(const specd_gguf_name *names, int64_t n, const char *key, size_t len);

#endif
