#include "serve/serve_grammars.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/status_internal.h"

struct serve_grammar_ref {
    serve_grammars *cache; /* whose mutex guards refs (the cache outlives every reference) */
    serve_constraint kind;
    char *source; /* malloc'd, NULL: any JSON object */
    specd_grammar *g;
    int refs;               /* the cache's (while listed) and each holder's */
    unsigned long long used; /* the cache's clock at the last lookup (LRU) */
};

struct serve_grammars {
    const specd_tokenizer *tok;
    pthread_mutex_t mu; /* guards the entries and every entry's refs */
    serve_grammar_ref *e[SERVE_GRAMMAR_CACHE];
    int n;
    unsigned long long clock;
    serve_grammars_stats stats;
};

serve_grammars *serve_grammars_create(const specd_tokenizer *tok) {
    serve_grammars *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->tok = tok;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void entry_free(serve_grammar_ref *r) {
    specd_grammar_destroy(r->g);
    free(r->source);
    free(r);
}

/* Drops one reference with the owning mutex held; returns 1 when it was the last. */
static int unref_locked(serve_grammar_ref *r) { return --r->refs == 0; }

static int same(const serve_grammar_ref *r, serve_constraint kind, const char *source) {
    if (r->kind != kind) return 0;
    if (!r->source || !source) return !r->source && !source;
    return !strcmp(r->source, source);
}

static serve_grammar_ref *find_locked(serve_grammars *c, serve_constraint kind,
                                      const char *source) {
    for (int i = 0; i < c->n; i++)
        if (same(c->e[i], kind, source)) {
            c->e[i]->refs++;
            c->e[i]->used = ++c->clock;
            return c->e[i];
        }
    return NULL;
}

/* Lists r (taking the cache's reference), evicting the least recently used entry when full; the
 * evicted entry lives on while requests hold it. Returns the entry to free, if any. */
static serve_grammar_ref *insert_locked(serve_grammars *c, serve_grammar_ref *r) {
    serve_grammar_ref *gone = NULL;
    if (c->n == SERVE_GRAMMAR_CACHE) {
        int lru = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i]->used < c->e[lru]->used) lru = i;
        gone = c->e[lru];
        c->e[lru] = c->e[--c->n];
        if (!unref_locked(gone)) gone = NULL;
    }
    r->refs++;
    r->used = ++c->clock;
    c->e[c->n++] = r;
    return gone;
}

specd_status serve_grammars_get(serve_grammars *c, serve_constraint kind, const char *source,
                                serve_grammar_ref **out, specd_error *err) {
    pthread_mutex_lock(&c->mu);
    serve_grammar_ref *r = find_locked(c, kind, source);
    if (r) c->stats.hits++;
    pthread_mutex_unlock(&c->mu);
    if (r) {
        *out = r;
        return SPECD_OK;
    }
    /* Compiled outside the lock: a large schema takes a while, and other requests' lookups
     * need not wait for it. */
    r = calloc(1, sizeof *r);
    if (!r || (source && !(r->source = strdup(source)))) {
        free(r);
        return specd_fail(err, SPECD_E_NOMEM, "serve: no memory for a grammar");
    }
    r->kind = kind;
    r->cache = c;
    r->refs = 1; /* the caller's */
    size_t len = source ? strlen(source) : 0;
    specd_status st = kind == SERVE_CONSTRAINT_GBNF
                          ? specd_grammar_create_gbnf(source ? source : "", len, c->tok, &r->g, err)
                          : specd_grammar_create_json_schema(source, len, c->tok, &r->g, err);
    if (st != SPECD_OK) {
        entry_free(r);
        return st;
    }
    pthread_mutex_lock(&c->mu);
    c->stats.misses++;
    /* another request may have compiled the same grammar meanwhile: share that one */
    serve_grammar_ref *twin = find_locked(c, kind, source);
    serve_grammar_ref *gone = twin ? NULL : insert_locked(c, r);
    pthread_mutex_unlock(&c->mu);
    if (gone) entry_free(gone);
    if (twin) {
        entry_free(r);
        r = twin;
    }
    *out = r;
    return SPECD_OK;
}

const specd_grammar *serve_grammar_of(const serve_grammar_ref *r) { return r->g; }

serve_grammar_ref *serve_grammar_hold(serve_grammar_ref *r) {
    pthread_mutex_lock(&r->cache->mu);
    r->refs++;
    pthread_mutex_unlock(&r->cache->mu);
    return r;
}

void serve_grammar_release(serve_grammar_ref *r) {
    if (!r) return;
    serve_grammars *c = r->cache;
    pthread_mutex_lock(&c->mu);
    int last = unref_locked(r);
    pthread_mutex_unlock(&c->mu);
    if (last) entry_free(r);
}

void serve_grammars_get_stats(serve_grammars *c, serve_grammars_stats *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
}

void serve_grammars_destroy(serve_grammars *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) entry_free(c->e[i]); /* no request holds one any more */
    pthread_mutex_destroy(&c->mu);
    free(c);
}
