/* Internal helper for filling a specd_error. */
#ifndef SPECD_COMMON_STATUS_INTERNAL_H
#define SPECD_COMMON_STATUS_INTERNAL_H

#include "specd/status.h"

/* Fills err (may be NULL) with status and a printf-style message; returns status so a failing
 * path reads `return specd_fail(err, SPECD_E_FORMAT, "tensor %s: ...", name);`. */
specd_status specd_fail(specd_error *err, specd_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Evaluates a specd_status expression and returns it from the caller when it is not SPECD_OK. */
#define SPECD_TRY(expr)                                                                            \
    do {                                                                                           \
        specd_status specd_try_status_ = (expr);                                                   \
        if (specd_try_status_ != SPECD_OK) return specd_try_status_;                               \
    } while (0)

#endif
