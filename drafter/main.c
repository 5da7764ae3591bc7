/* specd-drafter: serves draft proposals to a host over ZeroMQ (see ipc/specd.proto), and with
 * --metrics-port its counters as Prometheus text over HTTP (ipc/daemon/daemon_metrics.h). */
#include "drafter/drafter_service.h"
#include "ipc/daemon/daemon_metrics.h"

int main(int argc, char **argv) {
    return specd_daemon_metrics_main(
        argc, argv, "specd-drafter", SPECD_IPC_ROLE_DRAFTER,
        "specd drafter daemon: keeps each sequence's history and proposes draft tokens for the "
        "host to verify, with the proposal policy the host names at OpenSeq (\"name\" or "
        "\"name:options\"; default ngram).",
        specd_drafter_handlers_create, specd_drafter_handlers_destroy);
}
