/* Which vector path the CPU kernels take, chosen once per process from CPUID (and the OS's saved
 * register state), or forced with the environment variable SPECD_CPU_PATH=avx512|avx2|scalar (for
 * tests and A/B runs). Every path computes the same bits for the runtime's logits; the faster
 * ones only share more work between rows.
 *   avx512  AVX-512 F/BW/VL + VNNI (vpdpbusd) for the quantized matmul tiles, AVX2 elsewhere
 *   avx2    AVX2 + FMA + F16C
 *   scalar  the reference kernels */
#ifndef SPECD_KERNELS_CPU_CPU_DISPATCH_H
#define SPECD_KERNELS_CPU_CPU_DISPATCH_H

#include <stddef.h>

typedef enum specd_cpu_path {
    SPECD_CPU_SCALAR = 0,
    SPECD_CPU_AVX2 = 1,
    SPECD_CPU_AVX512 = 2,
} specd_cpu_path;

/* "scalar", "avx2", "avx512" */
const char *specd_cpu_path_name(specd_cpu_path p);

/* Whether this CPU and OS can run path p. */
int specd_cpu_path_supported(specd_cpu_path p);

/* The best path this machine supports. */
specd_cpu_path specd_cpu_path_best(void);

/* The path in use: SPECD_CPU_PATH when set, else the best. Returns 0 and fills msg (when msg_cap
 * > 0) if SPECD_CPU_PATH names an unknown path or one this machine cannot run; *out is then the
 * best path. Read once per process: later calls return the first answer. */
int specd_cpu_path_get(specd_cpu_path *out, char *msg, size_t msg_cap);

#endif
