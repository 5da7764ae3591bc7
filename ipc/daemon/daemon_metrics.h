/* --metrics-port for the daemons (specd-drafter, specd-verifier): their handlers wrapped to count
 * what they do, served as Prometheus text at /metrics (and /health) on a loopback HTTP port, with
 * the names `specd serve` uses (specd:spec_decode_num_drafts_total and the rest). The wrapper
 * counts on the service thread; the HTTP thread reads the counts under a mutex. */
#ifndef SPECD_IPC_DAEMON_METRICS_H
#define SPECD_IPC_DAEMON_METRICS_H

#include "ipc/daemon/daemon_main.h"

/* Removes "--metrics-port N" / "--metrics-port=N" and "--metrics-host A" from argv (shifting the
 * rest, updating *argc) before the daemon's own option parser sees them. *port stays -1 when
 * absent. Returns 0, or 2 after printing why a value is bad. */
int specd_daemon_metrics_args(int *argc, char **argv, const char *program, int *port,
                              const char **host);
/* The lines --help adds for those options. */
void specd_daemon_metrics_help(void);

/* A setup/teardown pair for specd_daemon_main: calls inner_setup, then (when
 * specd_daemon_metrics_configure gave a port) wraps the handlers and starts the HTTP server. */
void specd_daemon_metrics_configure(const char *program, int port, const char *host,
                                    specd_daemon_setup_fn inner_setup,
                                    specd_daemon_teardown_fn inner_teardown);
specd_status specd_daemon_metrics_setup(const specd_ipc_service_params *p,
                                        const specd_daemon_config *c, specd_ipc_handlers *h,
                                        specd_error *err);
void specd_daemon_metrics_teardown(specd_ipc_handlers *h);

/* The whole main() of a daemon: --metrics-port/--metrics-host taken out of argv, then
 * specd_daemon_main with setup/teardown wrapped by the metrics, and the metrics' --help lines.
 * Returns the process exit code. */
int specd_daemon_metrics_main(int argc, char **argv, const char *program, specd_ipc_role role,
                              const char *description, specd_daemon_setup_fn setup,
                              specd_daemon_teardown_fn teardown);

#endif
