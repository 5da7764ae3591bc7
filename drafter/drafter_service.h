/* specd-drafter's request handlers (state: the sequences it drafts for). */
#ifndef SPECD_DRAFTER_SERVICE_H
#define SPECD_DRAFTER_SERVICE_H

#include "ipc/service.h"

specd_status specd_drafter_handlers_create(const specd_ipc_service_params *p, specd_ipc_handlers *h,
                                           specd_error *err);
void specd_drafter_handlers_destroy(specd_ipc_handlers *h);

#endif
