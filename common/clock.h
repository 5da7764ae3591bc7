/* Monotonic time for measurements (benchmarks, per-step splits, timeouts). */
#ifndef SPECD_COMMON_CLOCK_H
#define SPECD_COMMON_CLOCK_H

#include <stdint.h>

uint64_t specd_now_ns(void);

#endif
