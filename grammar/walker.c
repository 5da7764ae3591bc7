/* The walker: parse stacks as interned frames (pos, parent), sets of stacks as interned sorted
 * arrays of frame ids, and memo tables of (set, code point) -> set. Interning makes equal states
 * one id, so the trie walk of a mask (trie.c, matcher.c) is a walk of a lazily built automaton:
 * inside a JSON string every character leads back to the same set, found in the memo. */
#include "grammar/grammar_internal.h"

#include "common/alloc.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_FRAMES = 1 << 22, MAX_SET_WORDS = 1 << 24, MAX_WORK = 1 << 16 };

static int grow(void **p, uint32_t *cap, uint32_t need, size_t size) {
    if (need <= *cap) return 1;
    uint32_t cap2 = *cap ? *cap : 64;
    while (cap2 < need)
        cap2 *= 2;
    void *q = specd_alloc_array(cap2, size);
    if (!q) return 0;
    if (*p) memcpy(q, *p, (size_t)*cap * size);
    specd_free(*p);
    *p = q;
    *cap = cap2;
    return 1;
}

static void set_overflow(gram_walk *w, specd_status st) {
    if (w->overflow == SPECD_OK) w->overflow = st;
}

void gram_walk_init(gram_walk *w, const gram_prog *p) {
    memset(w, 0, sizeof *w);
    w->p = p;
    gram_walk_reset(w);
}

void gram_walk_free(gram_walk *w) {
    specd_free(w->fpos);
    specd_free(w->fparent);
    specd_free(w->fdepth);
    u64map_free(&w->frames);
    specd_free(w->sdata);
    specd_free(w->soff);
    specd_free(w->scount);
    specd_free(w->stab);
    u64map_free(&w->adv);
    u64map_free(&w->feasible);
    for (uint32_t i = 0; i < w->first_cap; i++)
        specd_free(w->first[i]);
    specd_free(w->first);
    specd_free(w->loop);
    specd_free(w->work);
    specd_free(w->out);
    u64map_free(&w->seen);
    memset(w, 0, sizeof *w);
}

static int32_t intern_set(gram_walk *w, const int32_t *ids, uint32_t n);

void gram_walk_reset(gram_walk *w) {
    w->nf = 1; /* frame 0: the empty stack */
    if (!w->fcap) {
        uint32_t c1 = 0, c2 = 0;
        if (!grow((void **)&w->fparent, &c1, 64, sizeof(int32_t)) ||
            !grow((void **)&w->fdepth, &c2, 64, sizeof(int32_t)) ||
            !grow((void **)&w->fpos, &w->fcap, 64, sizeof(int32_t)))
            set_overflow(w, SPECD_E_NOMEM);
    }
    u64map_clear(&w->frames);
    w->slen = 0;
    w->ns = 0;
    if (w->stab) memset(w->stab, 0xff, (size_t)w->stab_cap * sizeof *w->stab);
    u64map_clear(&w->adv);
    u64map_clear(&w->feasible);
    for (uint32_t i = 0; i < w->first_cap; i++) {
        specd_free(w->first[i]);
        w->first[i] = NULL;
    }
    if (w->loop) memset(w->loop, 0xff, w->loop_cap * sizeof *w->loop);
    if (w->fcap) w->overflow = SPECD_OK;
    intern_set(w, NULL, 0); /* set 0: dead */
}

/* --- frames and sets ----------------------------------------------------------------------- */

static int32_t intern_frame(gram_walk *w, int32_t pos, int32_t parent) {
    uint64_t key = (uint64_t)(uint32_t)pos << 32 | (uint32_t)parent;
    int32_t f = u64map_get(&w->frames, key);
    if (f >= 0) return f;
    int32_t depth = parent ? w->fdepth[parent] + 1 : 1;
    if (depth > SPECD_GRAMMAR_MAX_DEPTH) {
        set_overflow(w, SPECD_E_UNSUPPORTED);
        return -1;
    }
    if (w->nf >= MAX_FRAMES) {
        set_overflow(w, SPECD_E_NOMEM);
        return -1;
    }
    if (w->nf >= w->fcap) {
        uint32_t c1 = w->fcap, c2 = w->fcap;
        if (!grow((void **)&w->fparent, &c1, w->nf + 1, sizeof(int32_t)) ||
            !grow((void **)&w->fdepth, &c2, w->nf + 1, sizeof(int32_t)) ||
            !grow((void **)&w->fpos, &w->fcap, w->nf + 1, sizeof(int32_t))) {
            set_overflow(w, SPECD_E_NOMEM);
            return -1;
        }
    }
    f = (int32_t)w->nf;
    if (!u64map_put(&w->frames, key, f)) {
        set_overflow(w, SPECD_E_NOMEM);
        return -1;
    }
    w->fpos[f] = pos;
    w->fparent[f] = parent;
    w->fdepth[f] = depth;
    w->nf++;
    return f;
}

static uint64_t hash_ids(const int32_t *ids, uint32_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
    for (uint32_t i = 0; i < n; i++)
        h = u64_mix(h ^ (uint32_t)ids[i]);
    return h;
}

static int same_set(const gram_walk *w, int32_t s, const int32_t *ids, uint32_t n) {
    return w->scount[s] == n && (!n || !memcmp(w->sdata + w->soff[s], ids, n * sizeof *ids));
}

/* ids sorted and unique. */
static int32_t intern_set(gram_walk *w, const int32_t *ids, uint32_t n) {
    if (2 * (w->ns + 1) > w->stab_cap) { /* rehash */
        uint32_t cap = w->stab_cap ? 2 * w->stab_cap : 256;
        int32_t *t = specd_alloc_array(cap, sizeof *t);
        if (!t) {
            set_overflow(w, SPECD_E_NOMEM);
            return 0;
        }
        memset(t, 0xff, (size_t)cap * sizeof *t);
        for (uint32_t s = 0; s < w->ns; s++) {
            uint32_t i = (uint32_t)hash_ids(w->sdata + w->soff[s], w->scount[s]) & (cap - 1);
            while (t[i] >= 0)
                i = (i + 1) & (cap - 1);
            t[i] = (int32_t)s;
        }
        specd_free(w->stab);
        w->stab = t;
        w->stab_cap = cap;
    }
    uint32_t i = (uint32_t)hash_ids(ids, n) & (w->stab_cap - 1);
    for (; w->stab[i] >= 0; i = (i + 1) & (w->stab_cap - 1))
        if (same_set(w, w->stab[i], ids, n)) return w->stab[i];
    if (w->slen + n > MAX_SET_WORDS) {
        set_overflow(w, SPECD_E_NOMEM);
        return 0;
    }
    uint32_t c1 = w->sscap;
    if (!grow((void **)&w->sdata, &w->scap, w->slen + n, sizeof(int32_t)) ||
        !grow((void **)&w->scount, &c1, w->ns + 1, sizeof(uint32_t)) ||
        !grow((void **)&w->soff, &w->sscap, w->ns + 1, sizeof(uint32_t))) {
        set_overflow(w, SPECD_E_NOMEM);
        return 0;
    }
    if (n) memcpy(w->sdata + w->slen, ids, n * sizeof *ids);
    int32_t s = (int32_t)w->ns++;
    w->soff[s] = w->slen;
    w->scount[s] = n;
    w->slen += n;
    w->stab[i] = s;
    return s;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Sorts and dedups w->out and interns it. */
static int32_t finish_set(gram_walk *w) {
    if (!w->nout) return 0;
    qsort(w->out, w->nout, sizeof *w->out, cmp_i32);
    uint32_t m = 1;
    for (uint32_t i = 1; i < w->nout; i++)
        if (w->out[i] != w->out[m - 1]) w->out[m++] = w->out[i];
    if (m > SPECD_GRAMMAR_MAX_STACKS) {
        set_overflow(w, SPECD_E_UNSUPPORTED);
        return 0;
    }
    return intern_set(w, w->out, m);
}

/* --- closure: from a position to the stacks whose tops are characters ---------------------- */

static int push_work(gram_walk *w, int32_t pos, int32_t parent) {
    if (w->nwork + 2 > MAX_WORK * 2) {
        set_overflow(w, SPECD_E_UNSUPPORTED);
        return 0;
    }
    if (!grow((void **)&w->work, &w->wcap, w->nwork + 2, sizeof(int32_t))) {
        set_overflow(w, SPECD_E_NOMEM);
        return 0;
    }
    w->work[w->nwork++] = pos;
    w->work[w->nwork++] = parent;
    return 1;
}

static int push_out(gram_walk *w, int32_t f) {
    if (!grow((void **)&w->out, &w->ocap, w->nout + 1, sizeof(int32_t))) {
        set_overflow(w, SPECD_E_NOMEM);
        return 0;
    }
    w->out[w->nout++] = f;
    return 1;
}

/* Expands the work list into w->out. Each (pos, parent) is expanded once per closure, which
 * bounds the work of nullable repetitions; the number of items is capped (MAX_WORK). */
static int run_closure(gram_walk *w) {
    const gram_prog *p = w->p;
    u64map_clear(&w->seen);
    uint32_t steps = 0;
    while (w->nwork) {
        int32_t parent = w->work[--w->nwork], pos = w->work[--w->nwork];
        uint64_t key = (uint64_t)(uint32_t)pos << 32 | (uint32_t)parent;
        if (u64map_get(&w->seen, key) >= 0) continue;
        if (++steps > MAX_WORK || !u64map_put(&w->seen, key, 1)) {
            set_overflow(w, steps > MAX_WORK ? SPECD_E_UNSUPPORTED : SPECD_E_NOMEM);
            w->nwork = 0;
            return 0;
        }
        int32_t e = p->el[pos];
        switch (GE_KIND(e)) {
        case GE_CHAR: {
            int32_t f = intern_frame(w, pos, parent);
            if (f < 0 || !push_out(w, f)) break;
            break;
        }
        case GE_END:
            if (!parent) {
                if (!push_out(w, 0)) return 0;
            } else if (!push_work(w, w->fpos[parent], w->fparent[parent])) {
                return 0;
            }
            break;
        default: {
            int32_t r = GE_ARG(e), ret = pos + 1, np = parent;
            if (GE_KIND(p->el[ret]) != GE_END) { /* not a tail call: remember where to return */
                np = intern_frame(w, ret, parent);
                if (np < 0) break;
            }
            for (int32_t a = 0; a < p->rule_nalt[r]; a++)
                if (!push_work(w, p->alt_start[p->rule_alt[r] + a], np)) return 0;
        }
        }
    }
    return 1;
}

int32_t gram_walk_start(gram_walk *w) {
    w->nout = 0;
    w->nwork = 0;
    const gram_prog *p = w->p;
    for (int32_t a = 0; a < p->rule_nalt[p->root]; a++)
        push_work(w, p->alt_start[p->rule_alt[p->root] + a], 0);
    run_closure(w);
    return finish_set(w);
}

int32_t gram_walk_from_flat(gram_walk *w, const int32_t *st, int32_t n_stacks) {
    w->nout = 0;
    for (int32_t s = 0; s < n_stacks; s++) {
        int32_t len = *st++, f = 0;
        for (int32_t i = 0; i < len && f >= 0; i++)
            f = intern_frame(w, st[i], f);
        st += len;
        if (f < 0 || !push_out(w, f)) return 0;
    }
    return finish_set(w);
}

int32_t gram_walk_advance(gram_walk *w, int32_t set, uint32_t cp) {
    uint64_t key = (uint64_t)(uint32_t)set << 21 | cp;
    int32_t r = u64map_get(&w->adv, key);
    if (r >= 0) return r;
    const gram_prog *p = w->p;
    w->nout = 0;
    w->nwork = 0;
    const int32_t *ids = w->sdata + w->soff[set];
    for (uint32_t i = 0; i < w->scount[set]; i++) {
        int32_t f = ids[i];
        if (!f) continue; /* the complete parse takes no more characters */
        int32_t pos = w->fpos[f], c = GE_ARG(p->el[pos]);
        int ok = cp < 128 ? (int)(p->cs_ascii[c][cp >> 6] >> (cp & 63) & 1) : gram_cs_has(p, c, cp);
        if (ok && !push_work(w, pos + 1, w->fparent[f])) break;
        ids = w->sdata + w->soff[set]; /* interning may move the pool */
    }
    run_closure(w);
    r = finish_set(w);
    /* a set cut short by a limit is not remembered, so the limit is reported again */
    if (w->overflow == SPECD_OK && !u64map_put(&w->adv, key, r)) set_overflow(w, SPECD_E_NOMEM);
    return r;
}

int gram_walk_can_end(const gram_walk *w, int32_t set) {
    return w->scount[set] && w->sdata[w->soff[set]] == 0; /* frame 0 sorts first */
}

/* --- bytes: UTF-8 assembled on the way ----------------------------------------------------- */

/* partial: bits 0-1 continuation bytes still needed, bits 2-3 the character's length, bits 4..
 * the value so far. 0 = between characters. */
static int32_t feasible(gram_walk *w, int32_t set, uint32_t partial) {
    uint32_t need = partial & 3, len = partial >> 2 & 3, v = partial >> 4;
    static const uint32_t min[4] = {0, 0x80, 0x800, 0x10000};
    uint32_t lo = v << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
    if (lo < min[len]) lo = min[len];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return 0;
    uint64_t key = (uint64_t)(uint32_t)set << 24 | partial;
    int32_t r = u64map_get(&w->feasible, key);
    if (r >= 0) return r ? set : 0;
    r = 0;
    const int32_t *ids = w->sdata + w->soff[set];
    for (uint32_t i = 0; i < w->scount[set] && !r; i++)
        if (ids[i]) r = gram_cs_meets(w->p, GE_ARG(w->p->el[w->fpos[ids[i]]]), lo, hi);
    if (!u64map_put(&w->feasible, key, r)) set_overflow(w, SPECD_E_NOMEM);
    return r ? set : 0;
}

static int32_t step_slow(gram_walk *w, int32_t set, uint32_t partial, uint8_t b,
                         uint32_t *partial_out) {
    *partial_out = 0;
    if (!partial) {
        if (b < 0x80) return gram_walk_advance(w, set, b);
        uint32_t len = (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : 0;
        if (!len) return 0;
        uint32_t np = len | len << 2 | (uint32_t)(b & (0x3F >> len)) << 4;
        *partial_out = np;
        return feasible(w, set, np);
    }
    if ((b & 0xC0) != 0x80) return 0;
    uint32_t need = (partial & 3) - 1, len = partial >> 2 & 3;
    uint32_t v = (partial >> 4) << 6 | (b & 0x3F);
    if (!need) {
        static const uint32_t min[4] = {0, 0x80, 0x800, 0x10000};
        if (v < min[len] || v > 0x10FFFF) return 0;
        return gram_walk_advance(w, set, v);
    }
    uint32_t np = need | len << 2 | v << 4;
    *partial_out = np;
    return feasible(w, set, np);
}

/* Steps from a character boundary go through a 256-entry table per set: the trie walk takes most
 * of its steps there, and an array beats the hash memo by a wide margin. */
enum { MAX_TABLE_SETS = 1 << 16 };

int32_t gram_walk_step(gram_walk *w, int32_t set, uint32_t partial, uint8_t b,
                       uint32_t *partial_out) {
    if (partial || (uint32_t)set >= MAX_TABLE_SETS)
        return step_slow(w, set, partial, b, partial_out);
    if ((uint32_t)set >= w->first_cap) {
        uint32_t cap = w->first_cap ? w->first_cap : 256;
        while (cap <= (uint32_t)set)
            cap *= 2;
        int32_t **t = specd_alloc_array(cap, sizeof *t);
        if (!t) return step_slow(w, set, partial, b, partial_out);
        if (w->first) memcpy(t, w->first, w->first_cap * sizeof *t);
        specd_free(w->first);
        w->first = t;
        w->first_cap = cap;
    }
    int32_t *tab = w->first[set];
    if (!tab) {
        tab = w->first[set] = specd_alloc_array(256, sizeof *tab);
        if (!tab) return step_slow(w, set, partial, b, partial_out);
        memset(tab, 0xff, 256 * sizeof *tab);
    }
    if (tab[b] >= 0) {
        /* the partial character after a lead byte depends on the byte alone */
        uint32_t len = b < 0x80 ? 0 : (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : 3;
        *partial_out = len ? len | len << 2 | (uint32_t)(b & (0x3F >> len)) << 4 : 0;
        return tab[b];
    }
    int32_t r = step_slow(w, set, partial, b, partial_out);
    if (w->overflow == SPECD_OK) w->first[set][b] = r;
    return r;
}

int gram_walk_loop_classes(gram_walk *w, int32_t set) {
    if ((uint32_t)set >= w->loop_cap) {
        uint32_t cap = w->loop_cap ? w->loop_cap : 256;
        while (cap <= (uint32_t)set) cap *= 2;
        int16_t *l = specd_alloc_array(cap, sizeof *l);
        if (!l) return 0;
        memset(l, 0xff, cap * sizeof *l);
        if (w->loop) memcpy(l, w->loop, w->loop_cap * sizeof *l);
        specd_free(w->loop);
        w->loop = l;
        w->loop_cap = cap;
    }
    if (w->loop[set] < 0) {
        int ok[GRAM_N_CLASSES] = {1, 1, 1, 1, 1, 1, 1, 1, 0}; /* 0x80+: never one byte's loop */
        for (uint32_t b = 0; b < 0x80; b++) {
            int c = gram_byte_class((uint8_t)b);
            uint32_t partial;
            if (ok[c]) ok[c] = gram_walk_step(w, set, 0, (uint8_t)b, &partial) == set;
        }
        if (w->overflow != SPECD_OK) return 0;
        int16_t m = 0;
        for (int c = 0; c < GRAM_N_CLASSES; c++) m |= (int16_t)(ok[c] << c);
        w->loop[set] = m;
    }
    return w->loop[set];
}
