/* A step layout as the batch entry of specd's runtime (specd/spec_runtime.h). */
#include "specd/spec_runtime.h"

specd_seq_batch specd_step_seq_batch(const specd_step_layout *layout, int32_t kv_seq) {
    return (specd_seq_batch){.seq = kv_seq,
                             .n_tokens = layout->n_tokens,
                             .tokens = layout->tokens,
                             .pos = layout->pos,
                             .visible = layout->visible,
                             .lora_gate = layout->lora_gate,
                             .embd = layout->input_embd,
                             .embd_rows = layout->input_embd_rows};
}
