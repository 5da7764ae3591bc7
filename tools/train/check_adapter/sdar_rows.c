/* Manual check (compare_sdar.py runs it; not built by CMake): a denoise step specd's sdar policy
 * lays out, run through specd's runtime, so its block rows can be compared with train_sdar.py's.
 *
 * Usage: sdar_rows [--n-layers N] MODEL ADAPTER_DIR OUT.bin FILL n tok0 tok1 ... tok_{n+B-1}
 * --n-layers N runs the context cut after N blocks (specd_context_params.n_layers: blocks
 * 0..N-1, then the output norm and head), as the simsd policy runs its drafter; the adapter may
 * then hold LoRA tensors of layers 0..N-1 only.
 * The tokens are a sequence x; history x[0..n-1] (pending x[n-1] at n-1), block slots n..n+B-1.
 * FILL is B characters, 'f' or 'm', the block of the SECOND step; FILL[0] must be 'f' (the policy
 * fills slot 0 from the pending row) and some later slot must be 'f' (else the commit rule's
 * at-least-one would fill a flat row too). The policy makes that block itself: step 1 (all masks)
 * is "verified" with synthetic logits -- the pending row one-hot on x[n], the block rows of the
 * 'f' slots one-hot on their data token, the others flat -- so the threshold rule fills exactly
 * the 'f' slots. Step 2's layout (rows, positions, gates, visibility, mask-vector inputs) is then
 * run as the session runs it over a cache of x[0..n-2], and once more with the block causal in
 * its physical order (the layout SDAR's bidirectional block replaces): the difference between
 * the two runs is the effect of bidirectional attention in specd.
 *
 * OUT.bin: int32 n_rows, int32 n_vocab, then per row int32 token, int32 pos, float gate, then
 * n_rows x n_vocab float logits, then the causal run's logits. */
#include "specd/policy.h"
#include "specd/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const specd_error *err) {
    fprintf(stderr, "sdar_rows: %s: %s\n", what, err->message);
    return 1;
}

int main(int argc, char **argv) {
    int32_t n_layers = 0; /* 0: every block */
    if (argc > 2 && !strcmp(argv[1], "--n-layers")) {
        n_layers = atoi(argv[2]);
        argv += 2;
        argc -= 2;
    }
    if (argc < 7 || n_layers < 0) {
        fprintf(stderr, "usage: sdar_rows [--n-layers N] MODEL ADAPTER_DIR OUT.bin FILL n tok...\n");
        return 2;
    }
    const char *fill = argv[4];
    const int32_t b = (int32_t)strlen(fill), n = atoi(argv[5]);
    const int32_t n_tok = argc - 6;
    if (b < 2 || n < 2 || n_tok < n + b || fill[0] != 'f') {
        fprintf(stderr, "sdar_rows: need B >= 2, FILL[0] = 'f', n >= 2 and n + B tokens\n");
        return 2;
    }
    int32_t *x = calloc((size_t)n_tok, sizeof *x);
    for (int32_t i = 0; i < n_tok; i++)
        x[i] = atoi(argv[6 + i]);
    specd_error err = {0};
    specd_model *m;
    specd_context *ctx;
    if (specd_model_create(argv[1], &m, &err)) return fail("model", &err);
    const int32_t V = specd_model_get_info(m)->n_vocab;
    specd_context_params cp = specd_context_default_params();
    cp.n_threads = 1;
    cp.n_layers = n_layers;
    if (specd_context_create(m, &cp, &ctx, &err)) return fail("context", &err);
    const specd_policy_ops *ops = specd_policy_find("sdar");
    if (!ops) {
        fprintf(stderr, "sdar_rows: no sdar policy in this build\n");
        return 1;
    }
    specd_policy_env env = {.n_vocab = V,
                            .max_draft = b,
                            .target = m,
                            .target_path = argv[1],
                            .sampling = specd_sampling_default_params(),
                            .rule = SPECD_ACCEPT_GREEDY,
                            .max_step_rows = 2 * b + 1};
    env.sampling.temperature = 0.0f;
    char opts[4200];
    snprintf(opts, sizeof opts, "adapter=%s,block=%d,select=threshold", argv[2], b);
    void *st;
    if (ops->create(&env, opts, &st, &err)) return fail("policy create", &err);

    specd_step_layout lay;
    memset(&lay, 0, sizeof lay);
    if (ops->layout(st, x, n, &lay, &err)) return fail("layout 1", &err);
    float *logits = calloc((size_t)lay.n_tokens * (size_t)V, sizeof *logits);
    logits[x[n]] = 50.0f; /* the pending row: slot 0 */
    for (int32_t i = 1; i < b; i++)
        if (fill[i] == 'f') logits[(size_t)(1 + i) * (size_t)V + (size_t)x[n + i]] = 50.0f;
    specd_step_outcome out;
    if (ops->verify(st, logits, &out, &err)) return fail("verify 1", &err);

    memset(&lay, 0, sizeof lay);
    if (ops->layout(st, x, n, &lay, &err)) return fail("layout 2", &err);
    if (lay.n_tokens != 1 + b) {
        fprintf(stderr, "sdar_rows: step 2 is not a denoise step (%d rows)\n", lay.n_tokens);
        return 1;
    }
    specd_seq_batch pre = {.seq = 0, .n_tokens = n - 1, .tokens = x};
    if (specd_context_extend(ctx, &pre, 1, NULL, &err)) return fail("prefill", &err);
    if (lay.lora && specd_context_set_lora(ctx, lay.lora, &err)) return fail("set lora", &err);
    specd_seq_batch sb = {.seq = 0,
                          .n_tokens = lay.n_tokens,
                          .tokens = lay.tokens,
                          .pos = lay.pos,
                          .visible = lay.visible,
                          .lora_gate = lay.lora_gate,
                          .embd = lay.input_embd,
                          .embd_rows = lay.input_embd_rows};
    const int32_t nt = lay.n_tokens;
    float *step = calloc((size_t)nt * (size_t)V, sizeof *step);
    float *causal = calloc((size_t)nt * (size_t)V, sizeof *causal);
    specd_extend_out eo = {.n_rows = nt, .logits = step};
    if (specd_context_extend(ctx, &sb, 1, &eo, &err)) return fail("step 2", &err);
    if (specd_context_kv_truncate(ctx, 0, n - 1, &err)) return fail("truncate", &err);
    sb.visible = NULL; /* causal in physical order = logical order here */
    specd_extend_out ec = {.n_rows = nt, .logits = causal};
    if (specd_context_extend(ctx, &sb, 1, &ec, &err)) return fail("step 2 causal", &err);

    FILE *f = fopen(argv[3], "wb");
    if (!f) {
        fprintf(stderr, "sdar_rows: cannot write %s\n", argv[3]);
        return 1;
    }
    fwrite(&nt, 4, 1, f);
    fwrite(&V, 4, 1, f);
    for (int32_t r = 0; r < nt; r++) {
        const float g = lay.lora_gate ? lay.lora_gate[r] : 0.0f;
        fwrite(&lay.tokens[r], 4, 1, f);
        fwrite(&lay.pos[r], 4, 1, f);
        fwrite(&g, 4, 1, f);
    }
    fwrite(step, sizeof(float), (size_t)nt * (size_t)V, f);
    fwrite(causal, sizeof(float), (size_t)nt * (size_t)V, f);
    fclose(f);
    ops->destroy(st);
    specd_context_destroy(ctx);
    specd_model_destroy(m);
    free(step);
    free(causal);
    free(logits);
    free(x);
    return 0;
}
