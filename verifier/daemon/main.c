/* specd-verifier: checks drafts against the target's logits for a host (see ipc/specd.proto),
 * and with --metrics-port serves its counters as Prometheus text over HTTP
 * (serve/serve_daemon_metrics.h). */
#include <stdio.h>
#include <string.h>

#include "ipc/daemon/daemon_main.h"
#include "serve/serve_daemon_metrics.h"
#include "verifier/daemon/verifier_service.h"

int main(int argc, char **argv) {
    int port;
    const char *host = NULL;
    if (serve_daemon_metrics_args(&argc, argv, "specd-verifier", &port, &host)) return 2;
    serve_daemon_metrics_configure("specd-verifier", port, host, specd_verifier_handlers_create,
                                   specd_verifier_handlers_destroy);
    int rc = specd_daemon_main(argc, argv, "specd-verifier", SPECD_IPC_ROLE_VERIFIER,
                               "specd verifier daemon: maps the host's shared logit buffers and "
                               "decides which draft tokens the target accepts.",
                               serve_daemon_metrics_setup, serve_daemon_metrics_teardown);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help")) serve_daemon_metrics_help();
    return rc;
}
