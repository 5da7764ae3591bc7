/* Manual check (compare_wedlm.py runs it; not built by CMake): the step specd's wedlm policy lays
 * out, run through specd's runtime, so its mask rows can be compared with train_wedlm.py's.
 *
 * Usage: wedlm_rows MODEL ADAPTER_DIR OUT.bin FILL n tok0 tok1 ... tok_{n+W}
 * The tokens are a sequence x; history x[0..n] (pending x[n-1]); FILL is W characters, 'f' or 'm',
 * for window slots n+1..n+W of the SECOND step. The policy itself makes that window: step 1
 * (history x[0..n-1], all masks) is "verified" with synthetic logits -- the pending row one-hot on
 * x[n], the rows of the slots marked 'f' one-hot on their data token, the others flat -- so it
 * emits x[n] and eq. 11 (lambda=0) fills exactly the 'f' slots (entropy ~0 < tau; flat rows have
 * ln V; with no 'f' slot the policy fills the leftmost one anyway, so every step progresses).
 * Step 2's layout (rows, positions, gates, mask-embedding inputs) is then run as the session runs
 * it: the cache holds x[0..n-1] (the kept pending row of step 1 is x[n-1]'s plain row), the
 * layout's rows are extended causally with its LoRA on the gated rows.
 *
 * OUT.bin: int32 n_rows, int32 n_vocab, then per row int32 token, int32 pos, float gate, then
 * n_rows x n_vocab float logits, then the same rows' logits with the masks blind to the observed
 * rows after them (below). */
#include "specd/policy.h"
#include "specd/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const specd_error *err) {
    fprintf(stderr, "wedlm_rows: %s: %s\n", what, err->message);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: wedlm_rows MODEL ADAPTER_DIR OUT.bin FILL n tok...\n");
        return 2;
    }
    const char *fill = argv[4];
    const int32_t w = (int32_t)strlen(fill), n = atoi(argv[5]);
    const int32_t n_tok = argc - 6;
    if (w < 1 || n < 2 || n_tok < n + 1 + w) {
        fprintf(stderr, "wedlm_rows: need n >= 2 and n + 1 + W tokens\n");
        return 2;
    }
    int32_t *x = calloc((size_t)n_tok, sizeof *x);
    for (int32_t i = 0; i < n_tok; i++) x[i] = atoi(argv[6 + i]);
    specd_error err = {0};
    specd_model *m;
    specd_context *ctx;
    if (specd_model_create(argv[1], &m, &err)) return fail("model", &err);
    const int32_t V = specd_model_get_info(m)->n_vocab;
    specd_context_params cp = specd_context_default_params();
    cp.n_threads = 1;
    if (specd_context_create(m, &cp, &ctx, &err)) return fail("context", &err);

    const specd_policy_ops *ops = specd_policy_find("wedlm");
    if (!ops) {
        fprintf(stderr, "wedlm_rows: no wedlm policy in this build\n");
        return 1;
    }
    specd_policy_env env = {.n_vocab = V,
                            .max_draft = w,
                            .target = m,
                            .target_path = argv[1],
                            .sampling = specd_sampling_default_params(),
                            .rule = SPECD_ACCEPT_GREEDY,
                            .max_step_rows = w + 1};
    env.sampling.temperature = 0.0f;
    char opts[4200];
    /* lambda=0: eq. 11 without the distance term, so every one-hot slot passes tau (with the
     * default 0.1 a slot 3 past the leftmost mask would not) */
    snprintf(opts, sizeof opts, "adapter=%s,shift=0,w=%d,lambda=0", argv[2], w);
    void *st;
    if (ops->create(&env, opts, &st, &err)) return fail("policy create", &err);

    /* step 1: history x[0..n-1], every slot n..n+W-1 a mask */
    specd_step_layout lay;
    memset(&lay, 0, sizeof lay);
    if (ops->layout(st, x, n, &lay, &err)) return fail("layout 1", &err);
    float *logits = calloc((size_t)(w + 1) * (size_t)V, sizeof *logits);
    for (int32_t r = 0; r < lay.n_tokens; r++) {
        const int32_t p = lay.pos[r];
        int32_t want = -1;
        if (r == 0) want = x[n]; /* the pending row: emits x[n] */
        else if (p >= n + 1 && p <= n + w && fill[p - (n + 1)] == 'f') want = x[p];
        if (want >= 0) logits[(size_t)r * (size_t)V + (size_t)want] = 50.0f;
    }
    specd_step_outcome out;
    if (ops->verify(st, logits, &out, &err)) return fail("verify 1", &err);
    if (out.n_emitted != 1 || out.emitted[0] != x[n]) {
        fprintf(stderr, "wedlm_rows: step 1 emitted %d tokens\n", out.n_emitted);
        return 1;
    }
    if (ops->advance) ops->advance(st, x, n + 1);

    /* step 2: cache x[0..n-1], the policy's rows for history x[0..n] */
    memset(&lay, 0, sizeof lay);
    if (ops->layout(st, x, n + 1, &lay, &err)) return fail("layout 2", &err);
    specd_seq_batch pre = {.seq = 0, .n_tokens = n};
    pre.tokens = x;
    if (specd_context_extend(ctx, &pre, 1, NULL, &err)) return fail("prefill", &err);
    if (lay.lora && specd_context_set_lora(ctx, lay.lora, &err)) return fail("set lora", &err);
    specd_seq_batch b = {.seq = 0,
                         .n_tokens = lay.n_tokens,
                         .tokens = lay.tokens,
                         .pos = lay.pos,
                         .visible = lay.visible,
                         .lora_gate = lay.lora_gate,
                         .embd = lay.input_embd,
                         .embd_rows = lay.input_embd_rows};
    float *step = calloc((size_t)lay.n_tokens * (size_t)V, sizeof *step);
    specd_extend_out eo = {.n_rows = lay.n_tokens, .logits = step};
    if (specd_context_extend(ctx, &b, 1, &eo, &err)) return fail("step 2", &err);

    /* the same rows once more with the masks blind to the observed rows after them (logical-order
     * causal, the layout WeDLM's reordering exists to avoid): the difference between the two runs
     * is the effect of principle (i) in specd, compared with the trainer's effect (the numeric
     * noise of the quantized weights mostly cancels in it) */
    if (specd_context_kv_truncate(ctx, 0, n, &err)) return fail("truncate", &err);
    const int32_t nt = lay.n_tokens, cols = n + nt;
    uint8_t *vis = calloc((size_t)nt * (size_t)cols, 1);
    for (int32_t i = 0; i < nt; i++)
        for (int32_t j = 0; j < cols; j++) {
            const int32_t k = j - n; /* new row k, or a cached row when < 0 */
            int see = k < 0 || k <= i;
            if (k >= 0 && k < i && lay.lora_gate && lay.lora_gate[i] != 0.0f &&
                lay.lora_gate[k] == 0.0f && lay.pos[k] > lay.pos[i])
                see = 0;
            vis[(size_t)i * (size_t)cols + (size_t)j] = (uint8_t)see;
        }
    float *blind = calloc((size_t)nt * (size_t)V, sizeof *blind);
    b.visible = vis;
    specd_extend_out eb = {.n_rows = nt, .logits = blind};
    if (specd_context_extend(ctx, &b, 1, &eb, &err)) return fail("step 2 blind", &err);

    FILE *f = fopen(argv[3], "wb");
    if (!f) {
        fprintf(stderr, "wedlm_rows: cannot write %s\n", argv[3]);
        return 1;
    }
    fwrite(&lay.n_tokens, 4, 1, f);
    fwrite(&V, 4, 1, f);
    for (int32_t r = 0; r < lay.n_tokens; r++) {
        const float g = lay.lora_gate ? lay.lora_gate[r] : 0.0f;
        fwrite(&lay.tokens[r], 4, 1, f);
        fwrite(&lay.pos[r], 4, 1, f);
        fwrite(&g, 4, 1, f);
    }
    fwrite(step, sizeof(float), (size_t)lay.n_tokens * (size_t)V, f);
    fwrite(blind, sizeof(float), (size_t)lay.n_tokens * (size_t)V, f);
    fclose(f);
    free(vis);
    free(blind);
    printf("step 2: %d rows:", lay.n_tokens);
    for (int32_t r = 0; r < lay.n_tokens; r++)
        printf(" %s@%d", lay.lora_gate && lay.lora_gate[r] != 0.0f ? "M" : "t", lay.pos[r]);
    printf("\n");
    ops->destroy(st);
    specd_context_destroy(ctx);
    specd_model_destroy(m);
    free(step);
    free(logits);
    free(x);
    return 0;
}
