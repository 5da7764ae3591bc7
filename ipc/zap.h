/* ZAP (ZeroMQ authentication protocol, RFC 27) handler for CURVE: admits only clients whose public
 * key is on an allow-list. Without it a tcp:// daemon would admit any client that knows the
 * server's (public) key. One handler per ZeroMQ context; it runs on its own thread. */
#ifndef SPECD_IPC_ZAP_H
#define SPECD_IPC_ZAP_H

#include <stddef.h>

#include "specd/status.h"

typedef struct specd_ipc_zap specd_ipc_zap;

/* allowed: n Z85 public keys (40 characters each), copied. Caller owns *out; stop it before
 * terminating ctx. */
specd_status specd_ipc_zap_start(void *ctx, const char *const *allowed, size_t n,
                                 specd_ipc_zap **out, specd_error *err);
void specd_ipc_zap_stop(specd_ipc_zap *z);
/* Handshakes refused so far. */
size_t specd_ipc_zap_refused(const specd_ipc_zap *z);

#endif
