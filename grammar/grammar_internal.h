/* The compiled grammar shared by the files of grammar/: a flat program of elements, the token
 * trie, the mask cache, and the walker that runs parse stacks over bytes.
 *
 * Program. Element i is el[i] = kind | arg << 2: GE_END closes an alternative, GE_CHAR matches one
 * code point of charset arg, GE_REF calls rule arg. Rule r's alternatives start at
 * alt_start[rule_alt[r] .. rule_alt[r] + rule_nalt[r]). Groups and repetitions are rules of their
 * own, made by the parser, so every element is one of the three kinds.
 *
 * Parse state. A parse stack is a chain of frames: its top is a GE_CHAR position (the next code
 * point it needs), the frames below are the positions to return to. A call whose return position
 * is GE_END pushes no frame (a tail call), so right recursion (`x*`, JSON arrays) runs in constant
 * depth. The state of a sequence is the set of stacks of every parse still alive, plus the bytes
 * of a UTF-8 character not yet complete. */
#ifndef SPECD_GRAMMAR_GRAMMAR_INTERNAL_H
#define SPECD_GRAMMAR_GRAMMAR_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/u64map.h"
#include "specd/grammar.h"

enum { GE_END = 0, GE_CHAR = 1, GE_REF = 2 };
#define GE_KIND(e) ((e)&3)
#define GE_ARG(e) ((e) >> 2)

typedef struct gram_prog {
    int32_t *el;
    int32_t n_el;
    int32_t *alt_start; /* element index of each alternative */
    int32_t *rule_alt, *rule_nalt;
    int32_t n_rules, root;
    /* charset c: sorted disjoint ranges cs_lo/cs_hi[cs_off[c] .. cs_off[c + 1]) */
    int32_t *cs_off;
    uint32_t *cs_lo, *cs_hi;
    uint64_t (*cs_ascii)[2]; /* code points below 128 as bits, the fast path */
    int32_t n_cs;
} gram_prog;

/* Parses GBNF text into a program (caller owns: gram_prog_free). Errors name line and column. */
specd_status gram_parse_gbnf(const char *text, size_t len, gram_prog *out, specd_error *err);
void gram_prog_free(gram_prog *p);

/* 1 when charset c holds code point cp. */
int gram_cs_has(const gram_prog *p, int32_t c, uint32_t cp);
/* 1 when charset c holds some code point in [lo, hi]. */
int gram_cs_meets(const gram_prog *p, int32_t c, uint32_t lo, uint32_t hi);

/* Token trie in depth-first order: node i (depth depth[i] >= 1, byte byte[i]) has the tokens
 * tok[tok_off[i] .. tok_off[i + 1]) ending at it and its subtree ends before node end[i], so the
 * tokens below it are tok[tok_off[i + 1] .. tok_off[end[i]]). */
typedef struct gram_trie {
    uint8_t *byte, *depth;
    uint16_t *below; /* classes (gram_byte_class) of the bytes of the nodes below i */
    int32_t *end, *tok_off, *tok;
    int32_t n, max_depth;
} gram_trie;

/* Byte classes for taking trie subtrees whole: a-z, A-Z, 0-9, space, other printable ASCII but
 * '"' and '\\', '"', '\\', control, 0x80 and up. */
enum { GRAM_N_CLASSES = 9 };
static inline int gram_byte_class(uint8_t b) {
    if (b >= 'a' && b <= 'z') return 0;
    if (b >= 'A' && b <= 'Z') return 1;
    if (b >= '0' && b <= '9') return 2;
    if (b == ' ') return 3;
    if (b == '"') return 5;
    if (b == '\\') return 6;
    if (b < 0x20 || b == 0x7f) return 7;
    return b < 0x80 ? 4 : 8;
}

/* 1 when token id may be matched by its bytes (normal and byte tokens that do not end generation).
 */
int gram_token_in_grammar(const specd_tokenizer *tok, int32_t id);
specd_status gram_trie_build(const specd_tokenizer *tok, gram_trie *out, specd_error *err);
void gram_trie_free(gram_trie *t);

typedef struct gram_cache_entry {
    uint64_t hash;
    int32_t *key; /* the state's words */
    size_t key_len;
    uint32_t *mask;
} gram_cache_entry;

struct specd_grammar {
    gram_prog prog;
    gram_trie trie;
    const specd_tokenizer *tok; /* borrowed for forced(): the caller keeps it alive */
    int32_t n_vocab, n_eog;
    int32_t *eog;
    uint8_t *in_grammar; /* per token: 1 when its bytes may be matched (normal and byte tokens) */
    pthread_mutex_t lock;
    gram_cache_entry *cache;
    size_t cache_cap, cache_n, cache_bytes;
    uint64_t hits, misses;
};

/* Mask cache: copies the mask of state key[0..len) into bits and returns 1 when present. */
int gram_cache_get(specd_grammar *g, const int32_t *key, size_t len, uint32_t *bits);
/* Stores a copy (best effort: nothing happens when memory is short). */
void gram_cache_put(specd_grammar *g, const int32_t *key, size_t len, const uint32_t *bits);

/* JSON Schema -> GBNF text (schema.c); *out is NUL-terminated, caller frees with specd_free. */
specd_status gram_schema_to_gbnf(const char *schema, size_t len, char **out, size_t *out_len,
                                 specd_error *err);

/* --- walker: stacks as interned frames, sets of stacks as interned ids ---------------------- */

/* Frame 0 is the empty stack (the parse is complete); set 0 is the empty set (dead). */
typedef struct gram_walk {
    const gram_prog *p;
    int32_t *fpos, *fparent, *fdepth;
    uint32_t nf, fcap;
    u64map frames; /* (pos, parent) -> frame */
    int32_t *sdata;
    uint32_t slen, scap;
    uint32_t *soff, *scount;
    uint32_t ns, sscap;
    int32_t *stab; /* open-addressing table of set ids by content */
    uint32_t stab_cap;
    u64map adv;      /* (set, code point) -> set */
    u64map feasible; /* (set, partial) -> 0/1 */
    int32_t **first; /* per set: the step from a character boundary by each byte (-1 unknown) */
    uint32_t first_cap;
    int16_t *loop; /* per set: the classes whose every byte leads back to it (-1 unknown) */
    uint32_t loop_cap;
    /* scratch of one closure */
    int32_t *work, *out;
    uint32_t nwork, wcap, nout, ocap;
    u64map seen;
    specd_status overflow; /* first limit hit (SPECD_OK when none) */
} gram_walk;

void gram_walk_init(gram_walk *w, const gram_prog *p);
void gram_walk_free(gram_walk *w);
/* Forgets every frame and set (when it has grown large). */
void gram_walk_reset(gram_walk *w);
/* The set of stacks at the start of the grammar. */
int32_t gram_walk_start(gram_walk *w);
/* Interns the stacks of a flat state (see matcher.c) and returns the set. */
int32_t gram_walk_from_flat(gram_walk *w, const int32_t *st, int32_t n_stacks);
/* One byte: (set, partial) -> (set', partial'); returns set' (0 when the byte is not allowed). */
int32_t gram_walk_step(gram_walk *w, int32_t set, uint32_t partial, uint8_t byte,
                       uint32_t *partial_out);
/* Advances a set by one whole code point. */
int32_t gram_walk_advance(gram_walk *w, int32_t set, uint32_t cp);
/* The byte classes (gram_byte_class) whose every byte leads from set back to set at a character
 * boundary: inside a JSON string, all printable ASCII but '"' and '\\'. */
int gram_walk_loop_classes(gram_walk *w, int32_t set);
/* Set s has the empty stack (the grammar may end). */
int gram_walk_can_end(const gram_walk *w, int32_t set);

#endif
