/* specd policies: every built-in policy's options, from the tables the policies declare.
 * --markdown writes what docs/policies.md's option tables are (a test keeps them equal). */
#include "cli/commands.h"
#include "cli/policy_help.h"
#include "specd/policy.h"

#include <stdio.h>
#include <string.h>

int specd_cmd_policies(int argc, char **argv) {
    int markdown = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--markdown")) {
            markdown = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: specd policies [--markdown]\n\nLists each built-in policy's "
                   "--policy-opts keys (type, default, range, meaning).\n");
            return 0;
        } else {
            fprintf(stderr, "specd policies: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    for (int32_t i = 0; i < specd_policy_count(); i++) {
        const char *name = specd_policy_at(i)->name;
        if (markdown)
            printf("%s**`%s`**\n\n", i ? "\n" : "", name);
        else
            printf("%spolicy %s\n", i ? "\n" : "", name);
        if (cli_print_policy_options(stdout, name, markdown)) return 1;
    }
    return 0;
}
