/* Internal logging entry point; public configuration is in specd/log.h. */
#ifndef SPECD_COMMON_LOG_INTERNAL_H
#define SPECD_COMMON_LOG_INTERNAL_H

#include "specd/log.h"

void specd_log(specd_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
