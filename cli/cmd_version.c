#include "cli/commands.h"
#include "specd/specd.h"

#include <stdio.h>

int specd_cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("specd %s\n", specd_version());
    return 0;
}
