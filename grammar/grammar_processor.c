/* specd_grammar_processor: the grammar matcher behind the row-processor callbacks. Two matchers
 * keep the work linear in a step's rows: `base` follows the committed output (advanced as the
 * paths show it grew, rebuilt from the start when they show it shrank), `row` follows the
 * drafts of the last row asked for, so a chain's next row costs one accept. A tree node whose
 * path does not extend the last row's replays its drafts from `base`. */
#include "specd/grammar_processor.h"

#include "common/alloc.h"
#include "common/clock.h"
#include "common/status_internal.h"

#include <string.h>

struct specd_grammar_processor {
    const specd_grammar *g;
    int jump_forward;
    specd_grammar_matcher *base, *row, *probe;
    int64_t n_base;      /* output tokens base has taken */
    int32_t *row_drafts; /* the drafts row has taken past base */
    int64_t n_row, row_cap;
    int row_valid;
    specd_grammar_processor_stats stats;
};

specd_status specd_grammar_processor_create(const specd_grammar *g, int jump_forward,
                                            specd_grammar_processor **out, specd_error *err) {
    if (!g || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "grammar processor: NULL argument");
    specd_grammar_processor *p = specd_alloc_array(1, sizeof *p);
    if (!p) return specd_fail(err, SPECD_E_NOMEM, "grammar processor: no memory");
    p->g = g;
    p->jump_forward = jump_forward;
    specd_status st = specd_grammar_matcher_create(g, &p->base, err);
    if (st == SPECD_OK) st = specd_grammar_matcher_create(g, &p->row, err);
    if (st == SPECD_OK) st = specd_grammar_matcher_create(g, &p->probe, err);
    if (st != SPECD_OK) {
        specd_grammar_processor_destroy(p);
        return st;
    }
    *out = p;
    return SPECD_OK;
}

void specd_grammar_processor_destroy(specd_grammar_processor *p) {
    if (!p) return;
    specd_grammar_matcher_destroy(p->base);
    specd_grammar_matcher_destroy(p->row);
    specd_grammar_matcher_destroy(p->probe);
    specd_free(p->row_drafts);
    specd_free(p);
}

static specd_status take(specd_grammar_matcher *m, int32_t token, specd_error *err) {
    specd_status st = specd_grammar_matcher_accept(m, token);
    if (st != SPECD_OK)
        return specd_fail(err, st, "grammar: token %d is not allowed after the path it follows",
                          (int)token);
    return SPECD_OK;
}

/* base after the committed output of path. */
static specd_status sync_base(specd_grammar_processor *p, const specd_row_path *path,
                              specd_error *err) {
    const int32_t *out = path->tokens + path->n_prompt;
    int64_t n_out = path->n_committed - path->n_prompt;
    if (n_out < p->n_base) { /* the sequence was rolled back: replay from the start */
        specd_grammar_matcher *fresh = NULL;
        SPECD_TRY(specd_grammar_matcher_create(p->g, &fresh, err));
        specd_grammar_matcher_destroy(p->base);
        p->base = fresh;
        p->n_base = 0;
    }
    if (n_out != p->n_base) p->row_valid = 0;
    for (; p->n_base < n_out; p->n_base++) SPECD_TRY(take(p->base, out[p->n_base], err));
    return SPECD_OK;
}

static specd_status remember(specd_grammar_processor *p, int32_t token, specd_error *err) {
    if (p->n_row == p->row_cap) {
        int64_t cap = p->row_cap ? 2 * p->row_cap : 64;
        int32_t *d = specd_alloc_array((size_t)cap, sizeof *d);
        if (!d) return specd_fail(err, SPECD_E_NOMEM, "grammar processor: no memory");
        if (p->n_row) memcpy(d, p->row_drafts, (size_t)p->n_row * sizeof *d);
        specd_free(p->row_drafts);
        p->row_drafts = d;
        p->row_cap = cap;
    }
    p->row_drafts[p->n_row++] = token;
    return SPECD_OK;
}

/* row after the whole of path (its committed output, then its drafts). */
static specd_status sync_row(specd_grammar_processor *p, const specd_row_path *path,
                             specd_error *err) {
    SPECD_TRY(sync_base(p, path, err));
    const int32_t *drafts = path->tokens + path->n_committed;
    int64_t n = path->n_tokens - path->n_committed;
    int extends = p->row_valid && p->n_row <= n &&
                  (p->n_row == 0 || !memcmp(p->row_drafts, drafts, (size_t)p->n_row * sizeof *drafts));
    if (!extends) {
        SPECD_TRY(specd_grammar_matcher_copy(p->row, p->base));
        p->n_row = 0;
        p->row_valid = 1;
    }
    while (p->n_row < n) {
        int32_t t = drafts[p->n_row];
        specd_status st = take(p->row, t, err);
        if (st != SPECD_OK) {
            p->row_valid = 0;
            return st;
        }
        SPECD_TRY(remember(p, t, err));
    }
    return SPECD_OK;
}

static specd_status gp_apply(void *user, const specd_row_path *path, float *logits,
                             int32_t n_vocab, specd_error *err) {
    specd_grammar_processor *p = user;
    uint64_t t0 = specd_now_ns();
    SPECD_TRY(sync_row(p, path, err));
    specd_status st = specd_grammar_matcher_apply(p->row, logits, n_vocab);
    if (st != SPECD_OK)
        return specd_fail(err, st, "grammar: the logits have %d tokens, the grammar's vocabulary %d",
                          (int)n_vocab, (int)specd_grammar_n_vocab(p->g));
    p->stats.n_rows++;
    p->stats.mask_ns += specd_now_ns() - t0;
    return SPECD_OK;
}

static int32_t gp_admit(void *user, const specd_row_path *path, const int32_t *drafts,
                        int32_t n_drafts) {
    specd_grammar_processor *p = user;
    if (sync_row(p, path, NULL) != SPECD_OK) return 0;
    if (specd_grammar_matcher_copy(p->probe, p->row) != SPECD_OK) return 0;
    int32_t k = 0;
    while (k < n_drafts && specd_grammar_matcher_accept(p->probe, drafts[k]) == SPECD_OK) k++;
    p->stats.n_cut += n_drafts - k;
    return k;
}

static int32_t gp_forced(void *user, const specd_row_path *path, int32_t *out, int32_t max) {
    specd_grammar_processor *p = user;
    if (!p->jump_forward || max <= 0 || sync_row(p, path, NULL) != SPECD_OK) return 0;
    int32_t n = specd_grammar_matcher_forced(p->row, out, max);
    p->stats.n_forced += n;
    return n;
}

specd_row_processor specd_grammar_processor_ops(specd_grammar_processor *p) {
    return (specd_row_processor){
        .apply = gp_apply, .admit = gp_admit, .forced = gp_forced, .user = p};
}

void specd_grammar_processor_get_stats(const specd_grammar_processor *p,
                                       specd_grammar_processor_stats *out) {
    *out = p->stats;
}
