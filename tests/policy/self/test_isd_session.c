/* ISD's step layout and outcome through the spec session, with synthetic logits (no model):
 * propose step [pending | masks], stride step [pending | proposals | masks] with the mask rows at
 * the positions after the last clean row, chain verification, KV keep lists, bonus on all-accept
 * and a pure propose step after a rejection (paper 000 Algorithm 1, Appendix F). */
#include "test_main.h"

#include "specd/isd.h"
#include "specd/spec.h"

#include <string.h>

enum { V = 16, M = 0 };

static specd_spec *spec;

static void open_seq_guarded(const char *opts, int adaptive) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    sp.max_draft = 4;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_seq_params p = specd_seq_default_params();
    p.policy = "isd";
    p.policy_options = opts;
    p.rule = SPECD_ACCEPT_GREEDY;
    p.max_tokens = 64;
    p.adaptive = adaptive;
    static const int32_t prompt[3] = {1, 2, 3};
    if (specd_spec_seq_open(spec, 0, prompt, 3, &p, &err) != SPECD_OK) fail_msg("%s", err.message);
}

/* the policy's own layouts (the guard, tested in test_adaptive, would make some steps plain) */
static void open_seq(const char *opts) { open_seq_guarded(opts, 0); }

/* Lays out a step, checks it, answers with rows whose argmax is want[row]. */
static specd_step_outcome step(int32_t n, const int32_t *tokens, int32_t first_pos,
                               const int32_t *want) {
    specd_step_layout lay;
    specd_error err;
    assert_int_equal(specd_spec_seq_layout(spec, 0, &lay, &err), SPECD_OK);
    assert_int_equal(lay.n_tokens, n);
    assert_int_equal(lay.n_rows, n);
    assert_null(lay.visible); /* strict causal */
    assert_null(lay.lora);
    for (int32_t i = 0; i < n; i++) {
        assert_int_equal(lay.tokens[i], tokens[i]);
        assert_int_equal(lay.pos[i], first_pos + i);
        assert_int_equal(lay.rows[i], i);
    }
    float logits[8 * V];
    for (int32_t r = 0; r < n; r++)
        for (int32_t x = 0; x < V; x++) logits[r * V + x] = x == want[r] ? 5.0f : 0.0f;
    specd_step_outcome o;
    assert_int_equal(specd_spec_seq_verify(spec, 0, logits, &o, &err), SPECD_OK);
    return o;
}

static void test_steps(void **s) {
    (void)s;
    open_seq("n=3");
    /* propose step at n = 3: pending 3 at position 2, masks at 3 and 4 */
    specd_step_outcome o = step(3, (const int32_t[]){3, M, M}, 2, (const int32_t[]){5, 6, 7});
    assert_int_equal(o.n_emitted, 1);
    assert_int_equal(o.emitted[0], 5);
    assert_int_equal(o.n_keep, 1);
    assert_int_equal(o.n_drafted, 0);
    /* stride step: both proposals accepted, bonus 9 from the last clean row */
    o = step(5, (const int32_t[]){5, 6, 7, M, M}, 3, (const int32_t[]){6, 7, 9, 10, 11});
    assert_int_equal(o.n_drafted, 2);
    assert_int_equal(o.n_accepted, 2);
    assert_int_equal(o.n_emitted, 3);
    assert_memory_equal(o.emitted, ((const int32_t[]){6, 7, 9}), 3 * sizeof(int32_t));
    assert_int_equal(o.n_keep, 3);
    assert_memory_equal(o.keep, ((const int32_t[]){0, 1, 2}), 3 * sizeof(int32_t));
    /* next stride step builds on the bonus: proposal 11 rejected, 12 emitted instead */
    o = step(5, (const int32_t[]){9, 10, 11, M, M}, 6, (const int32_t[]){10, 12, 4, 4, 4});
    assert_int_equal(o.n_accepted, 1);
    assert_int_equal(o.n_emitted, 2);
    assert_memory_equal(o.emitted, ((const int32_t[]){10, 12}), 2 * sizeof(int32_t));
    assert_int_equal(o.n_keep, 2);
    /* after a rejection the mask rows' proposals are stale: a pure propose step */
    o = step(3, (const int32_t[]){12, M, M}, 8, (const int32_t[]){13, 14, 15});
    assert_int_equal(o.n_emitted, 1);
    o = step(5, (const int32_t[]){13, 14, 15, M, M}, 9, (const int32_t[]){1, 1, 1, 1, 1});
    assert_int_equal(o.n_accepted, 0);
    int64_t n;
    const int32_t *out = specd_spec_seq_output(spec, 0, &n);
    assert_int_equal(n, 8);
    assert_memory_equal(out, ((const int32_t[]){5, 6, 7, 9, 10, 12, 13, 1}), 8 * sizeof(int32_t));
    specd_spec_destroy(spec);
}

static void test_mask_option(void **s) {
    (void)s;
    open_seq("n=2,mask=15");
    specd_step_outcome o = step(2, (const int32_t[]){3, 15}, 2, (const int32_t[]){4, 5});
    assert_int_equal(o.n_emitted, 1);
    o = step(3, (const int32_t[]){4, 5, 15}, 3, (const int32_t[]){5, 6, 7});
    assert_int_equal(o.n_emitted, 2);
    specd_spec_destroy(spec);
}

/* The adaptive guard governs self-speculative policies too: with nothing learned its first step
 * is a plain one-row step the session lays out itself (base weights, no masks), then the policy's
 * own steps follow as a probe, starting with a propose step. Timing-independent: the guard judges
 * only after the probe. */
static void test_guard_plain_step(void **s) {
    (void)s;
    open_seq_guarded("n=3", 1);
    specd_step_outcome o = step(1, (const int32_t[]){3}, 2, (const int32_t[]){5});
    assert_int_equal(o.n_emitted, 1);
    assert_int_equal(o.emitted[0], 5);
    assert_int_equal(o.n_drafted, 0);
    assert_int_equal(o.n_keep, 1);
    o = step(3, (const int32_t[]){5, M, M}, 3, (const int32_t[]){6, 7, 8});
    assert_int_equal(o.n_emitted, 1);
    assert_int_equal(o.emitted[0], 6);
    o = step(5, (const int32_t[]){6, 7, 8, M, M}, 4, (const int32_t[]){7, 8, 9, 1, 1});
    assert_int_equal(o.n_accepted, 2);
    int64_t n;
    const int32_t *out = specd_spec_seq_output(spec, 0, &n);
    assert_int_equal(n, 5);
    assert_memory_equal(out, ((const int32_t[]){5, 6, 7, 8, 9}), 5 * sizeof(int32_t));
    specd_spec_destroy(spec);
}

static void test_rows_must_fit(void **s) {
    (void)s;
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    sp.max_draft = 4; /* steps may have 2 * 4 + 1 = 9 rows: n=5 needs 9 and fits; n=6 needs 11 */
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_seq_params p = specd_seq_default_params();
    p.policy = "risd";
    p.policy_options = "n=6";
    static const int32_t prompt[1] = {1};
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, 1, &p, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "n=6"));
    p.policy_options = "mask=16";
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, 1, &p, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "mask"));
    /* no target model in specd: the host applies the adapter, named in every layout */
    p.policy_options = "adapter=/tmp";
    p.adaptive = 0;
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, 1, &p, &err), SPECD_OK);
    specd_step_layout lay;
    assert_int_equal(specd_spec_seq_layout(spec, 0, &lay, &err), SPECD_OK);
    assert_string_equal(lay.lora_path, "/tmp");
    assert_non_null(lay.lora_gate);
    assert_null(lay.lora);
    specd_spec_seq_close(spec, 0);
    p.adaptive = 1;
    p.policy_options = "n=3,propose=sample";
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, 1, &p, &err), SPECD_OK);
    specd_spec_destroy(spec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steps),
        cmocka_unit_test(test_mask_option),
        cmocka_unit_test(test_guard_plain_step),
        cmocka_unit_test(test_rows_must_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
