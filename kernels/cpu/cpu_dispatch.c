#include "kernels/cpu/cpu_dispatch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>

/* XCR0: which register states the OS saves on a context switch. A CPU may report AVX-512 while
 * the OS (or hypervisor) does not enable the zmm state; using it then faults. */
static unsigned long long xcr0(void) {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static int cpu_avx2(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !fma || !f16c) return 0;
    if ((xcr0() & 0x6) != 0x6) return 0; /* xmm and ymm state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b >> 5) & 1; /* AVX2 */
}

static int cpu_avx512(void) {
    if (!cpu_avx2()) return 0;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    const int f = (b >> 16) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1, vnni = (c >> 11) & 1;
    if (!f || !bw || !vl || !vnni) return 0;
    return (xcr0() & 0xe6) == 0xe6; /* + opmask, upper halves of zmm0-15, zmm16-31 */
}
#endif

const char *specd_cpu_path_name(specd_cpu_path p) {
    switch (p) {
    case SPECD_CPU_AVX512: return "avx512";
    case SPECD_CPU_AVX2: return "avx2";
    default: return "scalar";
    }
}

int specd_cpu_path_supported(specd_cpu_path p) {
#if defined(__x86_64__)
    if (p == SPECD_CPU_AVX512) return cpu_avx512();
    if (p == SPECD_CPU_AVX2) return cpu_avx2();
#endif
    return p == SPECD_CPU_SCALAR;
}

specd_cpu_path specd_cpu_path_best(void) {
    if (specd_cpu_path_supported(SPECD_CPU_AVX512)) return SPECD_CPU_AVX512;
    if (specd_cpu_path_supported(SPECD_CPU_AVX2)) return SPECD_CPU_AVX2;
    return SPECD_CPU_SCALAR;
}

/* CPUID traps to the hypervisor in a VM and the environment is read once: one answer per
 * process. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static specd_cpu_path chosen;
static char chosen_err[160];

static void choose(void) {
    chosen = specd_cpu_path_best();
    const char *env = getenv("SPECD_CPU_PATH");
    if (!env || !*env) return;
    specd_cpu_path want;
    if (!strcmp(env, "avx512"))
        want = SPECD_CPU_AVX512;
    else if (!strcmp(env, "avx2"))
        want = SPECD_CPU_AVX2;
    else if (!strcmp(env, "scalar"))
        want = SPECD_CPU_SCALAR;
    else {
        snprintf(chosen_err, sizeof chosen_err,
                 "SPECD_CPU_PATH=%s: unknown path (avx512, avx2 or scalar)", env);
        return;
    }
    if (!specd_cpu_path_supported(want)) {
        snprintf(chosen_err, sizeof chosen_err,
                 "SPECD_CPU_PATH=%s: this CPU (or OS) cannot run it; best here is %s", env,
                 specd_cpu_path_name(chosen));
        return;
    }
    chosen = want;
}

int specd_cpu_path_get(specd_cpu_path *out, char *msg, size_t msg_cap) {
    pthread_once(&once, choose);
    *out = chosen;
    if (chosen_err[0] && msg && msg_cap) snprintf(msg, msg_cap, "%s", chosen_err);
    return chosen_err[0] == 0;
}
