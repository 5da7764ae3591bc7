/* A small JSON reader for adapter files (adapter_config.json, safetensors headers): tokenizes a
 * buffer into a flat array of nodes (as jsmn does) that callers walk by index. Untrusted input:
 * depth, node count and every escape are checked; strings are returned as raw views (escapes left
 * in place: the keys and names we look for never contain them). */
#ifndef SPECD_MODEL_RUNTIME_JSON_H
#define SPECD_MODEL_RUNTIME_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "specd/status.h"

typedef enum rt_json_type { RT_JSON_OBJECT, RT_JSON_ARRAY, RT_JSON_STRING, RT_JSON_PRIMITIVE } rt_json_type;

typedef struct rt_json_node {
    rt_json_type type;
    uint32_t start, end; /* byte range of the value (strings: inside the quotes) */
    uint32_t size;       /* children: members of an object (key and value count as one), items */
    uint32_t next;       /* index just past this node's subtree */
} rt_json_node;

typedef struct rt_json {
    const char *text;
    rt_json_node *nodes; /* caller owns: rt_json_free */
    uint32_t n;
} rt_json;

/* Parses text[0..len) (len < 2^31). Errors name the byte offset. */
specd_status rt_json_parse(const char *text, size_t len, rt_json *out, specd_error *err);
void rt_json_free(rt_json *j);

/* Index of the value of key in object node obj, or 0 when absent (0 is the root, never a value). */
uint32_t rt_json_get(const rt_json *j, uint32_t obj, const char *key);
/* 1 when node i is a string equal to s. */
int rt_json_str_eq(const rt_json *j, uint32_t i, const char *s);
/* Number value of a primitive node; 0 when it is not a finite number. */
int rt_json_number(const rt_json *j, uint32_t i, double *out);

#endif
