#include "policy/self/mrp_prof.h"

#include "common/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now(const mrp_prof *p) {
    if (!p->cpu) return specd_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void mrp_prof_init(mrp_prof *p) {
    memset(p, 0, sizeof *p);
    const char *e = getenv("SPECD_PROFILE");
    p->on = e && *e && strcmp(e, "0") != 0;
    p->cpu = p->on && strcmp(e, "cpu") == 0;
}

void mrp_prof_start(mrp_prof *p) {
    if (p->on) p->last = now(p);
}

void mrp_prof_mark(mrp_prof *p, mrp_prof_part part) {
    if (!p->on) return;
    const uint64_t t = now(p);
    p->ns[part] += t - p->last;
    p->last = t;
}

void mrp_prof_report(const mrp_prof *p) {
    if (!p->on || p->rounds == 0) return;
    static const char *const names[MRP_PROF_N] = {"input", "commit", "c1+S",   "spec",
                                                  "resid", "pick",   "verify", "prefill",
                                                  "catch-up"};
    uint64_t total = 0;
    for (int i = 0; i < MRP_PROF_PREFILL; i++)
        total += p->ns[i];
    const double n = (double)p->rounds;
    fprintf(stderr, "specd profile: policy mrp, %llu draft rounds, ms per round (%s):",
            (unsigned long long)p->rounds, p->cpu ? "thread CPU" : "wall");
    for (int i = 0; i < MRP_PROF_PREFILL; i++)
        fprintf(stderr, " %s %.3f", names[i], (double)p->ns[i] / n * 1e-6);
    fprintf(stderr, "; total %.3f; the prompt's rows %.3f ms once; plain steps' rows %.3f ms in "
                    "all\n", (double)total / n * 1e-6, (double)p->ns[MRP_PROF_PREFILL] * 1e-6,
            (double)p->ns[MRP_PROF_CATCH_UP] * 1e-6);
}
