/* Manual check (see compare.py; not built by CMake): mask-row logits from specd's runtime with a LoRA adapter
 * gated to the mask rows. Usage: lora_rows MODEL ADAPTER_DIR|- OUT.bin tok0 tok1 ... n_mask mask_id */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "specd/runtime.h"
int main(int argc, char **argv) {
    specd_error err = {0};
    specd_model *m; specd_lora *lo = NULL; specd_context *ctx;
    if (specd_model_create(argv[1], &m, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    if (strcmp(argv[2], "-") && specd_lora_create(m, argv[2], &lo, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    specd_context_params cp = specd_context_default_params(); cp.n_threads = 1;
    if (specd_context_create(m, &cp, &ctx, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    if (lo) specd_context_set_lora(ctx, lo, &err);
    int n_clean = argc - 4 - 2, n_mask = atoi(argv[argc - 2]), mask = atoi(argv[argc - 1]);
    int n = n_clean + n_mask;
    int32_t *tok = calloc(n, 4); float *gate = calloc(n, 4);
    for (int i = 0; i < n_clean; i++) tok[i] = atoi(argv[4 + i]);
    for (int i = n_clean; i < n; i++) { tok[i] = mask; gate[i] = 1.0f; }
    int32_t V = specd_model_get_info(m)->n_vocab;
    float *logits = calloc((size_t)n * V, 4);
    specd_seq_batch b = {.seq = 0, .n_tokens = n, .tokens = tok, .lora_gate = gate};
    specd_extend_out o = {.n_rows = n, .logits = logits};
    if (specd_context_extend(ctx, &b, 1, &o, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    FILE *f = fopen(argv[3], "wb"); fwrite(logits, 4, (size_t)n * V, f); fclose(f);
    printf("%d rows x %d written\n", n, V);
    return 0;
}
