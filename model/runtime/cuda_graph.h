/* The CUDA backend's step graphs, host side: the key that says when two steps enqueue the same
 * kernels with the same arguments, and a bounded cache of executable graphs by that key. No
 * device call here (the cache destroys what it evicts through a callback), so the logic is
 * unit-tested without a GPU (tests/runtime/test_cuda_graph_cache.c).
 *
 * What a step's launches depend on: the token rows, how they split into sequences (each
 * sequence's first row, row count and KV cache) and each sequence's attention length; whether
 * any row has a LoRA gate, any row is a float vector, which outputs are wanted and how many rows;
 * the layer cut. Everything else a step changes (token ids, positions, gates, KV destinations,
 * output rows, visibility masks, input vectors) the kernels read from the step's input buffer on
 * the device, which the step uploads before launching, so it is not in the key. The attention
 * length in a key is the sequence's length rounded up to the attention split
 * (rt_graph_kv_bucket): positions past a row's last visible one add exact zeros
 * (kernels/cuda/attention.cu), so the rounded length gives the same bits, and a decode reuses
 * one graph for SPECD_CUDA_ATTN_SPLIT steps. */
#ifndef SPECD_MODEL_RUNTIME_CUDA_GRAPH_H
#define SPECD_MODEL_RUNTIME_CUDA_GRAPH_H

#include <stddef.h>
#include <stdint.h>

/* Executable graphs a context keeps (least recently used evicted first). */
enum { RT_GRAPH_CACHE_CAPACITY = 32 };

enum rt_graph_flags {
    RT_GRAPH_LOGITS = 1, /* the output head runs (host or device logits) */
    RT_GRAPH_OUTPUT = 2, /* the output rows are gathered and normed (logits or hidden) */
    RT_GRAPH_LORA = 4,   /* some row has a non-zero LoRA gate */
    RT_GRAPH_EMBD = 8    /* some row enters as a float vector */
};

/* Ints a key of a step with at most n_batch tokens may need. */
size_t rt_graph_key_capacity(int32_t n_batch);

/* The key under construction: header, then one (seq, rows, n_kv) triple per sequence. */
typedef struct rt_graph_key {
    int32_t *v;
    int32_t len, cap;
} rt_graph_key;

/* Starts a key in buf (cap ints, at least rt_graph_key_capacity of the step's n_batch). */
void rt_graph_key_begin(rt_graph_key *k, int32_t *buf, int32_t cap, int32_t n_tok, int32_t n_out,
                        int32_t n_layers, unsigned flags);
/* Appends a sequence's run of rows; -1 when the buffer is full (the step is then not graphed). */
int rt_graph_key_add_seq(rt_graph_key *k, int32_t seq, int32_t rows, int32_t n_kv_bucket);

/* n_kv rounded up to the attention split, at most n_ctx (n_kv itself when n_kv > n_ctx, which a
 * validated step never has). */
int32_t rt_graph_kv_bucket(int32_t n_kv, int32_t split, int32_t n_ctx);

/* SPECD_CUDA_GRAPHS's value: NULL, empty or anything but "0", "off", "false", "no": on. */
int rt_graph_enabled_by(const char *value);

typedef struct rt_graph_entry {
    int32_t *key; /* owned copy */
    int32_t key_len;
    uint64_t hash;
    void *exec;      /* the executable graph */
    int32_t kernels; /* kernel launches it holds */
    uint64_t used;   /* the cache's clock at its last use */
} rt_graph_entry;

typedef struct rt_graph_cache {
    rt_graph_entry *e;
    int32_t n, cap;
    uint64_t clock;
    void (*destroy)(void *exec, void *user); /* called for each exec the cache lets go */
    void *user;
    int64_t hits, misses, evictions;
} rt_graph_cache;

/* 0, or -1 when out of memory (the cache then holds nothing and every lookup misses). */
int rt_graph_cache_init(rt_graph_cache *c, int32_t cap, void (*destroy)(void *, void *),
                        void *user);
/* Destroys every exec and frees the cache. */
void rt_graph_cache_free(rt_graph_cache *c);
/* Destroys every exec (an adapter change, a device failure); the cache stays usable. */
void rt_graph_cache_clear(rt_graph_cache *c);
/* The entry of key, marked used, or NULL (counted as a hit or a miss). */
rt_graph_entry *rt_graph_cache_find(rt_graph_cache *c, const rt_graph_key *k);
/* Adds exec under key (not present), evicting the least recently used entry when full; the
 * entry, or NULL when out of memory (exec is then destroyed). */
rt_graph_entry *rt_graph_cache_put(rt_graph_cache *c, const rt_graph_key *k, void *exec,
                                   int32_t kernels);
/* Destroys one entry's exec and removes it (a launch of it failed). */
void rt_graph_cache_remove(rt_graph_cache *c, rt_graph_entry *e);

#endif
