/* What the policies say about themselves: `specd policies`, `--policy help` / `--list-policies`
 * and `--policy-opts help`, all printed from the option tables the policies declare. */
#ifndef SPECD_CLI_POLICY_HELP_H
#define SPECD_CLI_POLICY_HELP_H

#include <stdint.h>
#include <stdio.h>

/* One line per registered policy: its name and the keys it takes. */
void cli_list_policies(FILE *out);

/* policy's option table (markdown: as docs/policies.md holds it); 0, or 2 for an unknown policy
 * (said on stderr). */
int cli_print_policy_options(FILE *out, const char *policy, int markdown);

/* When the parsed flags ask for help (policy "help", or options "help"), prints it and returns
 * the exit code; else -1. */
int cli_policy_help_request(const char *policy, const char *policy_opts);

/* The key of policy's first option row with flag (SPECD_OPTION_*), or NULL. */
const char *cli_policy_key_with(const char *policy, uint32_t flag);

/* The built-in policy's specd_policy_ops.flags (0 for an unknown one or an ABI 1 policy). */
uint32_t cli_policy_flags(const char *policy);

#endif
