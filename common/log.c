#include "common/log_internal.h"

#include <stdarg.h>
#include <stdio.h>

static void log_to_stderr(specd_log_level level, const char *message, void *user) {
    (void)user;
    static const char *const names[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "specd %s: %s\n", names[level & 3], message);
}

/* The one piece of process-wide state specd keeps, by the same design as llama_log_set: a host
 * routes every library's logs once, at start-up, before it starts threads. */
static specd_log_fn sink_fn = log_to_stderr;
static void *sink_user;
static specd_log_level sink_min_level = SPECD_LOG_WARN;

void specd_log_set(specd_log_fn fn, void *user, specd_log_level min_level) {
    sink_fn = fn ? fn : log_to_stderr;
    sink_user = fn ? user : NULL;
    sink_min_level = min_level;
}

void specd_log(specd_log_level level, const char *fmt, ...) {
    if (level < sink_min_level) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    sink_fn(level, line, sink_user);
}
