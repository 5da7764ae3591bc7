/* CHECK for the tests that run outside cmocka (devices, daemons, models): a failed condition prints
 * "FAIL file:line: " and its printf-style message, then runs on_fail (the test's way out: exit(1),
 * or its cleanup and a return). Each test defines its CHECK from CHECK_OR. */
#ifndef SPECD_TESTS_TEST_CHECK_H
#define SPECD_TESTS_TEST_CHECK_H

#include <stdio.h>

#define CHECK_OR(c, on_fail, ...)                                                                  \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            on_fail;                                                                               \
        }                                                                                          \
    } while (0)

#endif
