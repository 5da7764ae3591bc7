/* specd-drafter: serves draft proposals to a host over ZeroMQ (see ipc/specd.proto), and with
 * --metrics-port its counters as Prometheus text over HTTP (serve/serve_daemon_metrics.h). */
#include <stdio.h>
#include <string.h>

#include "drafter/drafter_service.h"
#include "ipc/daemon/daemon_main.h"
#include "serve/serve_daemon_metrics.h"

int main(int argc, char **argv) {
    int port;
    const char *host = NULL;
    if (serve_daemon_metrics_args(&argc, argv, "specd-drafter", &port, &host)) return 2;
    serve_daemon_metrics_configure("specd-drafter", port, host, specd_drafter_handlers_create,
                                   specd_drafter_handlers_destroy);
    int rc = specd_daemon_main(argc, argv, "specd-drafter", SPECD_IPC_ROLE_DRAFTER,
                               "specd drafter daemon: keeps each sequence's history and proposes "
                               "draft tokens for the host to verify, with the proposal policy the "
                               "host names at OpenSeq (\"name\" or \"name:options\"; default "
                               "ngram).",
                               serve_daemon_metrics_setup, serve_daemon_metrics_teardown);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help")) serve_daemon_metrics_help();
    return rc;
}
