/* Starting and stopping the real daemon binaries from a test. */
#ifndef SPECD_TESTS_DAEMON_UTIL_H
#define SPECD_TESTS_DAEMON_UTIL_H

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "specd/ipc.h"

#define TEST_VOCAB 49152u
#define TEST_TOKHASH 0x5eed5eed12345678ULL
#define TEST_TOKHASH_ARG "5eed5eed12345678"

/* Starts `binary --endpoint ep --vocab 49152 --tokenizer-hash hash` with stderr to stderr_path
 * (or ours when NULL). */
static inline pid_t daemon_start_hash(const char *binary, const char *ep, const char *hash,
                                      const char *stderr_path) {
    pid_t pid = fork();
    if (pid == 0) {
        if (stderr_path) {
            int fd = open(stderr_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
            if (fd >= 0) dup2(fd, 2);
        }
        execl(binary, binary, "--endpoint", ep, "--vocab", "49152", "--tokenizer-hash", hash,
              (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* The same, serving the tests' fingerprint. */
static inline pid_t daemon_start(const char *binary, const char *ep, const char *stderr_path) {
    return daemon_start_hash(binary, ep, TEST_TOKHASH_ARG, stderr_path);
}

static inline void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static inline uint64_t daemon_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Generous: a daemon starting on a loaded machine (sanitizers, parallel tests) is slow, and a
 * wait that ends early fails a correct build. */
#define DAEMON_WAIT_MS 30000

/* Waits until a daemon answers a ping on ep from a throwaway client with fingerprint
 * (vocab, TEST_TOKHASH), up to DAEMON_WAIT_MS. */
static inline int daemon_wait_ready_vocab(const char *ep, specd_ipc_role role, uint32_t vocab) {
    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = ep;
    p.timeout_ms = 500;
    p.retry_ms = 0;
    specd_ipc_fingerprint m = {vocab, TEST_TOKHASH};
    specd_ipc_client *c = NULL;
    if (specd_ipc_client_create(&p, role, &m, &c, NULL) != SPECD_OK) return 0;
    int ok = 0;
    for (uint64_t end = daemon_now_ms() + DAEMON_WAIT_MS; !ok && daemon_now_ms() < end;) {
        ok = specd_ipc_client_ping(c, NULL) == SPECD_OK;
        if (!ok) sleep_ms(50);
    }
    specd_ipc_client_destroy(c);
    return ok;
}

/* The same for a daemon of the tests' usual vocabulary. */
static inline int daemon_wait_ready(const char *ep, specd_ipc_role role) {
    return daemon_wait_ready_vocab(ep, role, TEST_VOCAB);
}

/* Waits up to timeout_ms for pid to exit: its exit code (128 + signal when killed by one), or -1
 * when it was still running (it is then killed and reaped, so no test leaves a daemon behind). */
static inline int daemon_wait_exit(pid_t pid, int timeout_ms) {
    int status = 0;
    for (uint64_t end = daemon_now_ms() + (uint64_t)timeout_ms;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (r < 0) return -1;
        if (daemon_now_ms() >= end) break;
        sleep_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* Sends sig and returns the exit status (or 128 + signal). */
static inline int daemon_stop(pid_t pid, int sig) {
    kill(pid, sig);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A daemon serving on an ipc:// endpoint in a private temporary directory. */
typedef struct daemon_fixture {
    char dir[64];
    char ep[128];
    pid_t pid;
} daemon_fixture;

/* Makes f's private directory and endpoint (no daemon yet). Returns 1 on success. */
static inline int daemon_temp_endpoint(daemon_fixture *f) {
    snprintf(f->dir, sizeof f->dir, "/tmp/specd-test-XXXXXX");
    f->pid = 0;
    if (!mkdtemp(f->dir)) {
        fprintf(stderr, "daemon fixture: no temporary directory\n");
        return 0;
    }
    snprintf(f->ep, sizeof f->ep, "ipc://%s/d.sock", f->dir);
    return 1;
}

/* Starts `binary` (serving the tests' fingerprint) on a new temporary endpoint and waits until it
 * answers (daemon_wait_ready). Returns 1 when it is ready; else 0 with a message (a daemon that
 * started but never answered is left to the caller's stop or teardown: f->pid > 0). */
static inline int daemon_fixture_start(daemon_fixture *f, const char *binary, specd_ipc_role role) {
    if (!daemon_temp_endpoint(f)) return 0;
    f->pid = daemon_start(binary, f->ep, NULL);
    if (f->pid <= 0) {
        fprintf(stderr, "daemon fixture: cannot start %s\n", binary);
        return 0;
    }
    if (!daemon_wait_ready(f->ep, role)) {
        fprintf(stderr, "daemon fixture: %s did not answer on %s within %d ms\n", binary, f->ep,
                DAEMON_WAIT_MS);
        return 0;
    }
    return 1;
}

/* Removes f's socket and directory. */
static inline void daemon_fixture_clean(daemon_fixture *f) {
    char sock[160];
    snprintf(sock, sizeof sock, "%s/d.sock", f->dir);
    unlink(sock);
    rmdir(f->dir);
}

/* Stops f's daemon with SIGTERM, waits for its exit and removes its endpoint: its exit status (or
 * 128 + signal; -1 when it could not be reaped). */
static inline int daemon_fixture_stop(daemon_fixture *f) {
    int code = daemon_stop(f->pid, SIGTERM);
    f->pid = 0;
    daemon_fixture_clean(f);
    return code;
}

/* A client of the daemon at ep: timeout_ms a request, retry_ms between tries (0: none). NULL,
 * with err set, when it cannot be made. */
static inline specd_ipc_client *daemon_client(const char *ep, specd_ipc_role role,
                                              const specd_ipc_fingerprint *m, int timeout_ms,
                                              int retry_ms, specd_error *err) {
    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = ep;
    p.timeout_ms = timeout_ms;
    p.retry_ms = retry_ms;
    specd_ipc_client *c = NULL;
    return specd_ipc_client_create(&p, role, m, &c, err) == SPECD_OK ? c : NULL;
}

/* The daemon tests' command line: DRAFTER VERIFIER, the binaries under test. 0 (after a usage
 * line) when it is not that. */
static inline int daemon_test_binaries(int argc, char **argv, const char **drafter,
                                       const char **verifier) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DRAFTER VERIFIER\n", argv[0]);
        return 0;
    }
    *drafter = argv[1];
    *verifier = argv[2];
    return 1;
}

#endif
