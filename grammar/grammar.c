/* specd_grammar: compile (GBNF or JSON Schema), the per-vocabulary tables, the mask cache. */
#include "grammar/grammar_internal.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <string.h>

/* Masks kept per grammar; past this the cache starts again empty (states of one schema are few,
 * so this is reached only by grammars with unbounded state, such as deep nesting). */
enum { CACHE_MAX_BYTES = 32 << 20 };

static specd_status create(const char *gbnf, size_t len, const specd_tokenizer *tok,
                           specd_grammar **out, specd_error *err) {
    if (!tok || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "grammar: NULL tokenizer or out");
    specd_grammar *g = specd_alloc_array(1, sizeof *g);
    if (!g) return specd_fail(err, SPECD_E_NOMEM, "grammar: out of memory");
    specd_status st = gram_parse_gbnf(gbnf, len, &g->prog, err);
    if (st == SPECD_OK) st = gram_trie_build(tok, &g->trie, err);
    if (st == SPECD_OK) {
        g->tok = tok;
        g->n_vocab = specd_tokenizer_vocab_size(tok);
        g->eog = specd_alloc_array((size_t)g->n_vocab + 1, sizeof *g->eog);
        g->in_grammar = specd_alloc_array((size_t)g->n_vocab + 1, 1);
        if (!g->eog || !g->in_grammar)
            st = specd_fail(err, SPECD_E_NOMEM, "grammar: out of memory");
    }
    if (st == SPECD_OK) {
        for (int32_t t = 0; t < g->n_vocab; t++) {
            if (specd_tokenizer_is_eog(tok, t)) g->eog[g->n_eog++] = t;
            g->in_grammar[t] = (uint8_t)gram_token_in_grammar(tok, t);
        }
        if (pthread_mutex_init(&g->lock, NULL) != 0)
            st = specd_fail(err, SPECD_E_INTERNAL, "grammar: mutex init failed");
    }
    if (st != SPECD_OK) {
        gram_prog_free(&g->prog);
        gram_trie_free(&g->trie);
        specd_free(g->eog);
        specd_free(g->in_grammar);
        specd_free(g);
        return st;
    }
    *out = g;
    return SPECD_OK;
}

specd_status specd_grammar_create_gbnf(const char *gbnf, size_t len, const specd_tokenizer *tok,
                                       specd_grammar **out, specd_error *err) {
    return create(gbnf, len, tok, out, err);
}

specd_status specd_grammar_create_json_schema(const char *schema, size_t len,
                                              const specd_tokenizer *tok, specd_grammar **out,
                                              specd_error *err) {
    char *gbnf;
    size_t n;
    SPECD_TRY(gram_schema_to_gbnf(schema, len, &gbnf, &n, err));
    specd_status st = create(gbnf, n, tok, out, err);
    specd_free(gbnf);
    return st;
}

specd_status specd_grammar_to_gbnf(const char *schema, size_t len, char *buf, size_t cap,
                                   size_t *n_out, specd_error *err) {
    if (!n_out) return specd_fail(err, SPECD_E_INVALID_ARG, "grammar: NULL n_out");
    char *gbnf;
    size_t n;
    SPECD_TRY(gram_schema_to_gbnf(schema, len, &gbnf, &n, err));
    specd_status st = SPECD_OK;
    if (n >= cap || !buf)
        st = specd_fail(err, SPECD_E_INVALID_ARG, "grammar: GBNF needs %zu bytes, buffer has %zu",
                        n + 1, cap);
    else
        memcpy(buf, gbnf, n + 1);
    *n_out = n;
    specd_free(gbnf);
    return st;
}

static void cache_clear(specd_grammar *g) {
    for (size_t i = 0; i < g->cache_cap; i++) {
        specd_free(g->cache[i].key);
        specd_free(g->cache[i].mask);
    }
    specd_free(g->cache);
    g->cache = NULL;
    g->cache_cap = g->cache_n = g->cache_bytes = 0;
}

void specd_grammar_destroy(specd_grammar *g) {
    if (!g) return;
    cache_clear(g);
    pthread_mutex_destroy(&g->lock);
    gram_prog_free(&g->prog);
    gram_trie_free(&g->trie);
    specd_free(g->eog);
    specd_free(g->in_grammar);
    specd_free(g);
}

int32_t specd_grammar_n_vocab(const specd_grammar *g) {
    return g ? g->n_vocab : 0;
}

void specd_grammar_cache_stats(const specd_grammar *g, uint64_t *hits, uint64_t *misses) {
    specd_grammar *m = (specd_grammar *)g; /* the lock is the one mutable part */
    pthread_mutex_lock(&m->lock);
    if (hits) *hits = g->hits;
    if (misses) *misses = g->misses;
    pthread_mutex_unlock(&m->lock);
}

static uint64_t hash_key(const int32_t *key, size_t len) {
    uint64_t h = 0x51afd7ed558ccdffULL ^ len;
    for (size_t i = 0; i < len; i++)
        h = u64_mix(h ^ (uint32_t)key[i]);
    return h;
}

/* Slot of key, or the empty slot where it would go. Called with the lock held. */
static gram_cache_entry *find(specd_grammar *g, uint64_t h, const int32_t *key, size_t len) {
    for (size_t i = h & (g->cache_cap - 1);; i = (i + 1) & (g->cache_cap - 1)) {
        gram_cache_entry *e = &g->cache[i];
        if (!e->mask) return e;
        if (e->hash == h && e->key_len == len && !memcmp(e->key, key, len * sizeof *key)) return e;
    }
}

int gram_cache_get(specd_grammar *g, const int32_t *key, size_t len, uint32_t *bits) {
    uint64_t h = hash_key(key, len);
    size_t words = ((size_t)g->n_vocab + 31) / 32;
    pthread_mutex_lock(&g->lock);
    gram_cache_entry *e = g->cache_cap ? find(g, h, key, len) : NULL;
    int hit = e && e->mask;
    if (hit) {
        if (bits) memcpy(bits, e->mask, words * sizeof *bits);
        g->hits++;
    }
    pthread_mutex_unlock(&g->lock);
    return hit;
}

void gram_cache_put(specd_grammar *g, const int32_t *key, size_t len, const uint32_t *bits) {
    uint64_t h = hash_key(key, len);
    size_t words = ((size_t)g->n_vocab + 31) / 32;
    size_t bytes = words * sizeof *bits + len * sizeof *key;
    int32_t *k = specd_alloc_array(len + 1, sizeof *k);
    uint32_t *m = specd_alloc_array(words, sizeof *m);
    if (!k || !m) {
        specd_free(k);
        specd_free(m);
        return;
    }
    memcpy(k, key, len * sizeof *key);
    memcpy(m, bits, words * sizeof *m);
    pthread_mutex_lock(&g->lock);
    g->misses++;
    if (g->cache_bytes + bytes > CACHE_MAX_BYTES) cache_clear(g);
    if (2 * (g->cache_n + 1) > g->cache_cap) {
        size_t cap = g->cache_cap ? 2 * g->cache_cap : 64;
        gram_cache_entry *old = g->cache, *nc = specd_alloc_array(cap, sizeof *nc);
        size_t old_cap = g->cache_cap;
        if (nc) {
            g->cache = nc;
            g->cache_cap = cap;
            for (size_t i = 0; i < old_cap; i++)
                if (old[i].mask) *find(g, old[i].hash, old[i].key, old[i].key_len) = old[i];
            specd_free(old);
        }
    }
    gram_cache_entry *e = 2 * (g->cache_n + 1) <= g->cache_cap ? find(g, h, key, len) : NULL;
    if (e && !e->mask) {
        *e = (gram_cache_entry){h, k, len, m};
        g->cache_n++;
        g->cache_bytes += bytes;
        k = NULL;
        m = NULL;
    }
    pthread_mutex_unlock(&g->lock);
    specd_free(k);
    specd_free(m);
}
