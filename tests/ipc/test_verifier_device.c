/* specd-verifier --device cuda's plan of a Verify (verifier/daemon/verifier_device.h): what the
 * device kernel cannot decide is refused with a readable SPECD_E_UNSUPPORTED before any CUDA
 * call (so the host verifies the step itself), and what it can is described exactly as the CPU
 * engine keys it (rows in order, positions from the history's length, the sequence id as the
 * counter's sequence word). Without a device, opening the device path says why. */
#include "test_main.h"

#include <string.h>

#include "verifier/daemon/verifier_device.h"

enum { V = 1000 };

static specd_seq seq(specd_accept_rule rule) {
    specd_seq q;
    memset(&q, 0, sizeof q);
    q.rule = rule;
    q.temperature = 0.8f;
    q.top_p = 1.0f;
    q.top_k = 40;
    q.min_p = 0.05f;
    q.seed = 0x1234567890ull;
    q.n = 17;
    return q;
}

static specd_ipc_view view(size_t k, specd_ipc_dtype dtype) {
    specd_ipc_view v;
    memset(&v, 0, sizeof v);
    v.on_device = 1;
    v.dtype = dtype;
    v.rank = 2;
    v.shape[0] = k + 1;
    v.shape[1] = V;
    return v;
}

static void refused(const specd_seq *q, const specd_ipc_view *v, const uint32_t *draft, size_t k,
                    int tree, const specd_ipc_view *qv, const char *what) {
    specd_cuda_verify_seq s;
    specd_error err;
    assert_int_equal(specd_verifier_device_plan(q, 3, v, V, draft, k, tree, qv, &s, &err),
                     SPECD_E_UNSUPPORTED);
    if (!strstr(err.message, what)) fail_msg("'%s' does not name %s", err.message, what);
    assert_non_null(strstr(err.message, "in-process"));
}

static void test_refusals(void **state) {
    (void)state;
    uint32_t draft[40] = {1, 2, 3, 4};
    specd_seq q = seq(SPECD_ACCEPT_COUPLED);
    specd_ipc_view v = view(4, SPECD_IPC_BF16);
    refused(&q, &v, draft, 4, 1, NULL, "trees");
    specd_seq topp = seq(SPECD_ACCEPT_COUPLED);
    topp.top_p = 0.0f;
    refused(&topp, &v, draft, 4, 0,NULL, "top-p");
    specd_ipc_view many = view(33, SPECD_IPC_F32);
    refused(&q, &many, draft, 33, 0,NULL, "drafts");
    specd_ipc_view ints = view(4, SPECD_IPC_I32);
    refused(&q, &ints, draft, 4, 0,NULL, "dtype");
    specd_ipc_view wrong = view(3, SPECD_IPC_F32); /* rows are not k + 1 */
    refused(&q, &wrong, draft, 4, 0,NULL, "shape");
    specd_seq far = seq(SPECD_ACCEPT_GREEDY);
    far.n = UINT32_MAX - 3;
    refused(&far, &v, draft, 4, 0,NULL, "2^32");
    /* a draft token past the vocabulary is a malformed request, not a missing feature */
    uint32_t bad[4] = {1, 2, V, 4};
    specd_cuda_verify_seq s;
    specd_error err;
    assert_int_equal(specd_verifier_device_plan(&q, 3, &v, V, bad, 4, 0, NULL, &s, &err),
                     SPECD_E_FORMAT);
}

/* The drafter's q rows, as the host's pool gives them: [k, vocab] f32 on the device. */
static specd_ipc_view q_view(size_t k, float *rows) {
    specd_ipc_view v = view(k, SPECD_IPC_F32);
    v.shape[0] = k;
    v.data = rows;
    return v;
}

/* A q reference the device cannot read as the draft's rows is refused before any CUDA call
 * (these run without a device; the plan never touches the rows): a shape that is not
 * [k, vocab] is a malformed request (SPECD_E_PROTOCOL), a dtype or a host view the kernel does
 * not take is SPECD_E_UNSUPPORTED, and the host decides the step itself. */
static void test_q_refusals(void **state) {
    (void)state;
    uint32_t draft[4] = {1, 2, 3, 4};
    specd_seq r = seq(SPECD_ACCEPT_REJECTION);
    specd_ipc_view v = view(4, SPECD_IPC_F32);
    static float rows[4 * V];
    specd_cuda_verify_seq s;
    specd_error err;
    specd_ipc_view short_q = q_view(3, rows); /* k - 1 rows */
    specd_ipc_view long_q = q_view(5, rows);  /* k + 1 rows, as logits */
    specd_ipc_view narrow = q_view(4, rows);
    narrow.shape[1] = V - 1;
    specd_ipc_view flat = q_view(4, rows);
    flat.rank = 1;
    flat.shape[0] = 4 * V;
    const specd_ipc_view *bad_shapes[] = {&short_q, &long_q, &narrow, &flat};
    for (size_t i = 0; i < sizeof bad_shapes / sizeof *bad_shapes; i++) {
        assert_int_equal(specd_verifier_device_plan(&r, 3, &v, V, draft, 4, 0, bad_shapes[i], &s,
                                                    &err),
                         SPECD_E_PROTOCOL);
        assert_non_null(strstr(err.message, "q has shape"));
    }
    printf("q of the wrong shape: %s\n", err.message);
    specd_ipc_view halves = q_view(4, rows);
    halves.dtype = SPECD_IPC_F16;
    refused(&r, &v, draft, 4, 0, &halves, "dtype");
    specd_ipc_view host = q_view(4, rows);
    host.on_device = 0;
    refused(&r, &v, draft, 4, 0, &host, "host memory");
    /* the same refusals under every rule: the reference is checked before the rule */
    specd_seq c = seq(SPECD_ACCEPT_COUPLED);
    assert_int_equal(specd_verifier_device_plan(&c, 3, &v, V, draft, 4, 0, &long_q, &s, &err),
                     SPECD_E_PROTOCOL);
    refused(&c, &v, draft, 4, 0, &host, "host memory");
}

/* REJECTION with the drafter's q: the kernel reads the rows where the view lies, one row of
 * vocab floats per draft; GREEDY and COUPLED ignore q, as the CPU engine does. */
static void test_plan_takes_q(void **state) {
    (void)state;
    uint32_t draft[4] = {1, 2, 3, 4};
    static float rows[4 * V];
    specd_ipc_view v = view(4, SPECD_IPC_BF16);
    specd_ipc_view qv = q_view(4, rows);
    specd_cuda_verify_seq s;
    specd_error err;
    specd_seq r = seq(SPECD_ACCEPT_REJECTION);
    assert_int_equal(specd_verifier_device_plan(&r, 3, &v, V, draft, 4, 0, &qv, &s, &err),
                     SPECD_OK);
    assert_int_equal(s.rule, SPECD_CUDA_VERIFY_REJECTION);
    assert_ptr_equal(s.draft_probs, rows);
    assert_true(s.q_stride == V && s.relaxed_tau == 0.0f && s.tree == 0 && s.k == 4);
    specd_seq c = seq(SPECD_ACCEPT_COUPLED);
    assert_int_equal(specd_verifier_device_plan(&c, 3, &v, V, draft, 4, 0, &qv, &s, &err),
                     SPECD_OK);
    assert_null(s.draft_probs);
}

static void test_plan_keys_like_the_engine(void **state) {
    (void)state;
    uint32_t draft[3] = {7, 8, 9};
    specd_seq q = seq(SPECD_ACCEPT_GREEDY);
    specd_ipc_view v = view(3, SPECD_IPC_F16);
    specd_cuda_verify_seq s;
    specd_error err;
    assert_int_equal(
        specd_verifier_device_plan(&q, 0x100000005ull, &v, V, draft, 3, 0, NULL, &s, &err), SPECD_OK);
    assert_int_equal(s.rule, SPECD_CUDA_VERIFY_GREEDY);
    assert_int_equal(s.k, 3);
    assert_int_equal(s.sequence, 5); /* the low 32 bits, as the CPU engine's key */
    assert_true(s.seed == q.seed);
    assert_true(s.top_p == 1.0f && s.top_k == 40 && s.min_p == q.min_p);
    for (int i = 0; i < 3; i++)
        assert_int_equal(s.draft[i], (int)draft[i]);
    for (int i = 0; i <= 3; i++) {
        assert_int_equal(s.row[i], i);
        assert_int_equal(s.pos[i], 17 + i);
    }
    /* REJECTION without q (a deterministic drafter) and top-p go to the device as they are */
    specd_seq r = seq(SPECD_ACCEPT_REJECTION);
    r.top_p = 0.9f;
    assert_int_equal(specd_verifier_device_plan(&r, 1, &v, V, draft, 3, 0, NULL, &s, &err), SPECD_OK);
    assert_int_equal(s.rule, SPECD_CUDA_VERIFY_REJECTION);
    assert_true(s.top_p == 0.9f && s.draft_probs == NULL && s.tree == 0);
    specd_seq c = seq(SPECD_ACCEPT_COUPLED);
    assert_int_equal(specd_verifier_device_plan(&c, 1, &v, V, draft, 3, 0, NULL, &s, &err), SPECD_OK);
    assert_int_equal(s.rule, SPECD_CUDA_VERIFY_COUPLED);
    assert_true(s.temperature == 0.8f);
}

static void test_open_says_why(void **state) {
    (void)state;
    specd_verifier_device *d = NULL;
    specd_error err;
    /* no machine has this many devices */
    assert_int_equal(specd_verifier_device_open(4096, &d, &err), SPECD_E_UNSUPPORTED);
    assert_null(d);
    assert_non_null(strstr(err.message, "--device cuda:4096"));
    printf("open on a missing device: %s\n", err.message);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_plan_keys_like_the_engine),
        cmocka_unit_test(test_q_refusals),
        cmocka_unit_test(test_plan_takes_q),
        cmocka_unit_test(test_open_says_why),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
