/* n-gram (prompt lookup) drafting: find the most recent earlier occurrence of the sequence's
 * last n tokens, longest n first, and propose the tokens that followed it. Training-free and
 * model-free: it pays on repetitive text (code edits, quoting the prompt, lists). */
#include "policy/builtin.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "policy/options.h"

#include <stddef.h>

typedef struct ngram_state {
    int32_t n_max;  /* longest suffix to match */
    int32_t n_min;  /* shortest suffix worth trusting */
    int32_t k;      /* most tokens proposed */
} ngram_state;

static const specd_policy_option option_rows[] = {
    {.key = "n", .kind = SPECD_OPTION_INT, .offset = offsetof(ngram_state, n_max), .dflt = "4",
     .min = 1, .max = 16, .help = "longest suffix matched"},
    {.key = "n_min", .kind = SPECD_OPTION_INT, .offset = offsetof(ngram_state, n_min),
     .dflt = "2", .min = 1, .max = 16, .help = "shortest suffix worth trusting (at most n)"},
    {.key = "k", .kind = SPECD_OPTION_INT, .offset = offsetof(ngram_state, k),
     .dflt = "max_draft", .min = 1, .flags = SPECD_OPTION_MAX_IS_DRAFT | SPECD_OPTION_DEFAULT_DERIVED,
     .help = "most tokens proposed"},
};
const specd_option_table specd_ngram_options = SPECD_OPTION_TABLE(option_rows);

static specd_status ngram_create(const specd_policy_env *env, const char *options, void **state,
                                 specd_error *err) {
    ngram_state cfg = {.k = env->max_draft};
    const specd_option_bounds bounds = {.max_draft = env->max_draft};
    SPECD_TRY(specd_options_parse_table("ngram", &specd_ngram_options, &bounds, options, &cfg, err));
    if (cfg.n_min > cfg.n_max)
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy ngram: n_min=%d exceeds n=%d",
                          cfg.n_min, cfg.n_max);
    ngram_state *s = specd_alloc(sizeof *s);
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "policy ngram: out of memory");
    *s = cfg;
    *state = s;
    return SPECD_OK;
}

static void ngram_destroy(void *state) { specd_free(state); }

/* Latest start j < n_history - n of an earlier copy of the last n tokens, or -1. */
static int64_t find_latest(const int32_t *h, int64_t n_history, int32_t n) {
    const int32_t *suffix = h + n_history - n;
    for (int64_t j = n_history - n - 1; j >= 0; j--) {
        int32_t m = 0;
        while (m < n && h[j + m] == suffix[m]) m++;
        if (m == n) return j;
    }
    return -1;
}

static specd_status ngram_propose(void *state, const int32_t *history, int64_t n_history,
                                  int32_t max_draft, int32_t *draft, int32_t *n_draft, float *q,
                                  int *has_q, specd_error *err) {
    (void)q;
    (void)err;
    const ngram_state *s = state;
    int32_t k = s->k < max_draft ? s->k : max_draft;
    *n_draft = 0;
    *has_q = 0;
    for (int32_t n = s->n_max; n >= s->n_min; n--) {
        if (n_history <= n) continue;
        int64_t j = find_latest(history, n_history, n);
        if (j < 0) continue;
        int64_t from = j + n;
        int32_t m = 0;
        while (m < k && from + m < n_history) {
            draft[m] = history[from + m];
            m++;
        }
        *n_draft = m;
        return SPECD_OK;
    }
    return SPECD_OK;
}

const specd_policy_ops specd_policy_ngram = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .name = "ngram",
    .flags = SPECD_POLICY_SHADOW_DRAFTS, /* microseconds a proposal, from the history alone */
    .options_help = "n=4 (longest suffix), n_min=2 (shortest), k=max_draft (tokens proposed)",
    .create = ngram_create,
    .destroy = ngram_destroy,
    .propose = ngram_propose,
};
