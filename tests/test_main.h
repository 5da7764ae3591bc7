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

/* How many of a model test's n prompts to run: all of them, or under the sanitizers
 * (SPECD_TEST_SANITIZED, tests/CMakeLists.txt) the first alone. The sanitizers look for memory and
 * undefined-behaviour errors in the code a run goes through, and one prompt goes through the same
 * policies, options and samplers as two, at a sixth of the speed; the uninstrumented build checks
 * every prompt's tokens. */
#ifdef SPECD_TEST_SANITIZED
#define SPECD_TEST_PROMPTS(n) 1
#else
#define SPECD_TEST_PROMPTS(n) (n)
#endif

#endif
