#include "common/status_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *specd_status_name(specd_status status) {
    switch (status) {
    case SPECD_OK: return "SPECD_OK";
    case SPECD_E_INVALID_ARG: return "SPECD_E_INVALID_ARG";
    case SPECD_E_NOMEM: return "SPECD_E_NOMEM";
    case SPECD_E_IO: return "SPECD_E_IO";
    case SPECD_E_FORMAT: return "SPECD_E_FORMAT";
    case SPECD_E_UNSUPPORTED: return "SPECD_E_UNSUPPORTED";
    case SPECD_E_NUMERIC: return "SPECD_E_NUMERIC";
    case SPECD_E_MISMATCH: return "SPECD_E_MISMATCH";
    case SPECD_E_PROTOCOL: return "SPECD_E_PROTOCOL";
    case SPECD_E_TIMEOUT: return "SPECD_E_TIMEOUT";
    case SPECD_E_PEER: return "SPECD_E_PEER";
    case SPECD_E_STATE: return "SPECD_E_STATE";
    case SPECD_E_INTERNAL: return "SPECD_E_INTERNAL";
    }
    return "SPECD_E_UNKNOWN";
}

void specd_error_clear(specd_error *err) {
    if (!err) return;
    err->status = SPECD_OK;
    err->message[0] = '\0';
}

specd_status specd_fail(specd_error *err, specd_status status, const char *fmt, ...) {
    if (err) {
        err->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}
