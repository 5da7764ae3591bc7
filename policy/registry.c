#include "policy/builtin.h"

#include <string.h>

static const specd_policy_ops *const builtin[] = {
    &specd_policy_none,
    &specd_policy_ngram,
    &specd_policy_suffix,
    &specd_policy_draft,
    &specd_policy_layerskip,
    &specd_policy_remote,
    &specd_policy_isd,
    &specd_policy_risd,
    &specd_policy_mrp,
    &specd_policy_wedlm,
    &specd_policy_sdar,
    &specd_policy_simsd,
    &specd_policy_recycle,
};

/* builtin[i]'s option table */
static const specd_option_table *const tables[] = {
    &specd_none_options,  &specd_ngram_options, &specd_suffix_options, &specd_draft_options, &specd_layerskip_options,
    &specd_remote_options, &specd_isd_options,  &specd_risd_options,   &specd_mrp_options,
    &specd_wedlm_options, &specd_sdar_options,  &specd_simsd_options,  &specd_recycle_options,
};

_Static_assert(sizeof tables / sizeof tables[0] == sizeof builtin / sizeof builtin[0],
               "every built-in policy has an option table");

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

const specd_policy_option *specd_policy_options_table(const char *name, int32_t *n) {
    *n = 0;
    if (!name) return NULL;
    for (int32_t i = 0; i < specd_policy_count(); i++)
        if (!strcmp(builtin[i]->name, name)) {
            *n = tables[i]->n;
            /* a table of no rows still says "this policy exists" */
            static const specd_policy_option no_rows[1];
            return tables[i]->n ? tables[i]->rows : no_rows;
        }
    return NULL;
}
