/* specd-verifier: checks drafts against the target's logits for a host (see ipc/specd.proto),
 * and with --metrics-port serves its counters as Prometheus text over HTTP
 * (ipc/daemon/daemon_metrics.h). */
#include "ipc/daemon/daemon_metrics.h"
#include "verifier/daemon/verifier_service.h"

int main(int argc, char **argv) {
    return specd_daemon_metrics_main(
        argc, argv, "specd-verifier", SPECD_IPC_ROLE_VERIFIER,
        "specd verifier daemon: maps the host's shared logit buffers and decides which draft "
        "tokens the target accepts.",
        specd_verifier_handlers_create, specd_verifier_handlers_destroy);
}
