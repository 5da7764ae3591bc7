/* A host engine that owns its target model and lets specd speculate for it (host API v2,
 * specd/spec_batch.h).
 *
 * The engine runs the target (here specd's own CPU runtime stands in for vLLM, llama.cpp or your
 * engine's forward): each step it asks specd to lay out the next step of every active request,
 * runs ONE forward over all of them, and hands the scored rows back as one logits block. specd's
 * policies propose tokens and its acceptance engine decides which the target accepts. Each
 * request carries its own stream key, so its tokens do not depend on its slot or its neighbours.
 * The speculative outputs are checked against plain decoding of the same requests: coupled
 * sampling makes them identical.
 *
 *   cc host_engine.c $(pkg-config --cflags --libs specd) -o host_engine
 *   ./host_engine MODEL.gguf [policy [OPTIONS]]   (policy: ngram by default)
 *
 * With SPECD_DEVICE=cuda in the environment the engine's context runs on the GPU, the forward
 * leaves the logits on the device (specd_extend_out.device_logits) and the block handed to specd
 * says so (specd_logits.device = CUDA): specd then decides on the device where its acceptance
 * kernel can, without copying the block to host memory. Exits 77 when that device is not there.
 *
 * Self-speculative policies with an adapter (e.g. risd adapter=DIR) gate some rows onto a LoRA:
 * the layout names it (lora_path) and marks the rows (lora_gate); this engine loads the adapter
 * itself from that path, as a foreign engine would, and applies it to exactly those rows.
 */
#include <specd/specd.h>
#include <specd/runtime.h>
#include <specd/spec_batch.h>
#include <specd/tokenizer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_SEQ = 3, N_GEN = 40, MAX_DRAFT = 6 };

static const char *const prompts[N_SEQ] = {
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
    "The cat sat on the mat. The cat sat on the mat. The cat",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
};

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != SPECD_OK) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__,                                 \
                    specd_status_name(err.status), err.message);                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* The engine's adapters, loaded from the paths layouts name (one at a time in this engine). */
typedef struct adapters {
    char path[4096];
    specd_lora *lora;
} adapters;

static const specd_lora *adapter_for(adapters *a, const specd_model *model, const char *path) {
    specd_error err;
    if (!a->lora || strcmp(a->path, path)) {
        specd_lora_destroy(a->lora);
        a->lora = NULL;
        snprintf(a->path, sizeof a->path, "%s", path);
        CHECK(specd_lora_create(model, path, &a->lora, &err));
    }
    return a->lora;
}

/* Decodes every prompt under policy; outputs[s] receives N_GEN tokens. Returns the sequences'
 * steps (each sequence's share of the batched forwards); *forwards gets the forwards. */
static long run_engine(specd_model *model, specd_tokenizer *tok, const char *policy,
                       const char *options, int32_t outputs[N_SEQ][N_GEN], long *forwards) {
    specd_error err;
    int32_t n_vocab = specd_model_get_info(model)->n_vocab;

    /* specd: one spec handle for the engine, one sequence per request (the id is the slot). */
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = n_vocab;
    sp.max_draft = MAX_DRAFT;
    sp.max_seqs = N_SEQ;
    specd_spec *spec;
    CHECK(specd_spec_create(&sp, &spec, &err));
    /* a step of one sequence scores at most this many rows: size the logits block for them all */
    int32_t max_rows = N_SEQ * specd_spec_max_step_rows(spec);

    /* The engine's own state: one KV slot per sequence, one forward over all of them. */
    specd_context_params cp = specd_context_default_params();
    cp.n_seq = N_SEQ;
    cp.n_ctx = 512;
    cp.n_batch = max_rows;
    specd_context *ctx;
    if (specd_context_create(model, &cp, &ctx, &err) != SPECD_OK) {
        if (cp.device == SPECD_DEVICE_CUDA && err.status == SPECD_E_UNSUPPORTED) {
            printf("skipped: no CUDA context here: %s\n", err.message);
            exit(77);
        }
        CHECK(err.status);
    }
    const int on_device = specd_context_device(ctx) == SPECD_DEVICE_CUDA;
    float *logits = malloc(sizeof(float) * (size_t)max_rows * (size_t)n_vocab);
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)max_rows);
    adapters ad = {{0}, NULL};

    for (int s = 0; s < N_SEQ; s++) {
        int32_t ids[256];
        size_t n;
        CHECK(specd_tokenizer_encode(tok, prompts[s], strlen(prompts[s]), 0, ids, 256, &n, &err));
        specd_seq_params p = specd_seq_default_params();
        p.policy = policy;
        p.policy_options = options;
        p.sampling.temperature = 0.7f;
        p.seed = 2024;
        p.stream_key = 0xfeed0000u + (uint64_t)s; /* the request's id, not its slot */
        p.max_tokens = N_GEN;
        p.adaptive = 0;
        CHECK(specd_spec_seq_open(spec, s, ids, (int64_t)n, &p, &err));
        /* prefill: the KV cache holds the prompt minus its last token (specd/spec.h) */
        if (n > 1) {
            specd_seq_batch b = {.seq = s, .n_tokens = (int32_t)n - 1, .tokens = ids};
            CHECK(specd_context_extend(ctx, &b, 1, NULL, &err));
        }
    }

    *forwards = 0;
    for (;;) {
        int32_t active[N_SEQ], n_active = 0;
        for (int s = 0; s < N_SEQ; s++)
            if (!specd_spec_seq_done(spec, s)) active[n_active++] = s;
        if (n_active == 0) break;
        /* 1. specd lays out the next step of every active sequence */
        specd_batch batch;
        CHECK(specd_spec_batch_layout(spec, active, n_active, &batch, &err));
        /* 2. the engine runs one forward over all of them */
        specd_seq_batch sb[N_SEQ];
        int32_t kv_before[N_SEQ];
        const specd_lora *lora = NULL;
        for (int32_t i = 0; i < batch.n_seqs; i++) {
            const specd_batch_seq *b = &batch.seqs[i];
            const specd_step_layout *l = &b->layout;
            sb[i] = specd_step_seq_batch(l, b->seq); /* the layout's arrays, borrowed */
            if (l->lora_gate) { /* these rows run with the adapter the layout names */
                if (!l->lora_path) {
                    fprintf(stderr, "policy %s gates rows onto an adapter it does not name\n",
                            policy);
                    exit(1);
                }
                lora = adapter_for(&ad, model, l->lora_path);
            }
            for (int32_t j = 0; j < l->n_rows; j++)
                rows[b->row_offset + j] = b->token_offset + l->rows[j];
            kv_before[i] = specd_context_kv_len(ctx, b->seq);
        }
        CHECK(specd_context_set_lora(ctx, lora, &err));
        const float *device_logits = NULL; /* the context's, valid until its next call */
        specd_extend_out out = {.n_rows = batch.n_rows, .rows = rows,
                                .logits = on_device ? NULL : logits,
                                .device_logits = on_device ? &device_logits : NULL};
        CHECK(specd_context_extend(ctx, sb, batch.n_seqs, &out, &err));
        (*forwards)++;
        /* 3. specd verifies every sequence from the one logits block, where it lies */
        specd_logits lg = {.data = on_device ? (const void *)device_logits : logits,
                           .row_stride = n_vocab, .n_rows = batch.n_rows,
                           .dtype = SPECD_DTYPE_F32,
                           .device = on_device ? SPECD_DEVICE_CUDA : SPECD_DEVICE_HOST};
        specd_batch_result res;
        CHECK(specd_spec_batch_verify(spec, &lg, &res, &err));
        /* 4. the engine keeps the KV rows specd says were accepted */
        for (int32_t i = 0; i < res.n_seqs; i++) {
            const specd_step_outcome *o = &res.outcome[i];
            int32_t keep[2 * MAX_DRAFT + 1];
            for (int32_t j = 0; j < o->n_keep; j++) keep[j] = kv_before[i] + o->keep[j];
            CHECK(specd_context_kv_keep(ctx, res.seq[i], kv_before[i], o->n_keep, keep, &err));
        }
    }
    long steps = 0;
    for (int s = 0; s < N_SEQ; s++) {
        specd_seq_stats st;
        CHECK(specd_spec_seq_stats(spec, s, &st, &err));
        steps += (long)st.n_steps;
        int64_t n;
        const int32_t *toks = specd_spec_seq_output(spec, s, &n);
        memset(outputs[s], 0, sizeof outputs[s]);
        memcpy(outputs[s], toks, sizeof(int32_t) * (size_t)(n < N_GEN ? n : N_GEN));
    }
    specd_spec_destroy(spec);
    specd_context_set_lora(ctx, NULL, NULL);
    specd_lora_destroy(ad.lora);
    free(rows);
    free(logits);
    specd_context_destroy(ctx);
    return steps;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [policy [OPTIONS]]\n", argv[0]);
        return 2;
    }
    const char *policy = argc > 2 ? argv[2] : "ngram";
    const char *options = argc > 3 ? argv[3] : NULL;
    specd_error err;
    specd_model *model;
    specd_tokenizer *tok;
    CHECK(specd_model_create(argv[1], &model, &err));
    CHECK(specd_tokenizer_create_from_gguf(specd_model_gguf(model), &tok, &err));

    static int32_t plain[N_SEQ][N_GEN], spec[N_SEQ][N_GEN];
    long fw_plain, fw_spec;
    long f_plain = run_engine(model, tok, "none", NULL, plain, &fw_plain);
    long f_spec = run_engine(model, tok, policy, options, spec, &fw_spec);
    int same = !memcmp(plain, spec, sizeof plain);
    for (int s = 0; s < N_SEQ; s++) {
        char text[4096];
        size_t n;
        CHECK(specd_tokenizer_decode(tok, spec[s], N_GEN, 0, text, sizeof text - 1, &n, &err));
        text[n] = '\0';
        printf("[%d] %s%s\n", s, prompts[s], text);
    }
    printf("sequence steps: plain %ld, %s %ld; batched forwards: plain %ld, %s %ld; outputs "
           "identical: %s\n", f_plain, policy, f_spec, fw_plain, policy, fw_spec,
           same ? "yes" : "NO");
    specd_tokenizer_destroy(tok);
    specd_model_destroy(model);
    return same && f_spec < f_plain ? 0 : 1;
}
