/* A fixed pool of worker threads that run one function on every thread at once (the caller is
 * thread 0), with a barrier for phases inside that function, as ggml runs a graph.
 *
 * Why this shape: a transformer forward is ~10 dependent ops per layer; one dispatch per forward
 * plus a barrier per op costs far less than waking threads for every op. Work splitting is the
 * caller's: kernels split output rows or columns by (ith, nth), never a reduction, so results do
 * not depend on the thread count.
 *
 * Waiting spins briefly, then yields, then sleeps on a condition variable, so an idle pool costs
 * nothing and a busy one reacts in microseconds. Not reentrant: one run at a time per pool.
 */
#ifndef SPECD_COMMON_THREADPOOL_H
#define SPECD_COMMON_THREADPOOL_H

#include "specd/status.h"

typedef struct specd_threadpool specd_threadpool;

/* fn runs once on each of nth threads with ith = 0..nth-1. */
typedef void (*specd_threadpool_fn)(void *arg, int ith, int nth);

/* n_threads >= 1 (1 starts no worker). Caller owns *out (specd_threadpool_destroy). */
specd_status specd_threadpool_create(int n_threads, specd_threadpool **out, specd_error *err);
void specd_threadpool_destroy(specd_threadpool *pool);

int specd_threadpool_size(const specd_threadpool *pool);

/* Runs fn(arg, ith, nth) on every thread and returns when all have returned. */
void specd_threadpool_run(specd_threadpool *pool, specd_threadpool_fn fn, void *arg);

/* Inside fn: returns when every thread of the pool has reached it; memory written before the
 * barrier by any thread is visible after it to all. */
void specd_threadpool_barrier(specd_threadpool *pool);

/* Online cores (at least 1). */
int specd_threadpool_online_cores(void);

#endif
