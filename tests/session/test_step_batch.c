/* specd_step_seq_batch: a step layout becomes the runtime's batch entry of the named KV
 * sequence, every input array borrowed from the layout (not copied), nothing added. */
#include "test_main.h"

#include "specd/spec_runtime.h"

#include <string.h>

static void test_every_input_is_the_layouts(void **s) {
    (void)s;
    static const int32_t tokens[3] = {5, 6, 7}, pos[3] = {9, 11, 10}, rows[2] = {0, 2};
    static const uint8_t visible[3 * 5] = {1}, embd_rows[3] = {0, 1, 0};
    static const float gate[3] = {0.0f, 1.0f, 0.5f}, embd[3 * 4] = {0.25f};
    specd_step_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.n_tokens = 3;
    lay.tokens = tokens;
    lay.pos = pos;
    lay.visible = visible;
    lay.lora_gate = gate;
    lay.n_rows = 2;
    lay.rows = rows;
    lay.input_embd = embd;
    lay.input_embd_rows = embd_rows;
    specd_seq_batch b = specd_step_seq_batch(&lay, 4);
    assert_int_equal(b.seq, 4);
    assert_int_equal(b.n_tokens, 3);
    assert_ptr_equal(b.tokens, tokens);
    assert_ptr_equal(b.pos, pos);
    assert_ptr_equal(b.visible, visible);
    assert_ptr_equal(b.lora_gate, gate);
    assert_ptr_equal(b.embd, embd);
    assert_ptr_equal(b.embd_rows, embd_rows);
    assert_null(b.commit); /* every row enters the cache; the caller keeps the verified ones */
}

/* A plain causal step (no positions, mask, gates or vectors) stays one: nothing is invented. */
static void test_absent_inputs_stay_absent(void **s) {
    (void)s;
    static const int32_t tokens[1] = {42};
    specd_step_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.n_tokens = 1;
    lay.tokens = tokens;
    specd_seq_batch b = specd_step_seq_batch(&lay, 0);
    assert_int_equal(b.seq, 0);
    assert_int_equal(b.n_tokens, 1);
    assert_ptr_equal(b.tokens, tokens);
    assert_null(b.pos);
    assert_null(b.visible);
    assert_null(b.lora_gate);
    assert_null(b.commit);
    assert_null(b.embd);
    assert_null(b.embd_rows);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_input_is_the_layouts),
        cmocka_unit_test(test_absent_inputs_stay_absent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
