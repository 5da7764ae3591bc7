/* The `specd` command's subcommands: each takes the arguments after its name (argv[0] is the
 * subcommand's name) and returns the process exit code. */
#ifndef SPECD_CLI_COMMANDS_H
#define SPECD_CLI_COMMANDS_H

int specd_cmd_version(int argc, char **argv);
int specd_cmd_generate(int argc, char **argv);
int specd_cmd_ab(int argc, char **argv);
int specd_cmd_inspect(int argc, char **argv);
int specd_cmd_serve(int argc, char **argv);
int specd_cmd_policies(int argc, char **argv);
int specd_cmd_bench(int argc, char **argv);

#endif
