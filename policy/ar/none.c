/* "none": proposes nothing, so every step is a plain decode step. The A/B harness's baseline runs
 * through exactly the same session code as the speculative run. */
#include "policy/builtin.h"

#include "policy/options.h"

#include <stddef.h>

const specd_option_table specd_none_options = {NULL, 0};

static specd_status none_create(const specd_policy_env *env, const char *options, void **state,
                                specd_error *err) {
    (void)env;
    *state = NULL;
    /* it knows no option: any key is a typo the user must hear about */
    char nothing;
    return specd_options_parse_table("none", &specd_none_options, NULL, options, &nothing, err);
}

static void none_destroy(void *state) { (void)state; }

static specd_status none_propose(void *state, const int32_t *history, int64_t n_history,
                                 int32_t max_draft, int32_t *draft, int32_t *n_draft, float *q,
                                 int *has_q, specd_error *err) {
    (void)state, (void)history, (void)n_history, (void)max_draft, (void)draft, (void)q, (void)err;
    *n_draft = 0;
    *has_q = 0;
    return SPECD_OK;
}

const specd_policy_ops specd_policy_none = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .name = "none",
    .options_help = "(no options) plain decoding through the speculative loop",
    .create = none_create,
    .destroy = none_destroy,
    .propose = none_propose,
};
