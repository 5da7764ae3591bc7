/* specd-verifier's request handlers. */
#ifndef SPECD_VERIFIER_DAEMON_SERVICE_H
#define SPECD_VERIFIER_DAEMON_SERVICE_H

#include "ipc/daemon/daemon_main.h"
#include "ipc/service.h"

specd_status specd_verifier_handlers_create(const specd_ipc_service_params *p,
                                            const specd_daemon_config *c, specd_ipc_handlers *h,
                                            specd_error *err);
void specd_verifier_handlers_destroy(specd_ipc_handlers *h);

#endif
