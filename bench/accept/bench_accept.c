/* bench_accept: ns per verified draft position for each rule at two vocabulary sizes and k = 1, 4,
 * 8, one thread, beside the time memcpy takes to move the same input bytes (target logits, plus q
 * for rejection sampling) measured in the same run. Every draft is accepted (the most work a call
 * can do: all k + 1 rows scored, bonus token included). Logits are 3 * N(0, 1), temperature 1,
 * no filters. Times are this thread's CPU time (fastest of 7 trials) for both the engine and the
 * memcpy anchor. Usage: bench_accept [--quick] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/philox.h"
#include "specd/specd.h"

static volatile uint64_t sink;

/* flat: 3 N(0, 1) everywhere (many tokens stay in reach of the Gumbel maximum: the hard case for
 * keyed sampling). peaked: 2 N(0, 1) plus 8..12 on 32 tokens per row, closer to a language
 * model's logits, where most blocks cannot win and are skipped. */
static void fill_logits(float *l, size_t n, uint64_t seed, int peaked, int32_t v) {
    uint32_t key[2] = {(uint32_t)seed, 7}, ctr[4] = {0}, w[4];
    for (size_t i = 0; i < n; i += 2) {
        ctr[0] = (uint32_t)i;
        ctr[1] = (uint32_t)(i >> 32);
        specd_philox4x32_10_block(ctr, key, w);
        double u1 = ((double)w[0] + 0.5) / 4294967296.0, u2 = ((double)w[1] + 0.5) / 4294967296.0;
        double r = sqrt(-2.0 * log(u1));
        l[i] = (float)(3.0 * r * cos(6.283185307179586 * u2));
        if (i + 1 < n) l[i + 1] = (float)(3.0 * r * sin(6.283185307179586 * u2));
    }
    if (!peaked) return;
    for (size_t i = 0; i < n; i++) l[i] *= 2.0f / 3.0f;
    for (size_t row = 0; row < n / (size_t)v; row++)
        for (uint32_t j = 0; j < 32; j++) {
            uint32_t c2[4] = {j, (uint32_t)row, 99, 0};
            specd_philox4x32_10_block(c2, key, w);
            l[row * (size_t)v + w[0] % (uint32_t)v] += 8.0f + 4.0f * (float)(w[1] >> 8) * 0x1p-24f;
        }
}

/* This thread's CPU time: on a shared machine wall time also counts other processes' slices. */
static uint64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Fastest of 7 trials of `reps` runs of one call shape, in ns per call. */
typedef int (*call_fn)(void *ctx);
static double time_calls(call_fn fn, void *ctx, int reps) {
    double best = 1e300;
    for (int trial = 0; trial < 7; trial++) {
        uint64_t t0 = cpu_ns();
        for (int i = 0; i < reps; i++) sink += (uint64_t)fn(ctx);
        double t = (double)(cpu_ns() - t0) / reps;
        best = t < best ? t : best;
    }
    return best;
}

typedef struct ctx {
    specd_accept *acc;
    specd_chain_input in;
    specd_chain_result out;
    const float *src[2];
    size_t bytes[2];
    float *dst;
} ctx;

static int run_verify(void *p) {
    ctx *c = p;
    specd_error err;
    if (specd_accept_chain(c->acc, &c->in, &c->out, &err) != SPECD_OK) {
        fprintf(stderr, "verify failed: %s\n", err.message);
        exit(1);
    }
    return c->out.n_accepted;
}

static int run_memcpy(void *p) {
    ctx *c = p;
    memcpy(c->dst, c->src[0], c->bytes[0]);
    if (c->bytes[1]) memcpy((char *)c->dst + c->bytes[0], c->src[1], c->bytes[1]);
    return ((const unsigned char *)c->dst)[c->bytes[0] / 2];
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const int32_t vocabs[2] = {49152, 151936};
    const int32_t ks[3] = {1, 4, 8};
    const char *names[3] = {"greedy", "rejection", "coupled"};
    const specd_accept_rule rules[3] = {SPECD_ACCEPT_GREEDY, SPECD_ACCEPT_REJECTION,
                                        SPECD_ACCEPT_COUPLED};
    printf("%-7s %-9s %7s %2s %12s %12s %12s %7s\n", "logits", "rule", "V", "k", "ns/position",
           "ns/call", "memcpy ns", "ratio");
    for (int dv = 0; dv < 4; dv++) {
        int peaked = dv / 2, vi = dv % 2;
        int32_t v = vocabs[vi];
        float *logits = specd_alloc_array((size_t)9 * (size_t)v, sizeof(float));
        float *q = specd_alloc_array((size_t)8 * (size_t)v, sizeof(float));
        float *dst = specd_alloc_array((size_t)17 * (size_t)v, sizeof(float));
        if (!logits || !q || !dst) return 1;
        fill_logits(logits, (size_t)9 * (size_t)v, 1 + (uint64_t)vi, peaked, v);
        specd_sampling_params sp = specd_sampling_default_params();
        specd_sampler *smp = NULL;
        specd_error err;
        if (specd_sampler_create(&sp, v, &smp, &err) != SPECD_OK) return 1;
        for (int ki = 0; ki < 3; ki++) {
            int32_t k = ks[ki];
            for (int ri = 0; ri < 3; ri++) {
                specd_accept_params ap = specd_accept_default_params();
                ap.rule = rules[ri];
                ap.max_k = 8;
                ap.max_vocab = v;
                ctx c;
                memset(&c, 0, sizeof c);
                if (specd_accept_create(&ap, &c.acc, &err) != SPECD_OK) return 1;
                int32_t draft[8], tokens[9];
                specd_sample_key key = {1234, 5, 100};
                for (int i = 0; i < k; i++) { /* drafts the target accepts */
                    specd_sample_key ki_ = key;
                    ki_.position += (uint32_t)i;
                    const float *row = logits + (size_t)i * (size_t)v;
                    if (rules[ri] == SPECD_ACCEPT_REJECTION) {
                        /* q = p: every ratio is 1 */
                        specd_sampler_probs(smp, row, v, q + (size_t)i * (size_t)v, &err);
                    }
                    specd_sampler_sample(smp, row, v, ki_, &draft[i], &err);
                    if (rules[ri] == SPECD_ACCEPT_GREEDY) {
                        int32_t best = 0;
                        for (int32_t x = 1; x < v; x++) best = row[x] > row[best] ? x : best;
                        draft[i] = best;
                    }
                }
                c.in = (specd_chain_input){k, draft, rules[ri] == SPECD_ACCEPT_REJECTION ? q : NULL,
                                           v, logits, v, key};
                c.out = (specd_chain_result){tokens, NULL, 0, 0, false};
                c.src[0] = logits;
                c.bytes[0] = (size_t)(k + 1) * (size_t)v * sizeof(float);
                c.src[1] = q;
                c.bytes[1] = rules[ri] == SPECD_ACCEPT_REJECTION ? (size_t)k * (size_t)v * 4 : 0;
                c.dst = dst;
                if (run_verify(&c) != k) {
                    fprintf(stderr, "%s V=%d k=%d: expected every draft accepted\n", names[ri],
                            (int)v, (int)k);
                    return 1;
                }
                double one = time_calls(run_verify, &c, 3);
                int reps = (int)(2e7 / (one + 1.0)) + 1; /* about 20 ms per trial */
                if (quick) reps = reps / 10 + 1;
                double tv = time_calls(run_verify, &c, reps);
                double tm = time_calls(run_memcpy, &c, reps);
                printf("%-7s %-9s %7d %2d %12.1f %12.0f %12.0f %7.2f\n",
                       peaked ? "peaked" : "flat", names[ri], (int)v, (int)k, tv / k, tv, tm,
                       tv / tm);
                specd_accept_destroy(c.acc);
            }
        }
        specd_sampler_destroy(smp);
        specd_free(logits);
        specd_free(q);
        specd_free(dst);
    }
    printf("ratio = verify time / memcpy of the same input bytes (goal: rejection <= 2, "
           "coupled <= 4)\n");
    return 0;
}
