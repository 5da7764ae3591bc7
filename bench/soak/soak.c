/* bench/soak: the daemons under churn. 64 sequences at once (4 host sessions of 16, each
 * sequence drafting through specd-drafter with policy remote, each session verifying through
 * specd-verifier), every sequence reopened with a new seed when it ends, for DURATION seconds,
 * while the drafter and the verifier are killed -9 at random moments and restarted. Loopback only
 * (ipc:// in a private directory), bounded by DURATION.
 *
 * The target is synthetic (a deterministic function of position and token with one likely token
 * per row, so drafts are often accepted): two cores cannot run 64 sequences of the real model
 * fast enough to churn the daemons. Checked at the end: every finished sequence is
 * token-identical to its plain in-process run, nothing of ours is left in /dev/shm, and the RSS
 * of this host process and of each daemon instance does not grow (figures printed).
 *
 * usage: soak DRAFTER VERIFIER [DURATION_S=600] [SEED=1]; exit 0 when every check holds. The
 * churn lasts DURATION_S; the run then goes on without kills until at least one sequence a host has
 * finished and the daemon has verified steps (at most 60 s more). */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "specd/log.h"
#include "specd/spec.h"

enum { V = 4096, HOSTS = 4, PER_HOST = 16, MAX_DRAFT = 4, N_TOKENS = 160, PROMPT = 6 };
/* the most the run goes past DURATION waiting for finished sequences (ctest allows 120 s) */
enum { EXTRA_MS = 60000 };

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}

/* The synthetic target's row for the token after `token` at `pos`: its likely token depends on
 * the token only, so texts fall into cycles the ngram drafter learns. */
static void target_row(int32_t pos, int32_t token, float *row) {
    uint32_t h = (uint32_t)pos * 2654435761u ^ (uint32_t)token * 40503u;
    for (int32_t x = 0; x < V; x++)
        row[x] = (float)(((h ^ (uint32_t)x * 2246822519u) * 3266489917u) >> 22) * 0.004f;
    row[((uint32_t)token * 2654435761u >> 7) % (V / 64)] += 9.0f;
}

static long rss_kb(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb;
}

static int shm_leftovers(void) {
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "specd-%u-", (unsigned)geteuid());
    DIR *d = opendir("/dev/shm");
    int count = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        count += strncmp(e->d_name, prefix, (size_t)n) == 0;
    if (d) closedir(d);
    return count;
}

/* One daemon and the RSS history of its current instance. */
typedef struct daemon_proc {
    const char *bin, *name;
    char ep[160], log[160];
    pid_t pid;
    uint64_t started_ms, restart_at_ms;
    long rss_first, rss_last; /* of the current instance: after its first second, and now */
    long worst_growth_kb;     /* over all instances that lived >= 5 s */
    int kills;
    long log_size_at_spawn; /* the log's bytes when the current instance was started */
} daemon_proc;

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

static void daemon_spawn(daemon_proc *d) {
    d->log_size_at_spawn = file_size(d->log);
    d->pid = fork();
    if (d->pid == 0) {
        int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) dup2(fd, 2);
        execl(d->bin, d->bin, "--endpoint", d->ep, "--vocab", "4096", "--tokenizer-hash", "0",
              (char *)NULL);
        _exit(127);
    }
    d->started_ms = now_ms();
    d->restart_at_ms = 0;
    d->rss_first = d->rss_last = -1;
}

/* Waits (30 s at most) until the current instance has logged that it listens: the line comes
 * after the log's length at the instance's start (the log is appended to). */
static int daemon_wait_listening(const daemon_proc *d) {
    for (uint64_t deadline = now_ms() + 30000; now_ms() < deadline; usleep(20000)) {
        FILE *f = fopen(d->log, "r");
        if (!f) continue;
        char line[512];
        int found = 0;
        if (fseek(f, d->log_size_at_spawn, SEEK_SET) == 0)
            while (!found && fgets(line, sizeof line, f)) found = strstr(line, "listening on") != NULL;
        fclose(f);
        if (found) return 1;
    }
    return 0;
}

static void daemon_account(daemon_proc *d) {
    if (d->rss_first > 0 && now_ms() - d->started_ms >= 5000) {
        long g = d->rss_last - d->rss_first;
        if (g > d->worst_growth_kb) d->worst_growth_kb = g;
    }
}

static void daemon_kill9(daemon_proc *d, uint64_t down_ms) {
    daemon_account(d);
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
    d->kills++;
    d->restart_at_ms = now_ms() + down_ms;
}

static void daemon_sample(daemon_proc *d) {
    if (!d->pid) return;
    long kb = rss_kb(d->pid);
    if (kb <= 0) return;
    if (d->rss_first < 0 && now_ms() - d->started_ms >= 1000) d->rss_first = kb;
    d->rss_last = kb;
}

typedef struct seqrec {
    int active;
    uint64_t seed;
    int32_t prompt[PROMPT];
} seqrec;

static void quiet(specd_log_level level, const char *message, void *user) {
    (void)level, (void)message, (void)user;
}

/* The plain in-process run of a sequence: the reference its speculative run must equal. */
static int64_t plain_run(specd_spec *plain, int32_t seq, const seqrec *r, int32_t *out,
                         float *rows) {
    specd_seq_params p = specd_seq_default_params();
    p.sampling.temperature = 0.8f;
    p.seed = r->seed;
    p.max_tokens = N_TOKENS;
    specd_error err;
    /* the same sequence id: it is part of the sampling key */
    if (specd_spec_seq_open(plain, seq, r->prompt, PROMPT, &p, &err) != SPECD_OK) return -1;
    specd_step_layout lay;
    specd_step_outcome o;
    while (!specd_spec_seq_done(plain, seq)) {
        if (specd_spec_seq_layout(plain, seq, &lay, &err) != SPECD_OK) return -1;
        for (int32_t i = 0; i < lay.n_rows; i++)
            target_row(lay.pos[lay.rows[i]], lay.tokens[lay.rows[i]], rows + (size_t)i * V);
        if (specd_spec_seq_verify(plain, seq, rows, &o, &err) != SPECD_OK) return -1;
    }
    int64_t n;
    const int32_t *t = specd_spec_seq_output(plain, seq, &n);
    memcpy(out, t, (size_t)n * sizeof *t);
    specd_spec_seq_close(plain, seq);
    return n;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s DRAFTER VERIFIER [DURATION_S=600] [SEED=1]\n", argv[0]);
        return 2;
    }
    int duration_s = argc > 3 ? atoi(argv[3]) : 600;
    rng_state = argc > 4 ? strtoull(argv[4], NULL, 10) : 1;
    if (duration_s < 1) return 2;
    signal(SIGPIPE, SIG_IGN);
    specd_log_set(quiet, NULL, SPECD_LOG_ERROR); /* "unavailable"/"back" lines by the hundred */
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/specd-soak-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    daemon_proc dr = {.bin = argv[1], .name = "drafter"}, ve = {.bin = argv[2], .name = "verifier"};
    snprintf(dr.ep, sizeof dr.ep, "ipc://%s/drafter.sock", dir);
    snprintf(ve.ep, sizeof ve.ep, "ipc://%s/verifier.sock", dir);
    snprintf(dr.log, sizeof dr.log, "%s/drafter.log", dir);
    snprintf(ve.log, sizeof ve.log, "%s/verifier.log", dir);
    daemon_spawn(&dr);
    daemon_spawn(&ve);
    usleep(300000);

    specd_spec *hosts[HOSTS], *plain = NULL;
    specd_error err;
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    sp.max_draft = MAX_DRAFT;
    sp.max_seqs = PER_HOST;
    specd_spec_params pp = sp;
    pp.max_seqs = PER_HOST;
    if (specd_spec_create(&pp, &plain, &err) != SPECD_OK) return 1;
    sp.verifier_endpoint = ve.ep;
    sp.verifier_timeout_ms = 300;
    for (int h = 0; h < HOSTS; h++)
        if (specd_spec_create(&sp, &hosts[h], &err) != SPECD_OK) {
            fprintf(stderr, "soak: %s\n", err.message);
            return 1;
        }
    char ropts[256];
    snprintf(ropts, sizeof ropts, "endpoint=%s,timeout_ms=200", dr.ep);

    static seqrec recs[HOSTS][PER_HOST];
    static float rows[(MAX_DRAFT + 1) * (size_t)V];
    static int32_t ref[N_TOKENS + 8];
    long seqs_done = 0, mismatches = 0, steps = 0, remote_verified = 0, fallback = 0;
    long drafted = 0, accepted = 0;
    uint64_t t0 = now_ms(), end = t0 + (uint64_t)duration_s * 1000u;
    uint64_t next_kill = t0 + 2000 + rnd() % 4000, next_sample = t0;
    long host_rss_first = -1, host_rss_last = -1;
    /* Past DURATION the churn stops and the run goes on until sequences have finished through
     * the daemons (a loaded machine may have let none finish in time: every call then waits out
     * its timeout), at most EXTRA_MS more. */
    const uint64_t hard_end = end + EXTRA_MS;
    for (;;) {
        uint64_t t = now_ms();
        if (t >= end && ((seqs_done >= HOSTS && remote_verified > 0) || t >= hard_end)) break;
        if (t >= next_sample) {
            daemon_sample(&dr);
            daemon_sample(&ve);
            long kb = rss_kb(getpid());
            if (host_rss_first < 0 && t - t0 >= 10000) host_rss_first = kb;
            host_rss_last = kb;
            next_sample = t + 1000;
        }
        daemon_proc *pick = rnd() % 2 ? &dr : &ve;
        if (t < end && t >= next_kill && pick->pid) {
            daemon_kill9(pick, 100 + rnd() % 900);
            next_kill = t + 1000 + rnd() % 5000;
        }
        if (dr.restart_at_ms && t >= dr.restart_at_ms) daemon_spawn(&dr);
        if (ve.restart_at_ms && t >= ve.restart_at_ms) daemon_spawn(&ve);
        for (int h = 0; h < HOSTS; h++)
            for (int s = 0; s < PER_HOST; s++) {
                seqrec *r = &recs[h][s];
                if (!r->active) {
                    r->seed = ((uint64_t)rnd() << 32) | rnd();
                    for (int i = 0; i < PROMPT; i++) r->prompt[i] = (int32_t)(rnd() % V);
                    specd_seq_params p = specd_seq_default_params();
                    p.policy = "remote";
                    p.policy_options = ropts;
                    p.sampling.temperature = 0.8f;
                    p.seed = r->seed;
                    p.max_tokens = N_TOKENS;
                    p.adaptive = (s % 2) == 0; /* half with the guard: gaps for the drafter */
                    if (specd_spec_seq_open(hosts[h], s, r->prompt, PROMPT, &p, &err) != SPECD_OK) {
                        fprintf(stderr, "soak: open: %s\n", err.message);
                        return 1;
                    }
                    r->active = 1;
                }
                specd_step_layout lay;
                specd_step_outcome o;
                if (specd_spec_seq_layout(hosts[h], s, &lay, &err) != SPECD_OK) {
                    fprintf(stderr, "soak: layout: %s\n", err.message);
                    return 1;
                }
                float *out = specd_spec_verifier_logits(hosts[h]);
                for (int32_t i = 0; i < lay.n_rows; i++)
                    target_row(lay.pos[lay.rows[i]], lay.tokens[lay.rows[i]], out + (size_t)i * V);
                if (specd_spec_seq_verify(hosts[h], s, out, &o, &err) != SPECD_OK) {
                    fprintf(stderr, "soak: verify: %s\n", err.message);
                    return 1;
                }
                steps++;
                if (!specd_spec_seq_done(hosts[h], s)) continue;
                int64_t n;
                const int32_t *toks = specd_spec_seq_output(hosts[h], s, &n);
                int64_t m = plain_run(plain, s, r, ref, rows);
                if (m != n || memcmp(ref, toks, (size_t)n * sizeof *toks) != 0) mismatches++;
                specd_seq_stats st;
                specd_spec_seq_stats(hosts[h], s, &st, &err);
                remote_verified += st.n_remote_verified;
                fallback += st.n_remote_fallback;
                drafted += st.n_draft_tokens;
                accepted += st.n_accepted;
                specd_spec_seq_close(hosts[h], s);
                r->active = 0;
                seqs_done++;
            }
    }
    double secs = (double)(now_ms() - t0) / 1000.0;
    for (int h = 0; h < HOSTS; h++) specd_spec_destroy(hosts[h]);
    specd_spec_destroy(plain);
    /* a daemon killed last is brought back, so both end by SIGTERM; a SIGTERM before it listens
     * would end it before its handler exists and leave the killed instance's socket file */
    if (!dr.pid) daemon_spawn(&dr);
    if (!ve.pid) daemon_spawn(&ve);
    if (!daemon_wait_listening(&dr) || !daemon_wait_listening(&ve)) {
        fprintf(stderr, "soak: a restarted daemon did not listen within 30 s\n");
        return 1;
    }
    daemon_account(&dr);
    daemon_account(&ve);
    if (dr.pid) kill(dr.pid, SIGTERM), waitpid(dr.pid, NULL, 0);
    if (ve.pid) kill(ve.pid, SIGTERM), waitpid(ve.pid, NULL, 0);
    int left = shm_leftovers();
    char sock[200];
    snprintf(sock, sizeof sock, "%s/drafter.sock", dir);
    int sock_left = access(sock, F_OK) == 0;
    snprintf(sock, sizeof sock, "%s/verifier.sock", dir);
    sock_left += access(sock, F_OK) == 0;

    printf("soak: %.0f s, %d sequences at once (%d hosts x %d), synthetic target, vocab %d\n", secs,
           HOSTS * PER_HOST, HOSTS, PER_HOST, V);
    printf("  kill -9: drafter %d times, verifier %d times\n", dr.kills, ve.kills);
    printf("  %ld sequences finished (%ld steps); identical to their plain runs: %ld of %ld\n",
           seqs_done, steps, seqs_done - mismatches, seqs_done);
    printf("  drafting steps verified by the daemon %ld, in-process %ld; acceptance %.3f\n",
           remote_verified, fallback, drafted ? (double)accepted / (double)drafted : 0.0);
    printf("  host RSS %ld kB after 10 s, %ld kB at the end\n", host_rss_first, host_rss_last);
    printf("  daemon RSS growth, worst instance alive >= 5 s: drafter %ld kB, verifier %ld kB\n",
           dr.worst_growth_kb, ve.worst_growth_kb);
    printf("  /dev/shm entries left: %d; socket files left after SIGTERM: %d\n", left, sock_left);
    int ok = mismatches == 0 && seqs_done > 0 && left == 0 && sock_left == 0 &&
             (host_rss_first < 0 || host_rss_last - host_rss_first < 16384) &&
             dr.worst_growth_kb < 16384 && ve.worst_growth_kb < 16384;
    unlink(dr.log);
    unlink(ve.log);
    rmdir(dir);
    printf("soak: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
