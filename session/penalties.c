/* Sampling penalties as a row processor (session/penalties.h). */
#include "session/penalties.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <math.h>
#include <string.h>

struct specd_penalties {
    specd_penalties_params p;
    int32_t n_vocab;
    int64_t n_committed; /* prompt + output counted, to check the session's paths against */
    int32_t *count;      /* per token: times in the committed output (not the prompt) */
    uint8_t *seen;       /* per token: 1 in the prompt or output, 2 only in the row's drafts */
    int32_t *distinct;   /* the tokens seen, in first-seen order (at most n_vocab) */
    int32_t n_distinct;
};

int specd_penalties_active(const specd_penalties_params *p) {
    return p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f ||
           p->repetition_penalty != 1.0f;
}

specd_status specd_penalties_check(const specd_penalties_params *p, specd_error *err) {
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return specd_fail(err, SPECD_E_INVALID_ARG, "presence_penalty %g is outside [-2, 2]",
                          (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return specd_fail(err, SPECD_E_INVALID_ARG, "frequency_penalty %g is outside [-2, 2]",
                          (double)p->frequency_penalty);
    if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= 10.0f))
        return specd_fail(err, SPECD_E_INVALID_ARG, "repetition_penalty %g is outside (0, 10]",
                          (double)p->repetition_penalty);
    return SPECD_OK;
}

static void see(specd_penalties *pen, int32_t t, uint8_t mark) {
    if (pen->seen[t]) return;
    pen->seen[t] = mark;
    pen->distinct[pen->n_distinct++] = t;
}

void specd_penalties_destroy(specd_penalties *pen) {
    if (!pen) return;
    specd_free(pen->count);
    specd_free(pen->seen);
    specd_free(pen->distinct);
    specd_free(pen);
}

specd_status specd_penalties_create(const specd_penalties_params *p, int32_t n_vocab,
                                    const int32_t *prompt, int64_t n_prompt,
                                    specd_penalties **out, specd_error *err) {
    SPECD_TRY(specd_penalties_check(p, err));
    specd_penalties *pen = specd_alloc_array(1, sizeof *pen);
    if (pen) {
        pen->count = specd_alloc_array((size_t)n_vocab, sizeof(int32_t));
        pen->seen = specd_alloc_array((size_t)n_vocab, 1);
        pen->distinct = specd_alloc_array((size_t)n_vocab, sizeof(int32_t));
    }
    if (!pen || !pen->count || !pen->seen || !pen->distinct) {
        specd_penalties_destroy(pen);
        return specd_fail(err, SPECD_E_NOMEM, "penalties: out of memory");
    }
    pen->p = *p;
    pen->n_vocab = n_vocab;
    for (int64_t i = 0; i < n_prompt; i++) see(pen, prompt[i], 1);
    pen->n_committed = n_prompt;
    *out = pen;
    return SPECD_OK;
}

/* One token's logit; the same operations in the same order for every row, so a draft's row
 * and plain decoding's row at that position get the same bits. */
static float penalise(const specd_penalties_params *p, float l, int32_t count) {
    if (p->repetition_penalty != 1.0f)
        l = l > 0.0f ? l / p->repetition_penalty : l * p->repetition_penalty;
    if (count > 0) l -= (float)count * p->frequency_penalty + p->presence_penalty;
    return l;
}

static specd_status pen_apply(void *user, const specd_row_path *path, float *logits,
                              int32_t n_vocab, specd_error *err) {
    specd_penalties *pen = user;
    if (path->n_committed != pen->n_committed || n_vocab != pen->n_vocab)
        return specd_fail(err, SPECD_E_STATE,
                          "penalties: path has %lld committed tokens of vocabulary %d, state %lld "
                          "of %d", (long long)path->n_committed, n_vocab,
                          (long long)pen->n_committed, pen->n_vocab);
    /* the row's drafts counted on top of the committed output, undone below */
    int32_t n0 = pen->n_distinct;
    for (int64_t i = path->n_committed; i < path->n_tokens; i++) {
        int32_t t = path->tokens[i];
        pen->count[t]++;
        see(pen, t, 2);
    }
    for (int32_t i = 0; i < pen->n_distinct; i++) {
        int32_t t = pen->distinct[i];
        logits[t] = penalise(&pen->p, logits[t], pen->count[t]);
    }
    for (int64_t i = path->n_committed; i < path->n_tokens; i++) pen->count[path->tokens[i]]--;
    for (int32_t i = n0; i < pen->n_distinct; i++) pen->seen[pen->distinct[i]] = 0;
    pen->n_distinct = n0;
    return SPECD_OK;
}

static void pen_commit(void *user, const int32_t *tokens, int32_t n) {
    specd_penalties *pen = user;
    for (int32_t i = 0; i < n; i++) {
        pen->count[tokens[i]]++;
        see(pen, tokens[i], 1);
    }
    pen->n_committed += n;
}

specd_row_processor specd_penalties_processor(specd_penalties *pen) {
    return (specd_row_processor){.apply = pen_apply, .commit = pen_commit, .user = pen};
}
