#include "cli/commands.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "specd/specd.h"

#include <stdio.h>

/* The version and the CPU kernel path in use (SPECD_CPU_PATH or the best this machine runs);
 * a refused SPECD_CPU_PATH is an error, as it is to every command that loads a model. */
int specd_cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("specd %s\n", specd_version());
    specd_cpu_path path;
    char msg[160];
    const int ok = specd_cpu_path_get(&path, msg, sizeof msg);
    if (!ok) {
        fprintf(stderr, "specd: %s\n", msg);
        return 1;
    }
    printf("cpu path: %s (best here: %s; SPECD_CPU_PATH=avx512|avx2|scalar forces one)\n",
           specd_cpu_path_name(path), specd_cpu_path_name(specd_cpu_path_best()));
    return 0;
}
