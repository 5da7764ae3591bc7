/* An open-addressing map from 64-bit keys to non-negative int32 values (linear probing, power of
 * two capacity, at most half full), for the walker's interning and memo tables. */
#ifndef SPECD_GRAMMAR_U64MAP_H
#define SPECD_GRAMMAR_U64MAP_H

#include <stdint.h>
#include <string.h>

#include "common/alloc.h"

typedef struct u64map {
    uint64_t *keys;
    int32_t *vals; /* -1 = empty slot */
    uint32_t cap, n;
} u64map;

static inline uint64_t u64_mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline int32_t u64map_get(const u64map *m, uint64_t key) {
    if (!m->cap) return -1;
    for (uint32_t i = (uint32_t)u64_mix(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->vals[i] < 0) return -1;
        if (m->keys[i] == key) return m->vals[i];
    }
}

static inline void u64map_free(u64map *m) {
    specd_free(m->keys);
    specd_free(m->vals);
    memset(m, 0, sizeof *m);
}

static inline void u64map_clear(u64map *m) {
    if (m->cap) memset(m->vals, 0xff, (size_t)m->cap * sizeof *m->vals);
    m->n = 0;
}

/* Inserts or replaces; returns 0 when memory ran out (the map is unchanged then). */
static inline int u64map_put(u64map *m, uint64_t key, int32_t val) {
    if (2 * (m->n + 1) > m->cap) {
        uint32_t cap = m->cap ? 2 * m->cap : 64;
        u64map g = {specd_alloc_array(cap, sizeof *g.keys), specd_alloc_array(cap, sizeof *g.vals),
                    cap, 0};
        if (!g.keys || !g.vals) {
            specd_free(g.keys);
            specd_free(g.vals);
            return 0;
        }
        memset(g.vals, 0xff, (size_t)cap * sizeof *g.vals);
        for (uint32_t i = 0; i < m->cap; i++)
            if (m->vals[i] >= 0) {
                uint32_t j = (uint32_t)u64_mix(m->keys[i]) & (cap - 1);
                while (g.vals[j] >= 0)
                    j = (j + 1) & (cap - 1);
                g.keys[j] = m->keys[i];
                g.vals[j] = m->vals[i];
                g.n++;
            }
        u64map_free(m);
        *m = g;
    }
    uint32_t i = (uint32_t)u64_mix(key) & (m->cap - 1);
    while (m->vals[i] >= 0 && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (m->vals[i] < 0) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return 1;
}

#endif
