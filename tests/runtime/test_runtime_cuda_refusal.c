/* A CUDA context where none can run (this machine has no GPU; CI has no driver): creation fails
 * with SPECD_E_UNSUPPORTED and a message that says why, leaves *out NULL and crashes nothing; a
 * kernel library that does not load says so; the arguments are checked before any device is
 * touched. Where a device (or the CPU emulation, tests/gpu/emu/run, which names the free memory it
 * reports in SPECD_EMU_DEVICE_MEMORY) is present, the memory check must refuse a context bigger
 * than the free memory, naming the bytes asked and free. On the small llama model. */
#include "test_main.h"

#include "kernels/cuda/cudart.h"
#include "specd/runtime.h"

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static specd_model *model;

static int setup(void **state) {
    (void)state;
    const char *src = getenv("SPECD_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/arch_llama.gguf", src ? src : ".");
    specd_error err;
    if (specd_model_create(path, &model, &err) != SPECD_OK) {
        fprintf(stderr, "%s: %s\n", path, err.message);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    specd_model_destroy(model);
    return 0;
}

static specd_context_params cuda_params(void) {
    specd_context_params p = specd_context_default_params();
    p.device = SPECD_DEVICE_CUDA;
    p.n_ctx = 64;
    p.n_batch = 8;
    p.n_threads = 1;
    return p;
}

static void expect(const specd_context_params *p, specd_status want, const char *msg) {
    specd_context *c = (specd_context *)&c; /* must be left untouched on failure */
    specd_context *const before = c;
    specd_error err;
    specd_error_clear(&err);
    const specd_status st = specd_context_create(model, p, &c, &err);
    if (st == SPECD_OK) specd_context_destroy(c);
    if (st != want || (msg && !strstr(err.message, msg))) {
        fprintf(stderr, "status %d (want %d), message '%s' (want '%s')\n", st, want, err.message,
                msg ? msg : "");
        fail();
    }
    if (st != SPECD_OK) assert_ptr_equal(c, before);
}

static void test_arguments_first(void **state) {
    (void)state;
    specd_context_params p = cuda_params();
    p.n_seq = 0;
    expect(&p, SPECD_E_INVALID_ARG, "n_seq");
    p = cuda_params();
    p.n_layers = 1000;
    expect(&p, SPECD_E_INVALID_ARG, "n_layers");
    p = cuda_params();
    p.n_batch = 0;
    expect(&p, SPECD_E_INVALID_ARG, "n_batch");
    p = cuda_params();
    p.device = 7;
    expect(&p, SPECD_E_INVALID_ARG, "device 7");
    p = cuda_params();
    p.device = -1;
    expect(&p, SPECD_E_INVALID_ARG, "SPECD_DEVICE");
}

static void test_no_device(void **state) {
    (void)state;
    if (specd_cuda_device_count() > 0) {
        printf("a CUDA device is present: creation on it is test_runtime_cuda's part\n");
        specd_context_params p = cuda_params();
        p.device_index = 1000; /* past any machine's devices */
        expect(&p, SPECD_E_INVALID_ARG, "CUDA device 1000");
        return;
    }
    specd_context_params p = cuda_params();
    specd_context *c = NULL;
    specd_error err;
    specd_error_clear(&err);
    assert_int_equal(specd_context_create(model, &p, &c, &err), SPECD_E_UNSUPPORTED);
    assert_null(c);
    printf("refused as expected: %s\n", err.message);
    assert_non_null(strstr(err.message, "CUDA"));
    assert_true(strlen(err.message) > 20);
}

/* In a child process: the kernel library is loaded once per process. */
static void test_missing_kernel_library(void **state) {
    (void)state;
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("SPECD_CUDA_LIBRARY", "/nonexistent/libspecd_cuda.so", 1);
        specd_context_params p = cuda_params();
        specd_context *c = NULL;
        specd_error err;
        specd_error_clear(&err);
        const specd_status st = specd_context_create(model, &p, &c, &err);
        const int ok = st == SPECD_E_UNSUPPORTED && !c && strstr(err.message, "libspecd_cuda.so") &&
                       strstr(err.message, "not available");
        if (!ok) fprintf(stderr, "status %d, message '%s'\n", st, err.message);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_emulated_device_checks(void **state) {
    (void)state;
    const char *emu = getenv("SPECD_EMU_DEVICE_MEMORY");
    if (specd_cuda_device_count() == 0 || !emu) {
        printf("memory and driver checks: need the CPU emulation's device (tests/gpu/emu/run)\n");
        return;
    }
    specd_context_params p = cuda_params();
    p.n_seq = 4096; /* a KV cache past the emulated free memory */
    p.n_ctx = 1 << 18;
    expect(&p, SPECD_E_NOMEM, "bytes free");
    /* and the emulation's old driver (cudaErrorInsufficientDriver) */
    setenv("SPECD_EMU_DRIVER", "12000", 1);
    p = cuda_params();
    expect(&p, SPECD_E_UNSUPPORTED, "older than the runtime");
    unsetenv("SPECD_EMU_DRIVER");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_kernel_library), /* first: before this process loads it */
        cmocka_unit_test(test_arguments_first),
        cmocka_unit_test(test_no_device),
        cmocka_unit_test(test_emulated_device_checks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
