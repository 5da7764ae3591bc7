#include "policy/builtin.h"

#include <string.h>

static const specd_policy_ops *const builtin[] = {
    &specd_policy_none,
    &specd_policy_ngram,
    &specd_policy_draft,
    &specd_policy_layerskip,
    &specd_policy_remote,
    &specd_policy_isd,
    &specd_policy_risd,
    &specd_policy_mrp,
    &specd_policy_wedlm,
    &specd_policy_sdar,
    &specd_policy_simsd,
};

int32_t specd_policy_count(void) { return (int32_t)(sizeof builtin / sizeof builtin[0]); }

const specd_policy_ops *specd_policy_at(int32_t i) {
    return i >= 0 && i < specd_policy_count() ? builtin[i] : NULL;
}

const specd_policy_ops *specd_policy_find(const char *name) {
    if (!name) return NULL;
    for (int32_t i = 0; i < specd_policy_count(); i++)
        if (!strcmp(builtin[i]->name, name)) return builtin[i];
    return NULL;
}
