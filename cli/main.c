/* specd: one binary, one subcommand per job. */
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"version", specd_cmd_version, "print the library version and the CPU kernel path"},
    {"inspect", specd_cmd_inspect, "show a GGUF model's metadata, tokenizer and tensors"},
    {"generate", specd_cmd_generate, "generate text, plainly or with a speculative policy"},
    {"ab", specd_cmd_ab, "A/B: plain vs speculative on a prompt set, proving identical output"},
    {"bench", specd_cmd_bench, "benchmarks users compare on: spec-bench (Spec-Bench's groups)"},
    {"serve", specd_cmd_serve, "an OpenAI-compatible HTTP server on the batch loop"},
    {"policies", specd_cmd_policies, "each policy's --policy-opts keys (--markdown: for docs)"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: specd COMMAND [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`specd COMMAND --help` describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "specd: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
