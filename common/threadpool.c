#include "common/threadpool.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* Spins before yielding and yields before sleeping: short phases (one decode layer) finish in
 * microseconds, while an idle pool must not burn a shared core. */
enum { SPIN_ITERS = 2000, YIELD_ITERS = 200 };

struct specd_threadpool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    _Atomic unsigned generation; /* bumped for each run; workers wait for a change */
    _Atomic int stop;
    _Atomic int n_done; /* workers finished with the current run */
    specd_threadpool_fn fn;
    void *arg;
    /* barrier: arrivals count up; the last one bumps the phase */
    _Atomic int bar_count;
    _Atomic unsigned bar_phase;
};

typedef struct worker_arg {
    specd_threadpool *pool;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *p) {
    worker_arg wa = *(worker_arg *)p;
    specd_free(p);
    specd_threadpool *pool = wa.pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
               !atomic_load(&pool->stop)) {
            if (spins < SPIN_ITERS) {
                cpu_relax();
            } else if (spins < SPIN_ITERS + YIELD_ITERS) {
                sched_yield();
            } else {
                pthread_mutex_lock(&pool->mutex);
                while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                    pthread_cond_wait(&pool->cond, &pool->mutex);
                pthread_mutex_unlock(&pool->mutex);
            }
            spins++;
        }
        if (atomic_load(&pool->stop)) break;
        seen = g;
        pool->fn(pool->arg, wa.ith, pool->n);
        atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_acq_rel);
    }
    return NULL;
}

int specd_threadpool_online_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

specd_status specd_threadpool_create(int n_threads, specd_threadpool **out, specd_error *err) {
    if (!out) return specd_fail(err, SPECD_E_INVALID_ARG, "threadpool: out is NULL");
    if (n_threads < 1 || n_threads > 1024)
        return specd_fail(err, SPECD_E_INVALID_ARG, "threadpool: n_threads %d not in 1..1024",
                          n_threads);
    specd_threadpool *pool = specd_alloc_array(1, sizeof *pool);
    if (!pool) return specd_fail(err, SPECD_E_NOMEM, "threadpool: out of memory");
    pool->n = n_threads;
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->cond, NULL);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->stop, 0);
    atomic_init(&pool->n_done, 0);
    atomic_init(&pool->bar_count, 0);
    atomic_init(&pool->bar_phase, 0);
    if (n_threads > 1) {
        pool->threads = specd_alloc_array((size_t)n_threads, sizeof *pool->threads);
        if (!pool->threads) {
            specd_threadpool_destroy(pool);
            return specd_fail(err, SPECD_E_NOMEM, "threadpool: out of memory");
        }
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = specd_alloc(sizeof *wa);
        int rc = wa ? 0 : -1;
        if (wa) {
            wa->pool = pool;
            wa->ith = i;
            rc = pthread_create(&pool->threads[i], NULL, worker_main, wa);
            if (rc) specd_free(wa);
        }
        if (rc) {
            pool->n = i; /* destroy joins only the threads that started */
            specd_threadpool_destroy(pool);
            return specd_fail(err, SPECD_E_NOMEM, "threadpool: cannot start thread %d of %d", i,
                              n_threads);
        }
    }
    *out = pool;
    return SPECD_OK;
}

void specd_threadpool_destroy(specd_threadpool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mutex);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->cond);
    pthread_mutex_unlock(&pool->mutex);
    for (int i = 1; i < pool->n; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->cond);
    pthread_mutex_destroy(&pool->mutex);
    specd_free(pool->threads);
    specd_free(pool);
}

int specd_threadpool_size(const specd_threadpool *pool) {
    return pool->n;
}

void specd_threadpool_run(specd_threadpool *pool, specd_threadpool_fn fn, void *arg) {
    if (pool->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store(&pool->n_done, 0);
    pthread_mutex_lock(&pool->mutex);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool->cond);
    pthread_mutex_unlock(&pool->mutex);
    fn(arg, 0, pool->n);
    int spins = 0;
    while (atomic_load_explicit(&pool->n_done, memory_order_acquire) != pool->n - 1) {
        if (spins++ < SPIN_ITERS)
            cpu_relax();
        else
            sched_yield();
    }
}

void specd_threadpool_barrier(specd_threadpool *pool) {
    if (pool->n == 1) return;
    unsigned phase = atomic_load_explicit(&pool->bar_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&pool->bar_count, 1, memory_order_acq_rel) == pool->n - 1) {
        atomic_store_explicit(&pool->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->bar_phase, 1, memory_order_acq_rel);
        return;
    }
    int spins = 0;
    while (atomic_load_explicit(&pool->bar_phase, memory_order_acquire) == phase) {
        if (spins++ < SPIN_ITERS)
            cpu_relax();
        else
            sched_yield();
    }
}
