/* Shared helpers for cmocka tests. */
#ifndef SPECD_TESTS_TEST_MAIN_H
#define SPECD_TESTS_TEST_MAIN_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

/* Exit code ctest reports as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt). */
#define SPECD_TEST_SKIP 77

/* Path of the real default model, from the environment ctest sets; NULL if unset. */
static inline const char *specd_test_model_path(void) { return getenv("SPECD_TEST_MODEL"); }

#endif
