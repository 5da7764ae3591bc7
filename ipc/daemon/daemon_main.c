#include "ipc/daemon/daemon_main.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "common/log_internal.h"
#include "ipc/fingerprint.h"
#include "specd/runtime.h"

static void log_to_stderr(specd_log_level level, const char *message, void *user) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "%s[%ld] %s: %s\n", (const char *)user, (long)getpid(),
            names[level <= SPECD_LOG_ERROR ? level : SPECD_LOG_ERROR], message);
}

static void usage(FILE *f, const char *program, const char *description, const char *endpoint) {
    fprintf(f,
            "usage: %s [options]\n"
            "%s\n\n"
            "options:\n"
            "  --endpoint EP          ipc://PATH (directory must be mode 0700), tcp://HOST:PORT\n"
            "                         (needs --curve-secret-file) [default: %s]\n"
            "  --model GGUF           the model whose tokenizer hosts must share: vocabulary size\n"
            "                         and tokenizer hash are computed from it (only its\n"
            "                         tokenizer is read)\n"
            "  --tokenizer-hash HEX   instead of --model: a typed tokenizer hash the host must\n"
            "                         match (a host with a tokenizer of its own); --model or this\n"
            "                         is required\n"
            "  --vocab N              with --tokenizer-hash: vocabulary size the host must match\n"
            "                         [49152]\n"
            "  --curve-secret-file F  file holding this server's CURVE secret key (40 Z85 chars)\n"
            "  --curve-clients-file F file of admitted client public keys, one per line; without\n"
            "                         it any client that knows the server key is admitted\n"
            "  --max-frame BYTES      largest frame accepted [1048576]\n"
            "  --policy NAME=SPEC     (drafter) serve policy SPEC (\"ngram\", \"draft:model=PATH\",\n"
            "                         ...) under NAME; repeatable. Peers choose by NAME only.\n"
            "                         [default: ngram=ngram]\n"
            "  --device D             cpu | cuda | cuda:N. Drafter: where the served policies\n"
            "                         run their own models (draft=, layerskip) [default:\n"
            "                         $SPECD_DEVICE, else cpu]. Verifier: cuda[:N] opens hosts'\n"
            "                         CUDA IPC logits buffers of that device and verifies them\n"
            "                         there with the device kernel [default: cpu, host memory\n"
            "                         only]\n"
            "  --numerics M           (drafter) fast | llama: the CPU matmuls' order of the served\n"
            "                         policies' own models [default: $SPECD_NUMERICS, else fast]\n"
            "  --q-device D           (drafter) cpu | cuda | cuda:N: where the draft distributions\n"
            "                         of sampled drafts are handed to hosts: cuda[:N] a CUDA IPC\n"
            "                         buffer on device N (the host reads q on its device without\n"
            "                         a copy); refused at start without a CUDA runtime or device\n"
            "                         [default: cpu, a sealed host memory buffer]\n"
            "  --verbose              log debug lines too\n"
            "  --help                 this text\n\n"
            "Logs go to stderr. SIGTERM or SIGINT: answer what has been received, then exit 0.\n",
            program, description, endpoint);
}

static int read_key(const char *path, char key[41]) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char buf[128] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = 0;
    if (n != 40) return -1;
    memcpy(key, buf, 41);
    return 0;
}

/* What the command line said: the service's parameters and what the setup is handed. */
enum { MAX_CLIENT_KEYS = 64 };
typedef struct daemon_args {
    specd_ipc_service_params p;
    specd_daemon_config cfg;
    char key[41];
    char client_keys[MAX_CLIENT_KEYS][41];
    const char *client_ptrs[MAX_CLIENT_KEYS];
    size_t n_clients;
    int verbose;
    const char *device, *model_path;
    int typed_fingerprint, typed_hash;
} daemon_args;

/* --curve-clients-file: one 40-character Z85 key a line ('#' lines and blank ones skipped). */
static int read_clients(const char *program, const char *path, daemon_args *a) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: %s: %s\n", program, path, strerror(errno));
        return 2;
    }
    char line[128];
    while (a->n_clients < MAX_CLIENT_KEYS && fgets(line, sizeof line, f)) {
        size_t n = strcspn(line, " \r\n");
        if (n == 0 || line[0] == '#') continue;
        if (n != 40) {
            fprintf(stderr, "%s: %s: a key is not 40 Z85 characters\n", program, path);
            fclose(f);
            return 2;
        }
        memcpy(a->client_keys[a->n_clients], line, 40);
        a->client_keys[a->n_clients][40] = 0;
        a->client_ptrs[a->n_clients] = a->client_keys[a->n_clients];
        a->n_clients++;
    }
    fclose(f);
    a->p.curve_clients = a->client_ptrs;
    a->p.n_curve_clients = a->n_clients;
    return 0;
}

/* One option o (getopt_long's code) with its optarg. Returns -1 to go on, else the exit code. */
static int take_option(int o, const char *program, specd_ipc_role role, const char *description,
                       daemon_args *a) {
    specd_ipc_service_params *p = &a->p;
    specd_daemon_config *cfg = &a->cfg;
    specd_error err;
    char *end = NULL;
    switch (o) {
    case 'e': p->endpoint = optarg; break;
    case 'v': {
        unsigned long v = strtoul(optarg, &end, 10);
        if (!*optarg || *end || v == 0 || v > 0xffffffffu) {
            fprintf(stderr, "%s: --vocab %s: not a positive integer\n", program, optarg);
            return 2;
        }
        p->model.vocab_size = (uint32_t)v;
        a->typed_fingerprint = 1;
        break;
    }
    case 't':
        errno = 0;
        p->model.tokenizer_hash = strtoull(optarg, &end, 16);
        if (!*optarg || *end || errno) {
            fprintf(stderr, "%s: --tokenizer-hash %s: not hexadecimal\n", program, optarg);
            return 2;
        }
        a->typed_fingerprint = a->typed_hash = 1;
        break;
    case 'c':
        if (read_key(optarg, a->key) != 0) {
            fprintf(stderr, "%s: %s: not a 40-character Z85 key\n", program, optarg);
            return 2;
        }
        p->curve_secret = a->key;
        break;
    case 'C':
        if (read_clients(program, optarg, a)) return 2;
        break;
    case 'm': {
        unsigned long v = strtoul(optarg, &end, 10);
        if (!*optarg || *end || v < 1024 || v > (1ul << 30)) {
            fprintf(stderr, "%s: --max-frame %s: want 1024..2^30\n", program, optarg);
            return 2;
        }
        p->max_frame = v;
        break;
    }
    case 'P': {
        const char *eq = strchr(optarg, '=');
        if (role != SPECD_IPC_ROLE_DRAFTER || !eq || eq == optarg || !eq[1] ||
            (size_t)(eq - optarg) > 64 || cfg->n_policies == SPECD_DAEMON_MAX_POLICIES) {
            fprintf(stderr, "%s: --policy %s: want NAME=SPEC (drafter only, at most %d)\n", program,
                    optarg, SPECD_DAEMON_MAX_POLICIES);
            return 2;
        }
        cfg->policies[cfg->n_policies++] = optarg;
        break;
    }
    case 'M': a->model_path = optarg; break;
    case 'D':
        if (specd_device_parse(optarg, &cfg->device, &cfg->device_index, &err) != SPECD_OK) {
            fprintf(stderr, "%s: --device: %s%s\n", program, err.message,
                    strstr(err.message, "cuda:N") ? "" : " (accepted: cpu, cuda, cuda:N)");
            return 2;
        }
        a->device = optarg;
        break;
    case 'N': {
        int32_t mode;
        if (specd_numerics_parse(optarg, &mode, &err) != SPECD_OK) {
            fprintf(stderr, "%s: --numerics: %s\n", program, err.message);
            return 2;
        }
        /* the served policies' contexts read it (specd_context_default_params) */
        setenv("SPECD_NUMERICS", optarg, 1);
        break;
    }
    case 'Q':
        if (role != SPECD_IPC_ROLE_DRAFTER) {
            fprintf(stderr, "%s: --q-device is a drafter option\n", program);
            return 2;
        }
        if (specd_device_parse(optarg, &cfg->q_device, &cfg->q_device_index, &err) != SPECD_OK) {
            fprintf(stderr, "%s: --q-device: %s%s\n", program, err.message,
                    strstr(err.message, "cuda:N") ? "" : " (accepted: cpu, cuda, cuda:N)");
            return 2;
        }
        break;
    case 'V': a->verbose = 1; break;
    case 'h': {
        char default_ep[256] = "(unavailable)";
        specd_ipc_default_endpoint(role == SPECD_IPC_ROLE_DRAFTER ? "drafter" : "verifier",
                                   default_ep, sizeof default_ep, NULL);
        usage(stdout, program, description, default_ep);
        return 0;
    }
    default: usage(stderr, program, description, "see --help"); return 2;
    }
    return -1;
}

/* argv into *a, and what the options say together. Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, const char *program, specd_ipc_role role,
                      const char *description, daemon_args *a) {
    static const struct option opts[] = {{"endpoint", required_argument, 0, 'e'},
                                         {"vocab", required_argument, 0, 'v'},
                                         {"tokenizer-hash", required_argument, 0, 't'},
                                         {"curve-secret-file", required_argument, 0, 'c'},
                                         {"curve-clients-file", required_argument, 0, 'C'},
                                         {"max-frame", required_argument, 0, 'm'},
                                         {"policy", required_argument, 0, 'P'},
                                         {"model", required_argument, 0, 'M'},
                                         {"device", required_argument, 0, 'D'},
                                         {"q-device", required_argument, 0, 'Q'},
                                         {"numerics", required_argument, 0, 'N'},
                                         {"verbose", no_argument, 0, 'V'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o, rc;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1)
        if ((rc = take_option(o, program, role, description, a)) >= 0) return rc;
    if (optind != argc) {
        fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", program, argv[optind]);
        return 2;
    }
    if (a->model_path && a->typed_fingerprint) {
        fprintf(stderr, "%s: --model computes the fingerprint: no --vocab/--tokenizer-hash\n",
                program);
        return 2;
    }
    specd_error err;
    const char *env_device = getenv("SPECD_DEVICE");
    if (!a->device && role == SPECD_IPC_ROLE_DRAFTER && env_device && *env_device &&
        specd_device_parse(env_device, &a->cfg.device, &a->cfg.device_index, &err) != SPECD_OK) {
        fprintf(stderr, "%s: SPECD_DEVICE: %s%s (or give --device)\n", program, err.message,
                strstr(err.message, "cuda:N") ? "" : " (accepted: cpu, cuda, cuda:N)");
        return 2;
    }
    /* the verifier opens CUDA IPC buffers of its device only, and none without one */
    if (role == SPECD_IPC_ROLE_VERIFIER)
        a->p.cuda_device = a->cfg.device == SPECD_DEVICE_CUDA ? a->cfg.device_index : -1;
    if (!a->model_path && !a->typed_hash) {
        /* a default fingerprint matches no real host: every Hello would be refused */
        fprintf(stderr,
                "%s: no model fingerprint: give --model GGUF (the model whose tokenizer the hosts "
                "use), or a typed --tokenizer-hash HEX (with --vocab N)\n",
                program);
        return 2;
    }
    return -1;
}

/* The service from setup's handlers, run until SIGTERM or SIGINT. Returns the exit code. */
static int serve(daemon_args *a, specd_daemon_setup_fn setup, specd_daemon_teardown_fn teardown) {
    specd_ipc_service_params *p = &a->p;
    specd_error err;
    /* Signals become a readable fd the service polls beside its socket. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (sfd < 0) {
        specd_log(SPECD_LOG_ERROR, "signalfd: %s", strerror(errno));
        return 1;
    }
    specd_ipc_handlers h = {0};
    if (setup(p, &a->cfg, &h, &err) != SPECD_OK) {
        specd_log(SPECD_LOG_ERROR, "setup: %s", err.message);
        close(sfd);
        return 1;
    }
    specd_ipc_service *svc = NULL;
    if (specd_ipc_service_create(p, &h, &svc, &err) != SPECD_OK) {
        specd_log(SPECD_LOG_ERROR, "%s", err.message);
        teardown(&h);
        close(sfd);
        return 1;
    }
    specd_log(SPECD_LOG_INFO, "listening on %s (vocab %u, tokenizer %016llx)",
              specd_ipc_service_endpoint(svc), p->model.vocab_size,
              (unsigned long long)p->model.tokenizer_hash);
    if (strncmp(specd_ipc_service_endpoint(svc), "tcp://", 6) == 0) {
        if (a->n_clients)
            specd_log(SPECD_LOG_INFO, "client allow-list active: %zu CURVE key(s) admitted",
                      a->n_clients);
        else
            specd_log(SPECD_LOG_WARN, "no client allow-list (--curve-clients-file): any client "
                                      "that knows the server key is admitted");
    }
    specd_status st = specd_ipc_service_run(svc, sfd, NULL, 100, &err);
    if (st != SPECD_OK) specd_log(SPECD_LOG_ERROR, "%s", err.message);
    specd_ipc_service_destroy(svc); /* lingers so the drained replies leave */
    teardown(&h);
    close(sfd);
    specd_log(SPECD_LOG_INFO, "exiting");
    return st == SPECD_OK ? 0 : 1;
}

int specd_daemon_main(int argc, char **argv, const char *program, specd_ipc_role role,
                      const char *description, specd_daemon_setup_fn setup,
                      specd_daemon_teardown_fn teardown) {
    daemon_args a = {.p = specd_ipc_service_default_params(role),
                     .cfg = {.device = SPECD_DEVICE_CPU, .q_device = SPECD_DEVICE_CPU}};
    a.p.model.vocab_size = 49152;
    int rc = parse_args(argc, argv, program, role, description, &a);
    if (rc >= 0) return rc;
    specd_log_set(log_to_stderr, (void *)program, a.verbose ? SPECD_LOG_DEBUG : SPECD_LOG_INFO);
    specd_error err;
    if (a.model_path &&
        specd_ipc_fingerprint_of_model(a.model_path, &a.p.model, &err) != SPECD_OK) {
        specd_log(SPECD_LOG_ERROR, "--model %s: cannot compute the model fingerprint: %s",
                  a.model_path, err.message);
        return 1;
    }
    return serve(&a, setup, teardown);
}
