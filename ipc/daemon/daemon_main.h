/* Shared main() of the two daemons (specd-drafter, specd-verifier): options, logging to stderr,
 * SIGTERM/SIGINT through a signalfd (the service drains what it has received, then we exit 0).
 * Program code, not library code: it prints and is linked only into the daemons. */
#ifndef SPECD_IPC_DAEMON_MAIN_H
#define SPECD_IPC_DAEMON_MAIN_H

#include "ipc/service.h"

/* What the operator fixed at start beyond the service parameters: the policies a drafter serves,
 * as "NAME=SPEC" (--policy, repeatable; SPEC is "policy" or "policy:options"). Peers choose among
 * them by NAME and never pass options or paths of their own. */
#define SPECD_DAEMON_MAX_POLICIES 16
typedef struct specd_daemon_config {
    const char *policies[SPECD_DAEMON_MAX_POLICIES];
    size_t n_policies;
    /* (drafter) --device: where the served policies' own contexts (draft models) live; without
     * the flag SPECD_DEVICE's choice */
    int32_t device;
    int32_t device_index;
    /* (drafter) --q-device: where the draft distributions go to hosts: SPECD_DEVICE_CPU (zero,
     * the default) sealed host memory buffers, SPECD_DEVICE_CUDA IPC buffers of device
     * q_device_index */
    int32_t q_device;
    int32_t q_device_index;
} specd_daemon_config;

/* make_handlers is called once the options are parsed; it fills *h (and may allocate state it
 * frees in free_handlers). Returns the process exit code. */
typedef specd_status (*specd_daemon_setup_fn)(const specd_ipc_service_params *p,
                                              const specd_daemon_config *c, specd_ipc_handlers *h,
                                              specd_error *err);
typedef void (*specd_daemon_teardown_fn)(specd_ipc_handlers *h);

int specd_daemon_main(int argc, char **argv, const char *program, specd_ipc_role role,
                      const char *description, specd_daemon_setup_fn setup,
                      specd_daemon_teardown_fn teardown);

#endif
