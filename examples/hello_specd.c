/* The smallest program on the public API: checks the header and library versions agree and
 * shows how errors are reported. Build: cc hello_specd.c $(pkg-config --cflags --libs specd) */
#include <specd/specd.h>

#include <stdio.h>
#include <string.h>

int main(void) {
    if (strcmp(specd_version(), SPECD_VERSION_STRING) != 0) {
        fprintf(stderr, "header %s but library %s\n", SPECD_VERSION_STRING, specd_version());
        return 1;
    }
    specd_error err;
    specd_error_clear(&err);
    printf("specd %s linked; status %s\n", specd_version(), specd_status_name(err.status));
    return 0;
}
