#include "cli/policy_help.h"

#include "policy/options.h"
#include "specd/policy.h"

#include <string.h>

void cli_list_policies(FILE *out) {
    for (int32_t i = 0; i < specd_policy_count(); i++) {
        const char *name = specd_policy_at(i)->name;
        int32_t n = 0;
        const specd_policy_option *rows = specd_policy_options_table(name, &n);
        fprintf(out, "%-10s", name);
        if (!n) fprintf(out, " (no options)");
        for (int32_t k = 0; k < n; k++) fprintf(out, "%s%s", k ? ", " : " options: ", rows[k].key);
        fprintf(out, "\n");
    }
    fprintf(out, "\n`--policy NAME --policy-opts help` describes a policy's options.\n");
}

int cli_print_policy_options(FILE *out, const char *policy, int markdown) {
    specd_option_table t = {NULL, 0};
    t.rows = specd_policy_options_table(policy, &t.n);
    if (!t.rows) {
        fprintf(stderr, "specd: unknown policy '%s' (`--policy help` lists them)\n", policy);
        return 2;
    }
    specd_options_print(out, &t, markdown);
    return 0;
}

int cli_policy_help_request(const char *policy, const char *policy_opts) {
    if (policy && !strcmp(policy, "help")) {
        cli_list_policies(stdout);
        return 0;
    }
    if (policy && policy_opts && !strcmp(policy_opts, "help")) {
        int32_t n;
        if (specd_policy_options_table(policy, &n))
            printf("policy %s takes --policy-opts key=value,... with these keys:\n\n", policy);
        return cli_print_policy_options(stdout, policy, 0);
    }
    return -1;
}

const char *cli_policy_key_with(const char *policy, uint32_t flag) {
    int32_t n = 0;
    const specd_policy_option *rows = specd_policy_options_table(policy, &n);
    for (int32_t i = 0; i < n; i++)
        if (rows[i].flags & flag) return rows[i].key;
    return NULL;
}

uint32_t cli_policy_flags(const char *policy) {
    const specd_policy_ops *ops = specd_policy_find(policy);
    return ops && ops->abi_version >= 2 ? ops->flags : 0;
}
