/* The runtime against llama.cpp on the real default model (goldens written by
 * scripts/golden/make_logits_golden.py with llama-cpp-python, F16 KV cache, flash attention off).
 *
 * What "close to llama.cpp" can mean here. Both sides run the same quantized arithmetic (Q8_1/Q8_0
 * activations against Q4_1/Q8_0 weights, F16 K/V, F16 rounding of q and of the attention
 * probabilities); only float summation orders differ (SIMD lane layout, tiled kernels, exp
 * approximations). But each ulp of difference can flip the rounding of a Q8_1 activation block
 * (step max|x|/127), and through 30 layers these flips add up to logit deltas of tenths. llama.cpp
 * shows the same spread against itself: the golden file records, per prompt, its batch evaluation
 * against one-token evaluations of the same tokens: max |delta| up to 0.98 and top-1 disagreeing
 * on 11 of 407 rows, all near ties. A reimplementation with its own summation order cannot be held
 * closer than the oracle is to itself, so:
 *   - LOGIT_TOL = 2.0: about twice llama.cpp's own spread (we observe max 1.71 over 407 rows x 32
 *     ids); MEAN_TOL = 0.25 on the mean |delta| (we observe ~0.15). A real defect (wrong RoPE
 * pairs, eps, scale, head, a missing bias) moves logits by whole units on most rows and fails both.
 *   - top-1 must agree on every row whose golden top-1/top-2 margin is >= TIE_MARGIN (0.5, far
 *     above the largest margin at which we or llama.cpp itself flip: 0.31); the overall agreement
 *     is printed (392/407 at the time of writing).
 * Greedy: 10 prompts x up to 128 tokens, prompt by one extend then one-token decodes, as the golden
 * was made. Compared teacher-forced: after a disagreement we continue from llama.cpp's token, so
 * every step is checked; a disagreement must be a near tie in our logits (llama.cpp's choice within
 * TIE_MARGIN of our top). The count of steps and of fully identical cases is printed. */
#include "rt_test_util.h"

#include <math.h>

#define LOGIT_TOL 2.0f
#define MEAN_TOL 0.25f
#define TIE_MARGIN 0.5f
enum { MAX_TOK = 1024, TOP_K = 32 };

static void test_logits_match_llama_cpp(void **state) {
    (void)state;
    specd_model *m = rt_test_model();
    const int32_t V = specd_model_get_info(m)->n_vocab;
    FILE *f = rt_test_data("runtime_logits_golden.txt");
    assert_true(rt_expect_word(f, "specd-logits-golden"));
    int version, top_k, n_vocab;
    assert_int_equal(fscanf(f, "%d top_k %d n_vocab %d", &version, &top_k, &n_vocab), 3);
    assert_int_equal(top_k, TOP_K);
    assert_int_equal(n_vocab, V);
    int32_t *tokens = malloc(sizeof(int32_t) * MAX_TOK);
    float *logits = malloc(sizeof(float) * (size_t)V * MAX_TOK);
    float max_delta = 0.0f;
    double sum_delta = 0.0;
    int rows = 0, prompts = 0, agree = 0;
    int k, n;
    while (rt_expect_word(f, "prompt") && fscanf(f, "%d %d", &k, &n) == 2) {
        assert_true(n > 0 && n <= MAX_TOK);
        assert_true(rt_expect_word(f, "tokens"));
        for (int i = 0; i < n; i++)
            assert_int_equal(fscanf(f, "%d", &tokens[i]), 1);
        specd_context *c = rt_test_context(m, 1, 1024, 512, 0);
        specd_error err;
        for (int off = 0; off < n; off += 512) { /* n_batch chunks */
            int cnt = n - off < 512 ? n - off : 512;
            specd_seq_batch s = {.seq = 0, .n_tokens = cnt, .tokens = tokens + off};
            specd_extend_out o = {.n_rows = cnt, .logits = logits + (size_t)off * V};
            assert_int_equal(specd_context_extend(c, &s, 1, &o, &err), SPECD_OK);
        }
        for (int i = 0; i < n; i++) {
            int pos;
            assert_true(rt_expect_word(f, "row"));
            assert_int_equal(fscanf(f, "%d", &pos), 1);
            assert_int_equal(pos, i);
            const float *row = logits + (size_t)i * V;
            int32_t id0 = -1;
            float v0 = 0, v1 = 0;
            for (int j = 0; j < TOP_K; j++) {
                int id;
                float val;
                assert_int_equal(fscanf(f, "%d %f", &id, &val), 2);
                assert_true(id >= 0 && id < V);
                if (j == 0) id0 = id, v0 = val;
                if (j == 1) v1 = val;
                float d = fabsf(row[id] - val);
                if (!(d <= max_delta)) max_delta = d; /* NaN propagates into the failure */
                sum_delta += d;
            }
            int32_t ours = rt_argmax(row, V);
            agree += ours == id0;
            if (ours != id0 && v0 - v1 >= TIE_MARGIN) {
                fprintf(stderr, "prompt %d row %d: top-1 %d (%.4f), llama.cpp %d (%.4f)\n", k, i,
                        ours, (double)row[ours], id0, (double)v0);
                fail();
            }
            rows++;
        }
        specd_context_destroy(c);
        prompts++;
    }
    const double mean = sum_delta / (rows * (double)TOP_K);
    fprintf(
        stderr,
        "logits: %d prompts, %d rows, top-1 agrees on %d (%.1f%%), max |delta| %.4f (tol %.2f), "
        "mean |delta| %.4f (tol %.2f)\n",
        prompts, rows, agree, 100.0 * agree / rows, (double)max_delta, (double)LOGIT_TOL, mean,
        (double)MEAN_TOL);
    assert_true(prompts >= 3);
    assert_true(max_delta <= LOGIT_TOL);
    assert_true(mean <= MEAN_TOL);
    fclose(f);
    free(tokens);
    free(logits);
    specd_model_destroy(m);
}

static void test_greedy_matches_llama_cpp(void **state) {
    (void)state;
    specd_model *m = rt_test_model();
    const int32_t V = specd_model_get_info(m)->n_vocab;
    FILE *f = rt_test_data("runtime_greedy_golden.txt");
    assert_true(rt_expect_word(f, "specd-greedy-golden"));
    int version, n_gen, eos;
    assert_int_equal(fscanf(f, "%d n_gen %d eos %d", &version, &n_gen, &eos), 3);
    float *logits = malloc(sizeof(float) * (size_t)V);
    int32_t prompt[MAX_TOK], want[MAX_TOK];
    int cases = 0, k, n, n_out, total = 0, same = 0, identical_cases = 0;
    specd_context *c = rt_test_context(m, 1, 1024, 512, 0);
    while (rt_expect_word(f, "case") && fscanf(f, "%d", &k) == 1) {
        assert_true(rt_expect_word(f, "prompt"));
        assert_int_equal(fscanf(f, "%d", &n), 1);
        assert_true(n > 0 && n <= 512);
        for (int i = 0; i < n; i++)
            assert_int_equal(fscanf(f, "%d", &prompt[i]), 1);
        assert_true(rt_expect_word(f, "output"));
        assert_int_equal(fscanf(f, "%d", &n_out), 1);
        assert_true(n_out > 0 && n_out <= n_gen);
        for (int i = 0; i < n_out; i++)
            assert_int_equal(fscanf(f, "%d", &want[i]), 1);
        specd_error err;
        assert_int_equal(specd_context_kv_truncate(c, 0, 0, &err), SPECD_OK);
        int32_t last = n - 1;
        specd_seq_batch s = {.seq = 0, .n_tokens = n, .tokens = prompt};
        specd_extend_out o = {.n_rows = 1, .rows = &last, .logits = logits};
        assert_int_equal(specd_context_extend(c, &s, 1, &o, &err), SPECD_OK);
        int diverged = 0;
        for (int i = 0; i < n_out; i++) {
            int32_t t = rt_argmax(logits, V);
            if (t != want[i]) {
                const float gap = logits[t] - logits[want[i]];
                fprintf(stderr, "case %d step %d: ours %d, llama.cpp %d, margin %.4f\n", k, i, t,
                        want[i], (double)gap);
                if (!(gap < TIE_MARGIN)) fail();
                diverged = 1;
            } else {
                same++;
            }
            if (want[i] == eos) break;
            if (i + 1 < n_out) /* teacher-forced: continue from llama.cpp's token */
                assert_int_equal(specd_context_decode(c, 0, want[i], logits, &err), SPECD_OK);
        }
        identical_cases += !diverged;
        total += n_out;
        cases++;
    }
    fprintf(stderr, "greedy: %d cases, %d of %d steps agree, %d cases identical throughout\n",
            cases, same, total, identical_cases);
    assert_int_equal(cases, 10);
    specd_context_destroy(c);
    fclose(f);
    free(logits);
    specd_model_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_match_llama_cpp),
        cmocka_unit_test(test_greedy_matches_llama_cpp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
