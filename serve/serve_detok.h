/* Incremental detokenization for a streamed answer: tokens in, text out as soon as it is final.
 * Held back: the bytes of a UTF-8 character whose remaining bytes have not arrived yet (a token
 * can end mid-character), and a tail that could still become one of the request's stop strings
 * (which must never be sent). The concatenation of every delta equals the whole answer's text,
 * so streamed and non-streamed answers agree byte for byte. */
#ifndef SPECD_SERVE_DETOK_H
#define SPECD_SERVE_DETOK_H

#include <stddef.h>
#include <stdint.h>

#include "specd/tokenizer.h"

typedef struct serve_detok {
    const specd_tokenizer *tok;   /* borrowed */
    const char *const *stop;      /* borrowed stop strings (may be NULL when n_stop is 0) */
    const size_t *stop_len;
    int n_stop;
    char *text;                   /* everything decoded (truncated at a stop string) */
    size_t len, cap;
    size_t released;              /* bytes of text handed out as deltas */
    int stopped;                  /* a stop string was found: the answer ends at len */
} serve_detok;

void serve_detok_init(serve_detok *d, const specd_tokenizer *tok, const char *const *stop,
                      const size_t *stop_len, int n_stop);
void serve_detok_free(serve_detok *d);

/* Adds tokens (ignored once stopped). Returns 0, or -1 when out of memory. */
int serve_detok_push(serve_detok *d, const int32_t *ids, size_t n);
/* The next delta: text[*off .. *off + *n) of d->text, now final (all of it when final is set:
 * the answer is over and nothing more can complete a character or a stop string; then the bytes
 * of a character cut short at the end are dropped from text, so that no answer ends in a broken
 * character). Marks it released. *n may be 0. */
void serve_detok_take(serve_detok *d, int final, size_t *off, size_t *n);

#endif
