/* Output never depends on the machine's ISA: the AVX-512 path's logits are bitwise equal to the
 * AVX2 path's, in both numerics modes, on the golden prompts (every row of each prompt, computed as one batched extend,
 * which takes the multi-row tiles, and then as one-token decodes on two threads). The path is
 * chosen once per process (SPECD_CPU_PATH), so each path runs in a forked child that writes its
 * logits into shared memory. Skipped (exit 77) when this CPU lacks AVX-512 VNNI. The AVX2 path
 * itself is held to llama.cpp's goldens by test_runtime_golden. */
#include "rt_test_util.h"

#include "kernels/cpu/cpu_dispatch.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum { MAX_TOK = 512, MAX_PROMPTS = 8, N_DECODE = 24 };

static int n_prompts;
static int32_t n_vocab;
static int n_tok[MAX_PROMPTS];
static int32_t tokens[MAX_PROMPTS][MAX_TOK];

/* The vocabulary size and the prompts' token ids from the logits golden; its rows are skipped.
 * (The parent loads no model: that would fix its CPU path before the children choose theirs.) */
static void read_prompts(void) {
    FILE *f = rt_test_data("runtime_logits_golden.txt");
    char w[64];
    while (fscanf(f, " %63s", w) == 1) {
        if (!strcmp(w, "n_vocab")) assert_int_equal(fscanf(f, "%d", &n_vocab), 1);
        if (strcmp(w, "prompt") != 0) continue;
        int k, n;
        assert_int_equal(fscanf(f, "%d %d", &k, &n), 2);
        assert_true(n > 0 && n <= MAX_TOK && n_prompts < MAX_PROMPTS);
        assert_true(rt_expect_word(f, "tokens"));
        for (int i = 0; i < n; i++)
            assert_int_equal(fscanf(f, "%d", &tokens[n_prompts][i]), 1);
        n_tok[n_prompts++] = n;
    }
    fclose(f);
}

/* Every prompt's logits on this process's path, in each numerics mode: all rows of one extend,
 * then N_DECODE decodes of the prompt's own tokens again (rows after the prompt). */
static void compute(const specd_model *m, float *out, int32_t V) {
    specd_error err;
    for (int run = 0; run < 2 * n_prompts; run++) {
        const int32_t mode = run < n_prompts ? SPECD_NUMERICS_LLAMA : SPECD_NUMERICS_FAST;
        const int p = run % n_prompts;
        specd_context *c = rt_test_context_mode(m, 1, 1024, MAX_TOK, 2, mode, 0);
        specd_seq_batch s = {.seq = 0, .n_tokens = n_tok[p], .tokens = tokens[p]};
        specd_extend_out o = {.n_rows = n_tok[p], .logits = out};
        if (specd_context_extend(c, &s, 1, &o, &err) != SPECD_OK) exit(2);
        out += (size_t)n_tok[p] * V;
        for (int i = 0; i < N_DECODE; i++, out += V)
            if (specd_context_decode(c, 0, tokens[p][i % n_tok[p]], out, &err) != SPECD_OK)
                exit(2);
        specd_context_destroy(c);
    }
}

static void run_child(const char *path, float *out, int32_t V) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("SPECD_CPU_PATH", path, 1);
        specd_model *m = fixture_model_open();
        assert_int_equal(specd_model_get_info(m)->n_vocab, V);
        compute(m, out, V);
        specd_model_destroy(m);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_avx512_equals_avx2(void **state) {
    (void)state;
    read_prompts();
    const int32_t V = n_vocab;
    assert_true(V > 0);
    size_t rows = 0;
    for (int p = 0; p < n_prompts; p++)
        rows += 2 * ((size_t)n_tok[p] + N_DECODE); /* llama, then fast */
    const size_t bytes = rows * (size_t)V * sizeof(float);
    float *a = mmap(NULL, 2 * bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(a != MAP_FAILED);
    float *b = a + rows * (size_t)V;
    run_child("avx2", a, V);
    run_child("avx512", b, V);
    size_t diff = 0;
    for (size_t r = 0; r < rows; r++)
        if (memcmp(a + r * V, b + r * V, (size_t)V * sizeof(float))) {
            if (!diff++) fprintf(stderr, "row %zu: avx512 logits differ from avx2\n", r);
        }
    fprintf(stderr, "%zu of %zu rows (%d prompts + %d decodes each, both numerics) differ between "
                    "avx2 and avx512\n",
            diff, rows, n_prompts, N_DECODE);
    assert_int_equal(diff, 0);
    munmap(a, 2 * bytes);
}

int main(void) {
    if (!specd_cpu_path_supported(SPECD_CPU_AVX512) || !specd_cpu_path_supported(SPECD_CPU_AVX2)) {
        fprintf(stderr, "this CPU has no AVX-512 VNNI path to compare: skipped\n");
        return SPECD_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_avx512_equals_avx2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
