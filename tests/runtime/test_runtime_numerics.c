/* The two numerics modes (specd_context_params.numerics):
 *   - kernels: for every weight type the runtime takes (Q4_0, Q4_1, Q8_0 in both orders; Q4_K,
 *     Q6_K, F16, BF16, F32 in llama.cpp's order, which fast mode keeps for them), each output
 *     row of a matmul is bitwise the same computed alone on the scalar path or in batches of 1,
 *     2, 3, 8, 17 and 64 rows, with the weight rows split as one or two threads split them, on
 *     every vector path this CPU has, and (the quantized types) the same bits on every path;
 *   - the model: in both modes, every row's logits and hidden state (attention included) are
 *     bitwise the same decoded one by one on one thread, in extends of 2, 3, 8 and 17 rows on two
 *     threads, and in one extend of 64 rows on one thread (the model cut to a few layers, so the
 *     test takes seconds; the head, the model's Q8_0 matrix, runs in full).
 * Fast mode's accuracy against llama.cpp's bits is test_runtime_numerics_accuracy. */
#include "rt_test_util.h"

#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/matmul_fast.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_blocks.h"

#include <math.h>

enum { N_OUT = 37, N_ROWS = 64, N_TOK = 64, N_LAYERS = 3 };

static const int batches[] = {1, 2, 3, 8, 17, 64};

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(rng >> 40) / 16777216.0f * 2.0f - 1.0f;
}

/* A weight matrix of type t: from floats where the type has a quantizer, else random bytes with
 * each block's fp16 scales set to small finite values. */
static void *make_weights(uint32_t t, int64_t n_in, size_t *row_bytes) {
    const specd_dtype_traits *tr = specd_dtype_traits_scalar(t);
    const size_t rb = specd_dtype_row_bytes(t, n_in);
    char *w = malloc(rb * N_OUT);
    float *x = malloc(sizeof(float) * (size_t)n_in);
    for (int o = 0; o < N_OUT; o++) {
        char *row = w + (size_t)o * rb;
        if (tr->from_float) {
            for (int64_t i = 0; i < n_in; i++)
                x[i] = frand() * (1.0f + (float)(i % 7));
            tr->from_float(x, row, n_in);
            continue;
        }
        for (size_t i = 0; i < rb; i++)
            row[i] = (char)(frand() * 127.0f);
        for (size_t b = 0; b < rb / tr->block_bytes; b++) {
            char *blk = row + b * tr->block_bytes;
            const uint16_t d = specd_fp32_to_fp16(0.01f + 0.001f * (float)(b % 5));
            const uint16_t dmin = specd_fp32_to_fp16(0.002f);
            if (t == SPECD_DTYPE_Q4_K) {
                memcpy(blk, &d, 2);
                memcpy(blk + 2, &dmin, 2);
            } else { /* Q6_K: d last */
                memcpy(blk + offsetof(specd_block_q6_k, d), &d, 2);
            }
        }
    }
    free(x);
    *row_bytes = rb;
    return w;
}

/* y[N_ROWS][N_OUT] for rows [r0, r0 + n) computed as one call per weight split. */
static void run(uint32_t t, int fast, const void *w, int64_t n_in, const void *xq, size_t xrb,
                int64_t r0, int64_t n, int threads, int simd, float *y) {
    const specd_dtype_traits *tr = simd ? specd_dtype_traits_get(t) : specd_dtype_traits_scalar(t);
    for (int th = 0; th < threads; th++) {
        const int64_t b = N_OUT * th / threads, e = N_OUT * (th + 1) / threads;
        const char *x = (const char *)xq + (size_t)r0 * xrb;
        if (fast)
            specd_matmul_rows_fast(t, w, n_in, b, e, x, xrb, n, y + r0 * N_OUT, N_OUT, simd);
        else
            specd_matmul_rows(tr, t, w, n_in, b, e, x, xrb, n, y + r0 * N_OUT, N_OUT, simd);
    }
}

static int check_type(uint32_t t, int fast, int64_t n_in) {
    size_t wrb;
    void *w = make_weights(t, n_in, &wrb);
    const specd_dtype_traits *tr = specd_dtype_traits_scalar(t);
    const uint32_t vt = tr->vec_dot_type;
    const size_t xrb = fast ? specd_fast_row_bytes(t, n_in) : specd_dtype_row_bytes(vt, n_in);
    char *xq = malloc(xrb * N_ROWS);
    float *x = malloc(sizeof(float) * (size_t)n_in);
    char *xq2 = malloc(xrb);
    int quant_same = 1;
    for (int r = 0; r < N_ROWS; r++) {
        for (int64_t i = 0; i < n_in; i++) /* a zero block in some rows (amax 0) */
            x[i] = r % 5 == 4 && i < 32 ? 0.0f : frand() * (r % 3 ? 1.0f : 40.0f);
        if (fast) {
            specd_fast_quantize_row(x, n_in, xq + (size_t)r * xrb, 0);
            for (int simd = 1; simd <= SPECD_CPU_AVX512; simd++)
                if (specd_cpu_path_supported((specd_cpu_path)simd)) {
                    specd_fast_quantize_row(x, n_in, xq2, simd);
                    quant_same &= memcmp(xq2, xq + (size_t)r * xrb, xrb) == 0;
                }
        } else
            specd_quantize_rows(specd_dtype_traits_scalar(vt), vt, x, n_in, 1, n_in,
                                xq + (size_t)r * xrb);
    }
    float *ref = malloc(sizeof(float) * N_ROWS * N_OUT),
          *y = malloc(sizeof(float) * N_ROWS * N_OUT);
    float *alone = malloc(sizeof(float) * N_ROWS * N_OUT);
    for (int r = 0; r < N_ROWS; r++) /* each row alone, scalar, one thread */
        run(t, fast, w, n_in, xq, xrb, r, 1, 1, 0, ref);
    int bad = 0, finite = 1;
    for (int i = 0; i < N_ROWS * N_OUT; i++)
        finite &= isfinite(ref[i]) != 0;
    /* the quantized types give the scalar bits on every path; the float types' vector dots sum
     * in another order than their scalar ones, so each path is held to its own rows alone */
    const int same_paths = tr->block_size > 1;
    for (int simd = 0; simd <= SPECD_CPU_AVX512; simd++) {
        if (!specd_cpu_path_supported((specd_cpu_path)simd)) continue;
        for (int r = 0; r < N_ROWS; r++)
            run(t, fast, w, n_in, xq, xrb, r, 1, 1, simd, alone);
        if (same_paths && memcmp(alone, ref, sizeof(float) * N_ROWS * N_OUT) && !bad++)
            fprintf(stderr, "%s %s: path %s differs from scalar\n", tr->name,
                    fast ? "fast" : "llama", specd_cpu_path_name((specd_cpu_path)simd));
        for (size_t k = 0; k < sizeof batches / sizeof batches[0]; k++)
            for (int threads = 1; threads <= 2; threads++) {
                memset(y, 0xff, sizeof(float) * N_ROWS * N_OUT);
                for (int64_t r0 = 0; r0 < N_ROWS; r0 += batches[k]) {
                    const int64_t n = N_ROWS - r0 < batches[k] ? N_ROWS - r0 : batches[k];
                    run(t, fast, w, n_in, xq, xrb, r0, n, threads, simd, y);
                }
                if (memcmp(y, alone, sizeof(float) * N_ROWS * N_OUT) && !bad++)
                    fprintf(stderr, "%s %s: path %s, batches of %d, %d thread(s): differs\n",
                            tr->name, fast ? "fast" : "llama",
                            specd_cpu_path_name((specd_cpu_path)simd), batches[k], threads);
            }
    }
    if (!quant_same && !bad++)
        fprintf(stderr, "%s fast: the vector quantizer's bytes differ from the scalar one's\n",
                tr->name);
    fprintf(stderr, "  %-4s %-5s n_in %lld: %s\n", tr->name, fast ? "fast" : "llama",
            (long long)n_in,
            bad          ? "DIFFERS"
            : same_paths ? "bitwise equal in every batch and split, the same on every path"
                         : "bitwise equal in every batch and split (per path)");
    free(w), free(xq), free(xq2), free(x), free(ref), free(y), free(alone);
    return !bad && finite;
}

static void test_kernels_batch_invariant(void **state) {
    (void)state;
    /* blocks of 32: 25 = three groups of eight and one block (a half group), 18 (the default
     * model's width: two and a half group of two), 14 (a partial full group of six), 8 */
    static const uint32_t q32[] = {SPECD_DTYPE_Q4_0, SPECD_DTYPE_Q4_1, SPECD_DTYPE_Q8_0};
    static const uint32_t other[] = {SPECD_DTYPE_Q4_K, SPECD_DTYPE_Q6_K, SPECD_DTYPE_F16,
                                     SPECD_DTYPE_BF16, SPECD_DTYPE_F32};
    int ok = 1;
    for (size_t i = 0; i < sizeof q32 / sizeof q32[0]; i++) {
        assert_true(specd_fast_row_bytes(q32[i], 800) > 0);
        ok &= check_type(q32[i], 1, 800);
        ok &= check_type(q32[i], 1, 576);
        ok &= check_type(q32[i], 1, 448);
        ok &= check_type(q32[i], 1, 256);
        ok &= check_type(q32[i], 0, 800);
    }
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        assert_int_equal(specd_fast_row_bytes(other[i], 512), 0); /* llama.cpp's order in fast */
        ok &= check_type(other[i], 0, 512);
    }
    assert_true(ok);
}

/* The model in one mode: N_TOK rows decoded one by one (1 thread) as the reference, then in
 * extends of 2, 3, 8, 17 (2 threads) and of 64 (1 thread). */
static int check_model(const specd_model *m, int32_t mode) {
    const specd_model_info *in = specd_model_get_info(m);
    const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
    int32_t toks[N_TOK];
    uint32_t s = 777;
    for (int i = 0; i < N_TOK; i++) {
        s = s * 1664525u + 1013904223u;
        toks[i] = (int32_t)((s >> 8) % (uint32_t)in->n_vocab);
    }
    float *ref = malloc(sizeof(float) * N_TOK * V), *ref_h = malloc(sizeof(float) * N_TOK * E);
    float *lg = malloc(sizeof(float) * N_TOK * V), *hd = malloc(sizeof(float) * N_TOK * E);
    specd_error err;
    specd_context *c = rt_test_context_mode(m, 1, 128, N_TOK, 1, mode, N_LAYERS);
    for (int i = 0; i < N_TOK; i++) {
        specd_seq_batch b = {.seq = 0, .n_tokens = 1, .tokens = &toks[i]};
        specd_extend_out o = {.n_rows = 1, .logits = ref + i * V, .hidden = ref_h + i * E};
        assert_int_equal(specd_context_extend(c, &b, 1, &o, &err), SPECD_OK);
    }
    specd_context_destroy(c);
    static const int cycle[] = {2, 3, 8, 17}, whole[] = {N_TOK};
    const struct {
        const int *sizes;
        int n, threads;
    } runs[] = {{cycle, 4, 2}, {whole, 1, 1}};
    int bad = 0;
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        c = rt_test_context_mode(m, 1, 128, N_TOK, runs[k].threads, mode, N_LAYERS);
        for (int done = 0, step = 0; done < N_TOK; step++) {
            int n = runs[k].sizes[step % runs[k].n];
            n = n < N_TOK - done ? n : N_TOK - done;
            specd_seq_batch b = {.seq = 0, .n_tokens = n, .tokens = toks + done};
            specd_extend_out o = {.n_rows = n, .logits = lg + done * V, .hidden = hd + done * E};
            assert_int_equal(specd_context_extend(c, &b, 1, &o, &err), SPECD_OK);
            done += n;
        }
        specd_context_destroy(c);
        for (int i = 0; i < N_TOK; i++)
            if (memcmp(lg + i * V, ref + i * V, V * sizeof(float)) ||
                memcmp(hd + i * E, ref_h + i * E, E * sizeof(float))) {
                if (!bad++)
                    fprintf(stderr, "%s: row %d differs (run %zu)\n", specd_numerics_name(mode), i,
                            k);
            }
    }
    fprintf(stderr, "  model, %s numerics, %d layers + head: %d rows %s\n",
            specd_numerics_name(mode), N_LAYERS, N_TOK,
            bad ? "DIFFER"
                : "bitwise equal alone and in extends of 2, 3, 8, 17 and 64, on 1 "
                  "and 2 threads");
    free(ref), free(ref_h), free(lg), free(hd);
    return !bad;
}

static void test_model_batch_invariant(void **state) {
    (void)state;
    specd_model *m = fixture_model_open();
    int ok = check_model(m, SPECD_NUMERICS_FAST);
    ok &= check_model(m, SPECD_NUMERICS_LLAMA);
    specd_model_destroy(m);
    assert_true(ok);
}

static void test_mode_names(void **state) {
    (void)state;
    int32_t v = -5;
    specd_error err;
    assert_int_equal(specd_numerics_parse("fast", &v, &err), SPECD_OK);
    assert_int_equal(v, SPECD_NUMERICS_FAST);
    assert_int_equal(specd_numerics_parse("llama", &v, &err), SPECD_OK);
    assert_int_equal(v, SPECD_NUMERICS_LLAMA);
    assert_int_equal(specd_numerics_parse("exact", &v, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "fast, llama"));
    assert_string_equal(specd_numerics_name(SPECD_NUMERICS_FAST), "fast");
    assert_string_equal(specd_numerics_name(SPECD_NUMERICS_LLAMA), "llama");
    unsetenv("SPECD_NUMERICS"); /* the default when nothing names a mode */
    assert_int_equal(specd_context_default_params().numerics, SPECD_NUMERICS_FAST);
}

int main(void) {
    if (!rt_test_cpu_path()) return SPECD_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mode_names),
        cmocka_unit_test(test_kernels_batch_invariant),
        cmocka_unit_test(test_model_batch_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
