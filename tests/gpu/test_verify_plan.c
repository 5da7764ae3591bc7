/* The device acceptance kernel's host-side checks and scratch layout (kernels/cuda/verify_plan.h),
 * which run without a GPU: every refusal names its reason, and a good batch passes. */
#include "test_main.h"

#include "kernels/cuda/cuda_plan.h"
#include "kernels/cuda/verify_plan.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define DEV(addr) ((void *)(uintptr_t)(addr))

static specd_cuda_verify_seq seqs[2];

static specd_cuda_verify_args good_args(void) {
    memset(seqs, 0, sizeof seqs);
    for (int i = 0; i < 2; i++) {
        specd_cuda_verify_seq *s = &seqs[i];
        s->rule = i ? SPECD_CUDA_VERIFY_GREEDY : SPECD_CUDA_VERIFY_COUPLED;
        s->temperature = 0.8f;
        s->top_p = 1.0f;
        s->k = 3;
        for (int j = 0; j < 3; j++) s->draft[j] = 10 + j;
        for (int j = 0; j <= 3; j++) s->row[j] = 4 * i + j;
    }
    specd_cuda_verify_args a = {.logits = DEV(0x10000), .dtype = SPECD_CUDA_LOGITS_BF16,
                                .row_stride = 128, .n_rows = 8, .n_vocab = 100,
                                .mask_at = -FLT_MAX, .n_seqs = 2, .seqs = seqs,
                                .out = DEV(0x20000), .scratch = DEV(0x30000),
                                .scratch_bytes = specd_cuda_verify_scratch_bytes(2)};
    return a;
}

static int refused(const specd_cuda_verify_args *a, const char *needle) {
    char why[256] = "";
    int rc = specd_cuda_check_verify(a, why, sizeof why);
    if (rc != SPECD_CUDA_E_ARGUMENT) return 0;
    if (!strstr(why, needle)) {
        print_message("reason '%s' lacks '%s'\n", why, needle);
        return 0;
    }
    return 1;
}

static void test_layout(void **state) {
    (void)state;
    assert_int_equal(specd_cuda_verify_scratch_bytes(0), 0);
    size_t s1 = specd_cuda_verify_scratch_slots_offset(3);
    size_t s2 = specd_cuda_verify_scratch_counts_offset(3);
    assert_true(s1 >= 3 * sizeof(specd_cuda_verify_seq) && s1 % 256 == 0);
    assert_true(s2 >= s1 + 3 * SPECD_CUDA_VERIFY_MAX_SLOTS * SPECD_CUDA_VERIFY_SLOT_WORDS *
                               sizeof(int32_t));
    assert_true(specd_cuda_verify_scratch_bytes(3) >= s2 + 3 * sizeof(uint32_t));
    specd_cuda_verify_args a = good_args();
    assert_int_equal(specd_cuda_verify_grid_slots(&a), 4);
    seqs[1].k = 7;
    assert_int_equal(specd_cuda_verify_grid_slots(&a), 8);
}

static void test_checks(void **state) {
    (void)state;
    specd_cuda_verify_args a = good_args();
    char why[256];
    assert_int_equal(specd_cuda_check_verify(&a, why, sizeof why), SPECD_CUDA_OK);
    seqs[0].row[3] = -1; /* no bonus slot */
    assert_int_equal(specd_cuda_check_verify(&a, why, sizeof why), SPECD_CUDA_OK);
    a = good_args();
    seqs[1].k = 0; /* a plain step: the bonus row alone */
    assert_int_equal(specd_cuda_check_verify(&a, why, sizeof why), SPECD_CUDA_OK);

    assert_true(refused(NULL, "NULL"));
    a = good_args(); a.logits = NULL; assert_true(refused(&a, "NULL"));
    a = good_args(); a.dtype = 3; assert_true(refused(&a, "dtype"));
    a = good_args(); a.logits = DEV(0x10001); assert_true(refused(&a, "aligned"));
    a = good_args(); a.row_stride = 99; assert_true(refused(&a, "stride"));
    a = good_args(); a.n_vocab = 0; assert_true(refused(&a, "n_vocab"));
    a = good_args(); a.mask_at = NAN; assert_true(refused(&a, "mask_at"));
    a = good_args(); a.n_seqs = 0; assert_true(refused(&a, "n_seqs"));
    a = good_args(); a.scratch_bytes -= 1; assert_true(refused(&a, "scratch"));
    a = good_args(); a.scratch = DEV(0x30010); assert_true(refused(&a, "aligned"));
    a = good_args(); seqs[1].rule = 3; assert_true(refused(&a, "rule"));
    a = good_args(); seqs[0].temperature = -1.0f; assert_true(refused(&a, "temperature"));
    a = good_args(); seqs[0].temperature = INFINITY; assert_true(refused(&a, "temperature"));
    a = good_args(); seqs[0].top_k = -1; assert_true(refused(&a, "top_k"));
    a = good_args(); seqs[0].top_p = 0.0f; assert_true(refused(&a, "top_p"));
    a = good_args(); seqs[0].top_p = 1.5f; assert_true(refused(&a, "top_p"));
    a = good_args(); seqs[0].top_p = NAN; assert_true(refused(&a, "top_p"));
    a = good_args(); seqs[0].min_p = 1.0f; assert_true(refused(&a, "min_p"));
    a = good_args(); seqs[0].bias = DEV(0x40002); assert_true(refused(&a, "bias"));
    a = good_args(); seqs[0].k = SPECD_CUDA_VERIFY_MAX_K + 1; assert_true(refused(&a, "k "));
    a = good_args(); seqs[0].k = -1; assert_true(refused(&a, "k "));
    a = good_args(); seqs[0].k = 0; seqs[0].row[0] = -1; assert_true(refused(&a, "nothing"));
    a = good_args(); seqs[1].draft[2] = 100; assert_true(refused(&a, "draft 2"));
    a = good_args(); seqs[1].row[1] = 8; assert_true(refused(&a, "key row"));
    a = good_args(); seqs[1].row[0] = -1; assert_true(refused(&a, "key row"));
    a = good_args(); seqs[1].row[3] = 8; assert_true(refused(&a, "bonus row"));
    a = good_args(); seqs[1].row[3] = -2; assert_true(refused(&a, "bonus row"));
}

/* The arguments of top-p, q rows (every rule), REJECTION's relaxed tau and trees. */
static void test_rules(void **state) {
    (void)state;
    specd_cuda_verify_args a = good_args();
    char why[256];
    seqs[0].top_p = 0.9f; /* top-p is on the device now */
    seqs[1].rule = SPECD_CUDA_VERIFY_REJECTION;
    assert_int_equal(specd_cuda_check_verify(&a, why, sizeof why), SPECD_CUDA_OK);
    seqs[1].draft_probs = DEV(0x50000);
    seqs[1].q_stride = 100;
    seqs[1].relaxed_tau = 0.5f;
    assert_int_equal(specd_cuda_check_verify(&a, why, sizeof why), SPECD_CUDA_OK);
    seqs[1].k = 0; /* a plain step under REJECTION: the keyed sample */
    assert_int_equal(specd_cuda_check_verify(&a, why, sizeof why), SPECD_CUDA_OK);

    a = good_args(); seqs[0].rule = 7; assert_true(refused(&a, "rule 7"));
    a = good_args(); seqs[0].relaxed_tau = 0.1f; assert_true(refused(&a, "REJECTION rule only"));
    a = good_args(); seqs[0].rule = SPECD_CUDA_VERIFY_REJECTION; seqs[0].relaxed_tau = -1.0f;
    assert_true(refused(&a, "relaxed_tau"));
    a = good_args(); seqs[0].rule = SPECD_CUDA_VERIFY_REJECTION; seqs[0].relaxed_tau = INFINITY;
    assert_true(refused(&a, "relaxed_tau"));
    /* q under COUPLED and GREEDY: checked as the engine checks it (BAD_Q), its layout too */
    a = good_args(); seqs[0].draft_probs = DEV(0x50000); seqs[0].q_stride = 100;
    assert_int_equal(specd_cuda_check_verify(&a, why, sizeof why), SPECD_CUDA_OK);
    seqs[0].rule = SPECD_CUDA_VERIFY_GREEDY;
    assert_int_equal(specd_cuda_check_verify(&a, why, sizeof why), SPECD_CUDA_OK);
    seqs[0].q_stride = 99; assert_true(refused(&a, "q stride"));
    a = good_args(); seqs[0].draft_probs = DEV(0x50002); seqs[0].q_stride = 100;
    assert_true(refused(&a, "draft_probs is not 4-byte aligned"));
    a = good_args(); seqs[0].rule = SPECD_CUDA_VERIFY_REJECTION;
    seqs[0].draft_probs = DEV(0x50002); seqs[0].q_stride = 100;
    assert_true(refused(&a, "draft_probs is not 4-byte aligned"));
    a = good_args(); seqs[0].rule = SPECD_CUDA_VERIFY_REJECTION;
    seqs[0].draft_probs = DEV(0x50000); seqs[0].q_stride = 99;
    assert_true(refused(&a, "q stride"));

    /* trees: parents, a row after every node */
    a = good_args();
    seqs[0].tree = 1;
    seqs[0].parent[0] = -1;
    seqs[0].parent[1] = -1;
    seqs[0].parent[2] = 0;
    assert_int_equal(specd_cuda_check_verify(&a, why, sizeof why), SPECD_CUDA_OK);
    seqs[0].rule = SPECD_CUDA_VERIFY_REJECTION;
    assert_int_equal(specd_cuda_check_verify(&a, why, sizeof why), SPECD_CUDA_OK);
    seqs[0].parent[2] = 2; assert_true(refused(&a, "node 2: parent 2"));
    seqs[0].parent[2] = -2; assert_true(refused(&a, "node 2: parent -2"));
    seqs[0].parent[2] = 0;
    seqs[0].row[3] = -1; assert_true(refused(&a, "a tree scores a row after every node"));
    seqs[0].row[3] = 3;
    seqs[0].k = 0; seqs[0].row[0] = 0; assert_true(refused(&a, "at least one node"));
    a = good_args(); seqs[0].tree = 2; assert_true(refused(&a, "tree 2"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_checks),
        cmocka_unit_test(test_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
