/* The server's compiled grammars, shared by the requests that ask for the same one: a small LRU
 * cache keyed by (kind, source text). Requests sharing a schema share its specd_grammar, and so
 * its mask cache (grammar/: masks by matcher state), which is what makes a schema's second
 * request cheaper than its first. Entries are reference-counted: one evicted while requests still
 * use it lives until the last of them releases it (a grammar must outlive its matchers); the
 * cache itself outlives every reference. */
#ifndef SPECD_SERVE_GRAMMARS_H
#define SPECD_SERVE_GRAMMARS_H

#include <stddef.h>

#include "serve/serve_structured.h"
#include "specd/grammar.h"
#include "specd/tokenizer.h"

#define SERVE_GRAMMAR_CACHE 16

typedef struct serve_grammars serve_grammars;
typedef struct serve_grammar_ref serve_grammar_ref;

typedef struct serve_grammars_stats {
    long long hits, misses; /* lookups that found a compiled grammar; compilations */
} serve_grammars_stats;

/* tok is borrowed (it must outlive the cache). Caller owns *out; NULL when out of memory. */
serve_grammars *serve_grammars_create(const specd_tokenizer *tok);
/* Frees the cache and its grammars: every reference must have been released (the server frees
 * it after its last request). NULL: no-op. */
void serve_grammars_destroy(serve_grammars *c);

/* The grammar of (kind, source) (kind GBNF or JSON_SCHEMA; source NULL with JSON_SCHEMA: any
 * JSON object), compiled on first use. *out is a reference the caller releases. A source that
 * does not compile returns that status with err naming the compiler's complaint. Thread-safe. */
specd_status serve_grammars_get(serve_grammars *c, serve_constraint kind, const char *source,
                                serve_grammar_ref **out, specd_error *err);
/* The compiled grammar (borrowed while the reference is held). */
const specd_grammar *serve_grammar_of(const serve_grammar_ref *r);
/* Another reference to the same grammar (returns r). Thread-safe. */
serve_grammar_ref *serve_grammar_hold(serve_grammar_ref *r);
/* Drops a reference; NULL is a no-op. Thread-safe. */
void serve_grammar_release(serve_grammar_ref *r);

void serve_grammars_get_stats(serve_grammars *c, serve_grammars_stats *out);

#endif
