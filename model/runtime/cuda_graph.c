/* The step graphs' key and cache (model/runtime/cuda_graph.h). */
#include "model/runtime/cuda_graph.h"

#include "common/alloc.h"

#include <string.h>
#include <strings.h>

enum { HEADER = 5 }; /* n_tok, n_out, n_layers, flags, n_seqs */

size_t rt_graph_key_capacity(int32_t n_batch) {
    return HEADER + 3 * (size_t)(n_batch > 0 ? n_batch : 0);
}

void rt_graph_key_begin(rt_graph_key *k, int32_t *buf, int32_t cap, int32_t n_tok, int32_t n_out,
                        int32_t n_layers, unsigned flags) {
    k->v = buf;
    k->cap = cap;
    k->len = cap >= HEADER ? HEADER : cap + 1; /* too small: add_seq refuses, lookups miss */
    if (cap < HEADER) return;
    buf[0] = n_tok;
    buf[1] = n_out;
    buf[2] = n_layers;
    buf[3] = (int32_t)flags;
    buf[4] = 0;
}

int rt_graph_key_add_seq(rt_graph_key *k, int32_t seq, int32_t rows, int32_t n_kv_bucket) {
    if (k->len > k->cap || k->cap - k->len < 3) {
        k->len = k->cap + 1;
        return -1;
    }
    k->v[k->len++] = seq;
    k->v[k->len++] = rows;
    k->v[k->len++] = n_kv_bucket;
    k->v[4]++;
    return 0;
}

int32_t rt_graph_kv_bucket(int32_t n_kv, int32_t split, int32_t n_ctx) {
    if (split <= 0 || n_kv <= 0 || n_kv > n_ctx) return n_kv;
    const int64_t up = ((int64_t)n_kv + split - 1) / split * split;
    return up < n_ctx ? (int32_t)up : n_ctx;
}

int rt_graph_enabled_by(const char *v) {
    if (!v || !*v) return 1;
    return !(strcmp(v, "0") == 0 || strcasecmp(v, "off") == 0 || strcasecmp(v, "false") == 0 ||
             strcasecmp(v, "no") == 0);
}

static int key_ok(const rt_graph_key *k) {
    return k->len >= HEADER && k->len <= k->cap;
}

static uint64_t hash_of(const rt_graph_key *k) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the ints' bytes */
    const unsigned char *p = (const unsigned char *)k->v;
    for (size_t i = 0; i < (size_t)k->len * sizeof(int32_t); i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

int rt_graph_cache_init(rt_graph_cache *c, int32_t cap, void (*destroy)(void *, void *),
                        void *user) {
    memset(c, 0, sizeof *c);
    c->destroy = destroy;
    c->user = user;
    if (cap <= 0) return 0;
    c->e = specd_alloc_array((size_t)cap, sizeof *c->e);
    if (!c->e) return -1;
    c->cap = cap;
    return 0;
}

static void release(rt_graph_cache *c, rt_graph_entry *e) {
    if (e->exec && c->destroy) c->destroy(e->exec, c->user);
    specd_free(e->key);
    memset(e, 0, sizeof *e);
}

void rt_graph_cache_clear(rt_graph_cache *c) {
    for (int32_t i = 0; i < c->n; i++)
        release(c, &c->e[i]);
    c->n = 0;
}

void rt_graph_cache_free(rt_graph_cache *c) {
    rt_graph_cache_clear(c);
    specd_free(c->e);
    c->e = NULL;
    c->cap = 0;
}

rt_graph_entry *rt_graph_cache_find(rt_graph_cache *c, const rt_graph_key *k) {
    if (key_ok(k)) {
        const uint64_t h = hash_of(k);
        for (int32_t i = 0; i < c->n; i++) {
            rt_graph_entry *e = &c->e[i];
            if (e->hash == h && e->key_len == k->len &&
                memcmp(e->key, k->v, (size_t)k->len * sizeof(int32_t)) == 0) {
                e->used = ++c->clock;
                c->hits++;
                return e;
            }
        }
    }
    c->misses++;
    return NULL;
}

void rt_graph_cache_remove(rt_graph_cache *c, rt_graph_entry *e) {
    const ptrdiff_t i = e - c->e;
    if (i < 0 || i >= c->n) return;
    release(c, e);
    c->e[i] = c->e[c->n - 1];
    memset(&c->e[c->n - 1], 0, sizeof *e);
    c->n--;
}

rt_graph_entry *rt_graph_cache_put(rt_graph_cache *c, const rt_graph_key *k, void *exec,
                                   int32_t kernels) {
    int32_t *copy = key_ok(k) && c->cap > 0
                        ? specd_alloc_array((size_t)k->len, sizeof(int32_t))
                        : NULL;
    if (!copy) {
        if (exec && c->destroy) c->destroy(exec, c->user);
        return NULL;
    }
    memcpy(copy, k->v, (size_t)k->len * sizeof(int32_t));
    if (c->n == c->cap) { /* evict the least recently used */
        int32_t old = 0;
        for (int32_t i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[old].used) old = i;
        rt_graph_cache_remove(c, &c->e[old]);
        c->evictions++;
    }
    rt_graph_entry *e = &c->e[c->n++];
    *e = (rt_graph_entry){.key = copy,
                          .key_len = k->len,
                          .hash = hash_of(k),
                          .exec = exec,
                          .kernels = kernels,
                          .used = ++c->clock};
    return e;
}
