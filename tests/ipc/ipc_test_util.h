/* Helpers for the IPC tests: a private runtime directory, a service on a thread, and test
 * handlers that keep sequences in a seq_store (what the daemons do). */
#ifndef SPECD_TESTS_IPC_TEST_UTIL_H
#define SPECD_TESTS_IPC_TEST_UTIL_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ipc/frame.h"
#include "ipc/seq_store.h"
#include "ipc/service.h"

#define TEST_VOCAB 49152u
#define TEST_TOKHASH 0x5eed5eed12345678ULL

typedef struct test_service {
    specd_ipc_service *svc;
    specd_seq_store *seqs;
    pthread_t thread;
    volatile int stop;
    int running;
} test_service;

static specd_status th_open(void *u, uint64_t o, const SpecdWire__OpenSeq *m, specd_error *err) {
    return specd_seq_store_open(((test_service *)u)->seqs, o, m, err);
}
static specd_status th_close(void *u, uint64_t o, uint64_t id, specd_error *err) {
    return specd_seq_store_close(((test_service *)u)->seqs, o, id, err);
}
static specd_status th_commit(void *u, uint64_t o, uint64_t id, const uint32_t *t, size_t n, int rb,
                              uint64_t to, specd_error *err) {
    return specd_seq_store_commit(((test_service *)u)->seqs, o, id, t, n, rb, to, err);
}
static specd_status th_info(void *u, uint64_t o, uint64_t id, uint64_t *len, uint64_t *hash,
                            specd_error *err) {
    specd_seq *q = specd_seq_store_get(((test_service *)u)->seqs, o, id, err);
    if (!q) return SPECD_E_STATE;
    *len = q->n;
    *hash = specd_ipc_tokens_hash(q->tokens, q->n);
    return SPECD_OK;
}
static void th_gone(void *u, uint64_t o) {
    specd_seq_store_close_owner(((test_service *)u)->seqs, o);
}

static uint64_t th_count(void *u) {
    return specd_seq_store_count(((test_service *)u)->seqs);
}

static void *service_thread(void *arg) {
    test_service *t = arg;
    specd_ipc_service_run(t->svc, -1, &t->stop, 10, NULL);
    return NULL;
}

/* Starts a service (role drafter) on endpoint; extra handler slots may be set in h. */
static inline specd_status test_service_start(test_service *t, const specd_ipc_service_params *p,
                                              const specd_ipc_handlers *extra, specd_error *err) {
    memset(t, 0, sizeof *t);
    specd_status st = specd_seq_store_create(64, 1 << 20, &t->seqs, err);
    if (st != SPECD_OK) return st;
    specd_ipc_handlers h = {0};
    if (extra) h = *extra;
    h.user = t;
    h.open_seq = th_open;
    h.close_seq = th_close;
    h.commit = th_commit;
    h.seq_info = th_info;
    h.sequences_open = th_count;
    h.peer_gone = th_gone;
    st = specd_ipc_service_create(p, &h, &t->svc, err);
    if (st != SPECD_OK) {
        specd_seq_store_destroy(t->seqs);
        return st;
    }
    pthread_create(&t->thread, NULL, service_thread, t);
    t->running = 1;
    return SPECD_OK;
}

static inline void test_service_stop(test_service *t) {
    if (!t->running) return;
    t->stop = 1;
    pthread_join(t->thread, NULL);
    specd_ipc_service_destroy(t->svc);
    specd_seq_store_destroy(t->seqs);
    t->running = 0;
}

/* A fresh private directory (mkdtemp makes it 0700). */
static inline void test_private_dir(char *out, size_t cap) {
    snprintf(out, cap, "/tmp/specd-test-XXXXXX");
    if (!mkdtemp(out)) abort();
}

/* Removes a directory made by test_private_dir and the socket file a bound service leaves. */
static inline void test_private_dir_remove(const char *dir) {
    char sock[128];
    snprintf(sock, sizeof sock, "%s/d.sock", dir);
    unlink(sock);
    rmdir(dir);
}

#endif
