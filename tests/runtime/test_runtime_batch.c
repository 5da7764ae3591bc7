/* Batch invariance on the real model: every row's logits (and hidden state) are bitwise identical
 * whether the row is decoded alone on one thread or computed inside extends of any size, mixed
 * with other sequences, under an explicit (causal) visibility matrix and explicit positions, with
 * 1, 2 or 3 threads. 240 rows per configuration. ctest runs it once per CPU path
 * (SPECD_CPU_PATH=avx512, avx2); a path this CPU lacks is skipped (exit 77) with a message. */
#include "rt_test_util.h"

#include "kernels/cpu/cpu_dispatch.h"

#include <string.h>

enum { N = 240 };

static int32_t toks[N];
static float *ref;     /* N x V: one-token decodes, 1 thread */
static float *ref_hid; /* N x E */

static void make_tokens(int32_t V) {
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        toks[i] = (int32_t)((s >> 8) % (uint32_t)V);
    }
}

static int rows_equal(const float *a, const float *b, size_t n, const char *what, int row) {
    if (memcmp(a, b, n * sizeof(float)) == 0) return 1;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float))) {
            fprintf(stderr, "%s: row %d differs at %zu: %.9g vs %.9g\n", what, row, i, (double)a[i],
                    (double)b[i]);
            break;
        }
    return 0;
}

static void reference(const specd_model *m) {
    const specd_model_info *in = specd_model_get_info(m);
    ref = malloc(sizeof(float) * (size_t)N * in->n_vocab);
    ref_hid = malloc(sizeof(float) * (size_t)N * in->n_embd);
    specd_context *c = rt_test_context(m, 1, 512, 16, 1);
    specd_error err;
    for (int i = 0; i < N; i++) {
        specd_seq_batch s = {.seq = 0, .n_tokens = 1, .tokens = &toks[i]};
        specd_extend_out o = {.n_rows = 1,
                              .logits = ref + (size_t)i * in->n_vocab,
                              .hidden = ref_hid + (size_t)i * in->n_embd};
        assert_int_equal(specd_context_extend(c, &s, 1, &o, &err), SPECD_OK);
    }
    specd_context_destroy(c);
}

/* Extends seq 0 (and seq 1 when two) with chunk sizes from sizes[], cycling, and checks rows. */
static void run_chunks(const specd_model *m, int n_threads, const int *sizes, int n_sizes,
                       int two_seqs, int explicit_rules, const char *what) {
    const specd_model_info *in = specd_model_get_info(m);
    const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
    specd_context *c = rt_test_context(m, 2, 512, 2 * N, n_threads);
    float *lg = malloc(sizeof(float) * 2 * N * V), *hd = malloc(sizeof(float) * 2 * N * E);
    uint8_t *vis = malloc((size_t)N * (N + N));
    int32_t pos[N];
    int done[2] = {0, 0}, step = 0;
    specd_error err;
    while (done[0] < N || (two_seqs && done[1] < N)) {
        specd_seq_batch s[2];
        int ns = 0;
        for (int q = 0; q < (two_seqs ? 2 : 1); q++) {
            if (done[q] >= N) continue;
            int cnt = sizes[(step + 3 * q) % n_sizes];
            if (cnt > N - done[q]) cnt = N - done[q];
            s[ns] = (specd_seq_batch){.seq = q, .n_tokens = cnt, .tokens = toks + done[q]};
            if (explicit_rules && q == 0) {
                int w = done[q] + cnt;
                memset(vis, 0, (size_t)cnt * (size_t)w);
                for (int i = 0; i < cnt; i++) {
                    for (int j = 0; j <= done[q] + i; j++)
                        vis[(size_t)i * w + j] = 1;
                    pos[i] = done[q] + i;
                }
                s[ns].visible = vis;
                s[ns].pos = pos;
            }
            ns++;
        }
        int total = 0;
        for (int k = 0; k < ns; k++)
            total += s[k].n_tokens;
        specd_extend_out o = {.n_rows = total, .logits = lg, .hidden = hd};
        assert_int_equal(specd_context_extend(c, s, ns, &o, &err), SPECD_OK);
        int r = 0;
        for (int k = 0; k < ns; k++) {
            int q = s[k].seq;
            for (int i = 0; i < s[k].n_tokens; i++, r++) {
                int row = done[q] + i;
                if (!rows_equal(lg + (size_t)r * V, ref + (size_t)row * V, V, what, row)) fail();
                if (!rows_equal(hd + (size_t)r * E, ref_hid + (size_t)row * E, E, what, row))
                    fail();
            }
            done[q] += s[k].n_tokens;
        }
        step++;
    }
    assert_int_equal(specd_context_kv_len(c, 0), N);
    free(lg);
    free(hd);
    free(vis);
    specd_context_destroy(c);
}

static void test_batch_invariance(void **state) {
    (void)state;
    specd_model *m = fixture_model_open();
    make_tokens(specd_model_get_info(m)->n_vocab);
    reference(m);
    static const int fib[] = {1, 2, 3, 5, 8, 13, 16, 7, 4, 32};
    static const int whole[] = {N};
    static const int odd[] = {17, 1, 64, 9};
    run_chunks(m, 2, fib, 10, 0, 0, "2 threads, chunks 1..32");
    run_chunks(m, 3, whole, 1, 0, 0, "3 threads, one extend of 240");
    run_chunks(m, 2, odd, 4, 1, 0, "2 threads, two sequences per extend");
    run_chunks(m, 1, fib, 10, 1, 1, "1 thread, explicit causal mask and positions");
    fprintf(stderr, "batch invariance: %d rows bitwise identical in 4 configurations\n", N);
    free(ref);
    free(ref_hid);
    specd_model_destroy(m);
}

int main(void) {
    if (!rt_test_cpu_path()) return SPECD_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_invariance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
