/* SPECD_PROFILE (runtime_internal.h): where an extend's time goes, per op and thread, printed
 * when the context is destroyed. */
#include "model/runtime/runtime_internal.h"

#include "common/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rt_prof *rt_prof_create(int n_threads) {
    const char *e = getenv("SPECD_PROFILE");
    if (!e || !*e || strcmp(e, "0") == 0) return NULL;
    rt_prof *p = specd_alloc_array(1, sizeof *p);
    if (!p) return NULL;
    p->th = specd_alloc_array((size_t)n_threads, sizeof *p->th);
    if (!p->th) {
        specd_free(p);
        return NULL;
    }
    p->n_threads = n_threads;
    p->cpu_time = strcmp(e, "cpu") == 0;
    return p;
}

/* One table per extend size seen: per op, each thread's milliseconds per extend, and thread 0's
 * share of the extend's wall time ("other": validation, commit, the dispatch itself). */
void rt_prof_destroy(rt_prof *p) {
    if (!p) return;
    static const char *names[PR_N] = {"embed", "norm",    "quant", "mm_qkv", "rope_kv",
                                      "attn",  "mm_o",    "mm_gu", "swiglu", "mm_down",
                                      "head",  "barrier", "wake"};
    for (int b = 0; b < PR_BUCKETS; b++) {
        if (!p->calls[b]) continue;
        const double n = (double)p->calls[b], wall = (double)p->wall_ns[b] / n * 1e-6;
        fprintf(stderr,
                "specd profile: extends of %llu tokens: %llu calls, %.3f ms each (wall)%s\n",
                (unsigned long long)(p->tokens[b] / p->calls[b]), (unsigned long long)p->calls[b],
                wall, p->cpu_time ? ", ops in thread CPU time" : "");
        fprintf(stderr, "  %-8s", "op");
        for (int t = 0; t < p->n_threads; t++)
            fprintf(stderr, "   t%d ms", t);
        fprintf(stderr, "  t0 %%wall\n");
        double t0_sum = 0.0;
        for (int o = 0; o < PR_N; o++) {
            fprintf(stderr, "  %-8s", names[o]);
            for (int t = 0; t < p->n_threads; t++)
                fprintf(stderr, " %8.3f", (double)p->th[t].ns[b][o] / n * 1e-6);
            const double t0 = (double)p->th[0].ns[b][o] / n * 1e-6;
            t0_sum += t0;
            fprintf(stderr, "  %7.1f\n", wall > 0 ? 100.0 * t0 / wall : 0.0);
        }
        fprintf(stderr, "  %-8s %8.3f%*s  %7.1f\n", "other", wall - t0_sum, 9 * (p->n_threads - 1),
                "", wall > 0 ? 100.0 * (wall - t0_sum) / wall : 0.0);
    }
    specd_free(p->th);
    specd_free(p);
}

void rt_prof_step(rt_prof *p, int32_t n_tok, uint64_t wall_ns) {
    const int b = rt_prof_bucket(n_tok);
    p->calls[b]++;
    p->tokens[b] += (uint64_t)n_tok;
    p->wall_ns[b] += wall_ns;
}
