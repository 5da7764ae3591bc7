/* specd_grammar_matcher: one sequence's parse state, kept flat so that a copy is one memcpy and
 * the state itself is the key of the grammar's mask cache:
 *   st[0] partial UTF-8 character (walker.c's encoding), st[1] 1 after an EOG token,
 *   st[2] number of stacks, then each stack as its length and its positions bottom to top,
 *   stacks sorted (shorter first, then by positions) so that equal states have equal words.
 * The walker (interned frames and sets, memo tables) is the matcher's own scratch: it is rebuilt
 * from the flat state at each call, kept between calls (its memo makes later masks cheaper) and
 * never copied. */
#include "grammar/grammar_internal.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The walker starts again past these sizes (its per-set byte tables are 1 KB each). */
enum { HDR = 3, WALK_RESET_FRAMES = 1 << 20, WALK_RESET_SETS = 1 << 12, MAX_FORCED_BYTES = 256 };

struct specd_grammar_matcher {
    specd_grammar *g;
    int32_t *st;
    uint32_t st_len, st_cap;
    gram_walk *w;
    uint32_t *mask; /* scratch of apply and allows */
    int32_t *tmp;   /* scratch of the flattening */
    uint32_t tmp_cap;
    int32_t *depth_set; /* trie walk: set and partial at each depth */
    uint32_t *depth_partial;
};

static int reserve(int32_t **p, uint32_t *cap, uint32_t need) {
    if (need <= *cap) return 1;
    uint32_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    int32_t *q = specd_alloc_array(c, sizeof *q);
    if (!q) return 0;
    if (*p) memcpy(q, *p, (size_t)*cap * sizeof *q);
    specd_free(*p);
    *p = q;
    *cap = c;
    return 1;
}

/* The walker, reset when it has grown large; its overflow cleared for this call. */
static gram_walk *walker(specd_grammar_matcher *m) {
    if (!m->w) {
        m->w = specd_alloc_array(1, sizeof *m->w);
        if (!m->w) return NULL;
        gram_walk_init(m->w, &m->g->prog);
    } else if (m->w->nf > WALK_RESET_FRAMES || m->w->ns > WALK_RESET_SETS ||
               m->w->overflow != SPECD_OK) {
        gram_walk_reset(m->w);
    }
    return m->w->overflow == SPECD_OK ? m->w : NULL;
}

static int32_t current_set(specd_grammar_matcher *m, gram_walk *w) {
    return gram_walk_from_flat(w, m->st + HDR, m->st[2]);
}

typedef struct stack_ref {
    const int32_t *p; /* length, then positions */
} stack_ref;

static int cmp_stack(const void *a, const void *b) {
    const int32_t *x = ((const stack_ref *)a)->p, *y = ((const stack_ref *)b)->p;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    for (int32_t i = 1; i <= x[0]; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* Writes set (with partial) as m's flat state. */
static specd_status store_set(specd_grammar_matcher *m, gram_walk *w, int32_t set,
                              uint32_t partial) {
    uint32_t n = w->scount[set], words = 0;
    const int32_t *ids = w->sdata + w->soff[set];
    for (uint32_t i = 0; i < n; i++)
        words += 1 + (uint32_t)(ids[i] ? w->fdepth[ids[i]] : 0);
    size_t refs_bytes = (size_t)n * sizeof(stack_ref);
    uint32_t need = words + (uint32_t)(refs_bytes / sizeof(int32_t)) + 2;
    if (!reserve(&m->tmp, &m->tmp_cap, need) || !reserve(&m->st, &m->st_cap, HDR + words))
        return SPECD_E_NOMEM;
    int32_t *flat = m->tmp;
    stack_ref *refs = (stack_ref *)(void *)(m->tmp + words + (words & 1)); /* 8-byte aligned */
    uint32_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        int32_t f = ids[i], len = f ? w->fdepth[f] : 0;
        refs[i].p = flat + at;
        flat[at] = len;
        for (int32_t k = len; k >= 1; k--, f = w->fparent[f])
            flat[at + (uint32_t)k] = w->fpos[f];
        at += 1 + (uint32_t)len;
    }
    qsort(refs, n, sizeof *refs, cmp_stack);
    m->st[0] = (int32_t)partial;
    m->st[1] = 0;
    m->st[2] = (int32_t)n;
    at = HDR;
    for (uint32_t i = 0; i < n; i++) {
        memcpy(m->st + at, refs[i].p, (size_t)(refs[i].p[0] + 1) * sizeof(int32_t));
        at += 1 + (uint32_t)refs[i].p[0];
    }
    m->st_len = at;
    return SPECD_OK;
}

specd_status specd_grammar_matcher_create(const specd_grammar *g, specd_grammar_matcher **out,
                                          specd_error *err) {
    if (!g || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "grammar matcher: NULL argument");
    specd_grammar_matcher *m = specd_alloc_array(1, sizeof *m);
    if (!m) return specd_fail(err, SPECD_E_NOMEM, "grammar matcher: out of memory");
    m->g = (specd_grammar *)g; /* the grammar's mask cache is its one mutable part */
    gram_walk *w = walker(m);
    int32_t set = w ? gram_walk_start(w) : 0;
    specd_status st = !w ? SPECD_E_NOMEM : w->overflow;
    if (st == SPECD_OK && !set)
        st = specd_fail(err, SPECD_E_UNSUPPORTED, "grammar matcher: the grammar matches nothing");
    else if (st == SPECD_OK)
        st = store_set(m, w, set, 0);
    else
        st = specd_fail(err, st,
                        "grammar matcher: the start state is past a limit (%d stacks, "
                        "depth %d, or memory)",
                        SPECD_GRAMMAR_MAX_STACKS, SPECD_GRAMMAR_MAX_DEPTH);
    if (st != SPECD_OK) {
        if (st == SPECD_E_NOMEM) specd_fail(err, st, "grammar matcher: out of memory");
        specd_grammar_matcher_destroy(m);
        return st;
    }
    *out = m;
    return SPECD_OK;
}

void specd_grammar_matcher_destroy(specd_grammar_matcher *m) {
    if (!m) return;
    if (m->w) gram_walk_free(m->w);
    specd_free(m->w);
    specd_free(m->st);
    specd_free(m->mask);
    specd_free(m->tmp);
    specd_free(m->depth_set);
    specd_free(m->depth_partial);
    specd_free(m);
}

specd_status specd_grammar_matcher_copy(specd_grammar_matcher *dst,
                                        const specd_grammar_matcher *src) {
    if (!dst || !src) return SPECD_E_INVALID_ARG;
    if (dst->g != src->g) return SPECD_E_MISMATCH;
    if (dst == src) return SPECD_OK;
    if (!reserve(&dst->st, &dst->st_cap, src->st_len)) return SPECD_E_NOMEM;
    memcpy(dst->st, src->st, src->st_len * sizeof *dst->st);
    dst->st_len = src->st_len;
    return SPECD_OK;
}

bool specd_grammar_matcher_done(const specd_grammar_matcher *m) {
    /* the empty stack sorts first */
    return m && !m->st[0] && !m->st[1] && m->st[2] > 0 && m->st[HDR] == 0;
}

bool specd_grammar_matcher_must_end(const specd_grammar_matcher *m) {
    return specd_grammar_matcher_done(m) && m->st[2] == 1;
}

/* Runs token's bytes from m's state; returns the set reached (0: not allowed). */
static int32_t run_token(specd_grammar_matcher *m, gram_walk *w, int32_t set, uint32_t *partial,
                         int32_t token) {
    const char *s;
    size_t len;
    if (!m->g->in_grammar[token] ||
        specd_tokenizer_token_to_piece(m->g->tok, token, 0, &s, &len, NULL) != SPECD_OK || !len)
        return 0;
    for (size_t i = 0; i < len && set; i++)
        set = gram_walk_step(w, set, *partial, (uint8_t)s[i], partial);
    return set;
}

static int is_eog(const specd_grammar *g, int32_t token) {
    for (int32_t i = 0; i < g->n_eog; i++)
        if (g->eog[i] == token) return 1;
    return 0;
}

specd_status specd_grammar_matcher_accept(specd_grammar_matcher *m, int32_t token) {
    if (!m) return SPECD_E_INVALID_ARG;
    if (token < 0 || token >= m->g->n_vocab) return SPECD_E_INVALID_ARG;
    if (m->st[1]) return SPECD_E_STATE;
    if (is_eog(m->g, token)) {
        if (!specd_grammar_matcher_done(m)) return SPECD_E_STATE;
        m->st[1] = 1;
        return SPECD_OK;
    }
    gram_walk *w = walker(m);
    if (!w) return SPECD_E_NOMEM;
    uint32_t partial = (uint32_t)m->st[0];
    int32_t set = current_set(m, w);
    if (set) set = run_token(m, w, set, &partial, token);
    if (w->overflow != SPECD_OK) return w->overflow;
    if (!set) return SPECD_E_STATE;
    return store_set(m, w, set, partial);
}

specd_status specd_grammar_matcher_fill_mask(specd_grammar_matcher *m, uint32_t *bits,
                                             int32_t n_vocab) {
    if (!m || !bits) return SPECD_E_INVALID_ARG;
    specd_grammar *g = m->g;
    if (n_vocab < g->n_vocab) return SPECD_E_MISMATCH;
    size_t words = ((size_t)g->n_vocab + 31) / 32, all = ((size_t)n_vocab + 31) / 32;
    /* ids past the tokenizer's (a model's padded rows) are never allowed */
    memset(bits + words, 0, (all - words) * sizeof *bits);
    if (m->st[1]) {
        memset(bits, 0, words * sizeof *bits);
        return SPECD_OK;
    }
    if (gram_cache_get(g, m->st, m->st_len, bits)) return SPECD_OK;
    gram_walk *w = walker(m);
    if (!w) return SPECD_E_NOMEM;
    const gram_trie *t = &g->trie;
    if (!m->depth_set) {
        m->depth_set = specd_alloc_array((size_t)t->max_depth + 1, sizeof *m->depth_set);
        m->depth_partial = specd_alloc_array((size_t)t->max_depth + 1, sizeof *m->depth_partial);
        if (!m->depth_set || !m->depth_partial) return SPECD_E_NOMEM;
    }
    memset(bits, 0, words * sizeof *bits);
    int32_t *ds = m->depth_set;
    uint32_t *dp = m->depth_partial;
    ds[0] = current_set(m, w);
    dp[0] = (uint32_t)m->st[0];
    if (ds[0]) {
        for (int32_t i = 0; i < t->n;) {
            int d = t->depth[i];
            uint8_t b = t->byte[i];
            int32_t s, ps = ds[d - 1];
            const int32_t *tab;
            /* the common step inline: an ASCII byte at a character boundary, already known */
            if (b < 0x80 && !dp[d - 1] && (uint32_t)ps < w->first_cap && (tab = w->first[ps]) &&
                tab[b] >= 0) {
                s = tab[b];
                dp[d] = 0;
            } else {
                s = gram_walk_step(w, ps, dp[d - 1], b, &dp[d]);
            }
            if (!s) {
                i = t->end[i]; /* no token under this prefix can match */
                continue;
            }
            ds[d] = s;
            int32_t last = t->tok_off[i + 1];
            /* every byte below loops back to s: the whole subtree is allowed (asked only where
             * this node's own byte looped, so that passing states are not probed) */
            int whole = s == ps && t->below[i] && !dp[d] &&
                        !(t->below[i] & ~gram_walk_loop_classes(w, s));
            if (whole) last = t->tok_off[t->end[i]];
            for (int32_t k = t->tok_off[i]; k < last; k++)
                bits[t->tok[k] >> 5] |= 1u << (t->tok[k] & 31);
            i = whole ? t->end[i] : i + 1;
        }
        if (!dp[0] && gram_walk_can_end(w, ds[0]))
            for (int32_t i = 0; i < g->n_eog; i++)
                bits[g->eog[i] >> 5] |= 1u << (g->eog[i] & 31);
    }
    /* a walk cut by a limit leaves tokens out; it is right for this call but not cached */
    if (w->overflow == SPECD_OK) gram_cache_put(g, m->st, m->st_len, bits);
    return SPECD_OK;
}

static uint32_t *mask_scratch(specd_grammar_matcher *m) {
    if (!m->mask) m->mask = specd_alloc_array(((size_t)m->g->n_vocab + 31) / 32, sizeof *m->mask);
    return m->mask;
}

specd_status specd_grammar_matcher_apply(specd_grammar_matcher *m, float *logits, int32_t n_vocab) {
    if (!m || !logits) return SPECD_E_INVALID_ARG;
    if (n_vocab < m->g->n_vocab) return SPECD_E_MISMATCH;
    uint32_t *bits = mask_scratch(m);
    if (!bits) return SPECD_E_NOMEM;
    SPECD_TRY(specd_grammar_matcher_fill_mask(m, bits, m->g->n_vocab));
    for (int32_t t = 0; t < m->g->n_vocab; t++)
        if (!(bits[t >> 5] >> (t & 31) & 1)) logits[t] = -INFINITY;
    for (int32_t t = m->g->n_vocab; t < n_vocab; t++)
        logits[t] = -INFINITY;
    return SPECD_OK;
}

bool specd_grammar_matcher_allows(const specd_grammar_matcher *cm, int32_t token) {
    /* logically const: only the matcher's scratch (walker, mask buffer) changes */
    specd_grammar_matcher *m = (specd_grammar_matcher *)cm;
    if (!m || token < 0 || token >= m->g->n_vocab || m->st[1]) return false;
    if (is_eog(m->g, token)) return specd_grammar_matcher_done(m);
    uint32_t *bits = mask_scratch(m);
    if (bits && gram_cache_get(m->g, m->st, m->st_len, bits))
        return bits[token >> 5] >> (token & 31) & 1;
    gram_walk *w = walker(m);
    if (!w) return false;
    uint32_t partial = (uint32_t)m->st[0];
    int32_t set = current_set(m, w);
    return set && run_token(m, w, set, &partial, token) != 0;
}

static size_t put_utf8(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The one code point every stack of set needs next, or -1 when there is a choice (or an end). */
static int64_t forced_cp(const gram_walk *w, int32_t set) {
    const gram_prog *p = w->p;
    const int32_t *ids = w->sdata + w->soff[set];
    int64_t cp = -1;
    for (uint32_t i = 0; i < w->scount[set]; i++) {
        if (!ids[i]) return -1;
        int32_t c = GE_ARG(p->el[w->fpos[ids[i]]]);
        if (p->cs_off[c + 1] - p->cs_off[c] != 1) return -1;
        uint32_t lo = p->cs_lo[p->cs_off[c]];
        if (lo != p->cs_hi[p->cs_off[c]] || (cp >= 0 && cp != lo)) return -1;
        cp = lo;
    }
    return cp;
}

int32_t specd_grammar_matcher_forced(specd_grammar_matcher *m, int32_t *tokens, int32_t max) {
    if (!m || !tokens || max <= 0 || m->st[0] || m->st[1]) return 0;
    gram_walk *w = walker(m);
    if (!w) return 0;
    int32_t set0 = current_set(m, w), set = set0;
    char bytes[MAX_FORCED_BYTES + 4];
    size_t nb = 0;
    while (set && nb < MAX_FORCED_BYTES) {
        int64_t cp = forced_cp(w, set);
        if (cp < 0) break; /* a choice, or the end */
        nb += put_utf8((uint32_t)cp, bytes + nb);
        set = gram_walk_advance(w, set, (uint32_t)cp);
    }
    if (!nb || w->overflow != SPECD_OK) return 0;
    int32_t ids[MAX_FORCED_BYTES + 8];
    size_t n = 0;
    if (specd_tokenizer_encode(m->g->tok, bytes, nb, 0, ids, sizeof ids / sizeof *ids, &n, NULL) !=
        SPECD_OK)
        return 0;
    /* The last token is kept even where a free choice follows it and the model might have merged
     * across the boundary: a draft the target rejects costs one verified row, one it accepts saves
     * a forward. */
    int32_t k = 0;
    uint32_t partial = 0;
    set = set0;
    for (size_t i = 0; i < n && k < max; i++) {
        set = run_token(m, w, set, &partial, ids[i]);
        if (!set) break;
        tokens[k++] = ids[i];
    }
    return k;
}
