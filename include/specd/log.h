/* Logging: specd never prints from library code; it hands lines to a callback.
 *
 * The default callback writes WARN and ERROR lines to stderr. The callback is process-wide (like
 * llama_log_set): set it once before starting threads that use specd.
 */
#ifndef SPECD_LOG_H
#define SPECD_LOG_H

#include "specd/api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum specd_log_level {
    SPECD_LOG_DEBUG = 0,
    SPECD_LOG_INFO = 1,
    SPECD_LOG_WARN = 2,
    SPECD_LOG_ERROR = 3
} specd_log_level;

/* message is a complete line without the trailing newline; it is valid only during the call. */
typedef void (*specd_log_fn)(specd_log_level level, const char *message, void *user);

/* Installs fn (NULL restores the default) and the minimum level passed to it. */
SPECD_API void specd_log_set(specd_log_fn fn, void *user, specd_log_level min_level);

#ifdef __cplusplus
}
#endif
#endif
