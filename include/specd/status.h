/* Status codes and readable error messages, shared by every specd call.
 *
 * Every fallible call returns a specd_status and takes an optional `specd_error *err` as its last
 * argument. On failure the call fills err (when not NULL) with the code and a message naming what
 * was wrong, and leaves its outputs untouched unless its own documentation says otherwise.
 * specd_error is a plain caller-owned struct: no allocation, safe to put on the stack, reusable.
 */
#ifndef SPECD_STATUS_H
#define SPECD_STATUS_H

#include "specd/api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum specd_status {
    SPECD_OK = 0,
    SPECD_E_INVALID_ARG,  /* a caller-supplied argument is out of its documented domain */
    SPECD_E_NOMEM,        /* an allocation failed */
    SPECD_E_IO,           /* a file or OS call failed (errno text in the message) */
    SPECD_E_FORMAT,       /* bytes from outside (file, message) are malformed or hostile */
    SPECD_E_UNSUPPORTED,  /* well-formed but not something specd handles (type, architecture) */
    SPECD_E_NUMERIC,      /* NaN/Inf where a finite number is required, or an empty distribution */
    SPECD_E_MISMATCH,     /* two inputs disagree (vocab sizes, shapes, versions, fingerprints) */
    SPECD_E_PROTOCOL,     /* a peer broke the message sequence or sent a stale reference */
    SPECD_E_TIMEOUT,      /* a peer did not answer in time */
    SPECD_E_PEER,         /* a peer is gone or refused the request */
    SPECD_E_STATE,        /* the call is not valid in the object's current state */
    SPECD_E_INTERNAL      /* a bug in specd: please report it */
} specd_status;

#define SPECD_ERROR_MESSAGE_MAX 256

typedef struct specd_error {
    specd_status status;
    char message[SPECD_ERROR_MESSAGE_MAX];
} specd_error;

/* Short constant name of a status code ("SPECD_E_FORMAT"); never NULL. */
SPECD_API const char *specd_status_name(specd_status status);

/* Clears err to SPECD_OK with an empty message. err may be NULL. */
SPECD_API void specd_error_clear(specd_error *err);

#ifdef __cplusplus
}
#endif
#endif
