/* The CUDA backend's step-graph key and cache (model/runtime/cuda_graph.h), host side, without a
 * device: which steps share a key, the attention-length rounding, the SPECD_CUDA_GRAPHS switch,
 * and the bounded cache's hits, least-recently-used eviction, removal and clearing, each exec
 * destroyed exactly once. */
#include "test_main.h"

#include "model/runtime/cuda_graph.h"

#include <string.h>

enum { BATCH = 8 };

typedef struct destroyed {
    int n;
    uintptr_t last;
    int count[64]; /* destroys per fake exec id */
} destroyed;

static void destroy(void *exec, void *user) {
    destroyed *d = user;
    d->n++;
    d->last = (uintptr_t)exec;
    if ((uintptr_t)exec < 64) d->count[(uintptr_t)exec]++;
}

#define EXEC(i) ((void *)(uintptr_t)(i))

/* A one-sequence key: n rows of seq 0 with attention length n_kv, flags. */
static rt_graph_key key1(int32_t *buf, int32_t n, int32_t n_out, int32_t n_kv, unsigned flags) {
    rt_graph_key k;
    rt_graph_key_begin(&k, buf, (int32_t)rt_graph_key_capacity(BATCH), n, n_out, 30, flags);
    assert_int_equal(rt_graph_key_add_seq(&k, 0, n, rt_graph_kv_bucket(n_kv, 256, 2048)), 0);
    return k;
}

static void test_bucket(void **state) {
    (void)state;
    assert_int_equal(rt_graph_kv_bucket(1, 256, 2048), 256);
    assert_int_equal(rt_graph_kv_bucket(256, 256, 2048), 256);
    assert_int_equal(rt_graph_kv_bucket(257, 256, 2048), 512);
    assert_int_equal(rt_graph_kv_bucket(2000, 256, 2000), 2000); /* capped at n_ctx */
    assert_int_equal(rt_graph_kv_bucket(1900, 256, 2000), 2000);
    assert_int_equal(rt_graph_kv_bucket(100, 256, 120), 120);
    assert_int_equal(rt_graph_kv_bucket(0, 256, 2048), 0);
    assert_int_equal(rt_graph_kv_bucket(3000, 256, 2048), 3000); /* never shrinks */
}

static void test_switch(void **state) {
    (void)state;
    assert_true(rt_graph_enabled_by(NULL));
    assert_true(rt_graph_enabled_by(""));
    assert_true(rt_graph_enabled_by("1"));
    assert_true(rt_graph_enabled_by("on"));
    assert_false(rt_graph_enabled_by("0"));
    assert_false(rt_graph_enabled_by("off"));
    assert_false(rt_graph_enabled_by("FALSE"));
    assert_false(rt_graph_enabled_by("no"));
}

static void test_keys(void **state) {
    (void)state;
    int32_t a[64], b[64];
    rt_graph_cache c;
    destroyed d = {0};
    assert_int_equal(rt_graph_cache_init(&c, 8, destroy, &d), 0);
    rt_graph_key k = key1(a, 1, 1, 40, RT_GRAPH_LOGITS | RT_GRAPH_OUTPUT);
    assert_null(rt_graph_cache_find(&c, &k));
    assert_non_null(rt_graph_cache_put(&c, &k, EXEC(1), 57));
    /* decode steps at other lengths in the same split share it */
    rt_graph_key k2 = key1(b, 1, 1, 255, RT_GRAPH_LOGITS | RT_GRAPH_OUTPUT);
    rt_graph_entry *e = rt_graph_cache_find(&c, &k2);
    assert_non_null(e);
    assert_ptr_equal(e->exec, EXEC(1));
    assert_int_equal(e->kernels, 57);
    /* the next split, other flags, other row or output counts, another layer cut: not */
    k2 = key1(b, 1, 1, 257, RT_GRAPH_LOGITS | RT_GRAPH_OUTPUT);
    assert_null(rt_graph_cache_find(&c, &k2));
    k2 = key1(b, 1, 1, 40, RT_GRAPH_LOGITS | RT_GRAPH_OUTPUT | RT_GRAPH_LORA);
    assert_null(rt_graph_cache_find(&c, &k2));
    k2 = key1(b, 1, 1, 40, RT_GRAPH_OUTPUT);
    assert_null(rt_graph_cache_find(&c, &k2));
    k2 = key1(b, 1, 0, 40, 0);
    assert_null(rt_graph_cache_find(&c, &k2));
    k2 = key1(b, 2, 1, 40, RT_GRAPH_LOGITS | RT_GRAPH_OUTPUT);
    assert_null(rt_graph_cache_find(&c, &k2));
    rt_graph_key_begin(&k2, b, 64, 1, 1, 29, RT_GRAPH_LOGITS | RT_GRAPH_OUTPUT);
    assert_int_equal(rt_graph_key_add_seq(&k2, 0, 1, 256), 0);
    assert_null(rt_graph_cache_find(&c, &k2));
    /* two sequences: order, rows and which caches all count */
    rt_graph_key_begin(&k, a, 64, 5, 5, 30, RT_GRAPH_LOGITS | RT_GRAPH_OUTPUT);
    assert_int_equal(rt_graph_key_add_seq(&k, 0, 3, 256), 0);
    assert_int_equal(rt_graph_key_add_seq(&k, 1, 2, 256), 0);
    assert_non_null(rt_graph_cache_put(&c, &k, EXEC(2), 100));
    rt_graph_key_begin(&k2, b, 64, 5, 5, 30, RT_GRAPH_LOGITS | RT_GRAPH_OUTPUT);
    assert_int_equal(rt_graph_key_add_seq(&k2, 1, 2, 256), 0);
    assert_int_equal(rt_graph_key_add_seq(&k2, 0, 3, 256), 0);
    assert_null(rt_graph_cache_find(&c, &k2));
    rt_graph_key_begin(&k2, b, 64, 5, 5, 30, RT_GRAPH_LOGITS | RT_GRAPH_OUTPUT);
    assert_int_equal(rt_graph_key_add_seq(&k2, 0, 3, 256), 0);
    assert_int_equal(rt_graph_key_add_seq(&k2, 2, 2, 256), 0);
    assert_null(rt_graph_cache_find(&c, &k2));
    rt_graph_key_begin(&k2, b, 64, 5, 5, 30, RT_GRAPH_LOGITS | RT_GRAPH_OUTPUT);
    assert_int_equal(rt_graph_key_add_seq(&k2, 0, 3, 256), 0);
    assert_int_equal(rt_graph_key_add_seq(&k2, 1, 2, 256), 0);
    e = rt_graph_cache_find(&c, &k2);
    assert_non_null(e);
    assert_ptr_equal(e->exec, EXEC(2));
    assert_int_equal(c.hits, 2);
    assert_int_equal(d.n, 0);
    rt_graph_cache_free(&c);
    assert_int_equal(d.n, 2);
    assert_int_equal(d.count[1], 1);
    assert_int_equal(d.count[2], 1);
}

static void test_key_overflow(void **state) {
    (void)state;
    int32_t buf[16];
    rt_graph_key k;
    rt_graph_key_begin(&k, buf, 11, 3, 1, 30, 0); /* room for two sequences */
    assert_int_equal(rt_graph_key_add_seq(&k, 0, 1, 256), 0);
    assert_int_equal(rt_graph_key_add_seq(&k, 1, 1, 256), 0);
    assert_int_equal(rt_graph_key_add_seq(&k, 2, 1, 256), -1);
    rt_graph_cache c;
    destroyed d = {0};
    assert_int_equal(rt_graph_cache_init(&c, 2, destroy, &d), 0);
    assert_null(rt_graph_cache_find(&c, &k));           /* an overflowed key never matches */
    assert_null(rt_graph_cache_put(&c, &k, EXEC(3), 1)); /* nor is cached: its exec goes */
    assert_int_equal(d.count[3], 1);
    rt_graph_cache_free(&c);
    assert_int_equal(rt_graph_key_capacity(BATCH), 5 + 3 * BATCH);
}

static void test_eviction(void **state) {
    (void)state;
    rt_graph_cache c;
    destroyed d = {0};
    int32_t buf[64];
    assert_int_equal(rt_graph_cache_init(&c, 3, destroy, &d), 0);
    for (int i = 1; i <= 3; i++) {
        rt_graph_key k = key1(buf, i, 1, 10, RT_GRAPH_OUTPUT);
        assert_non_null(rt_graph_cache_put(&c, &k, EXEC(i), i));
    }
    rt_graph_key k = key1(buf, 1, 1, 10, RT_GRAPH_OUTPUT); /* row count 1 used last now */
    assert_non_null(rt_graph_cache_find(&c, &k));
    k = key1(buf, 4, 1, 10, RT_GRAPH_OUTPUT);
    assert_non_null(rt_graph_cache_put(&c, &k, EXEC(4), 4)); /* evicts 2, the least recent */
    assert_int_equal(c.n, 3);
    assert_int_equal(c.evictions, 1);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.last, 2);
    k = key1(buf, 2, 1, 10, RT_GRAPH_OUTPUT);
    assert_null(rt_graph_cache_find(&c, &k));
    for (int i = 1; i <= 4; i += 3) {
        k = key1(buf, i, 1, 10, RT_GRAPH_OUTPUT);
        assert_non_null(rt_graph_cache_find(&c, &k));
    }
    /* removal of a failed graph */
    k = key1(buf, 3, 1, 10, RT_GRAPH_OUTPUT);
    rt_graph_entry *e = rt_graph_cache_find(&c, &k);
    assert_non_null(e);
    rt_graph_cache_remove(&c, e);
    assert_int_equal(c.n, 2);
    assert_int_equal(d.count[3], 1);
    assert_null(rt_graph_cache_find(&c, &k));
    for (int i = 1; i <= 4; i += 3) {
        k = key1(buf, i, 1, 10, RT_GRAPH_OUTPUT);
        assert_non_null(rt_graph_cache_find(&c, &k));
    }
    /* clear: everything destroyed once, the cache still usable */
    rt_graph_cache_clear(&c);
    assert_int_equal(c.n, 0);
    assert_int_equal(d.n, 4);
    k = key1(buf, 5, 1, 10, RT_GRAPH_OUTPUT);
    assert_non_null(rt_graph_cache_put(&c, &k, EXEC(5), 5));
    assert_non_null(rt_graph_cache_find(&c, &k));
    rt_graph_cache_free(&c);
    for (int i = 1; i <= 5; i++)
        assert_int_equal(d.count[i], 1);
    assert_int_equal(d.n, 5);
}

static void test_zero_capacity(void **state) {
    (void)state;
    rt_graph_cache c;
    destroyed d = {0};
    int32_t buf[64];
    assert_int_equal(rt_graph_cache_init(&c, 0, destroy, &d), 0);
    rt_graph_key k = key1(buf, 1, 1, 10, 0);
    assert_null(rt_graph_cache_put(&c, &k, EXEC(7), 1));
    assert_int_equal(d.count[7], 1);
    assert_null(rt_graph_cache_find(&c, &k));
    rt_graph_cache_free(&c);
    rt_graph_cache_free(&c); /* twice is harmless */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket),        cmocka_unit_test(test_switch),
        cmocka_unit_test(test_keys),          cmocka_unit_test(test_key_overflow),
        cmocka_unit_test(test_eviction),      cmocka_unit_test(test_zero_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
