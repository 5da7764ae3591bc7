/* A host engine that owns its target model and lets specd speculate for it.
 *
 * The engine runs the target (here specd's own CPU runtime stands in for vLLM, llama.cpp or your
 * engine's forward) and hands its logits to specd by pointer; specd's policy proposes tokens and
 * its acceptance engine decides which the target accepts. Several sequences are decoded
 * round-robin, each with its own KV cache slot. The speculative outputs are checked against plain
 * decoding of the same prompts with the same seed: coupled sampling makes them identical.
 *
 *   cc host_engine.c $(pkg-config --cflags --libs specd) -o host_engine
 *   ./host_engine MODEL.gguf [policy [VERIFIER]]   (policy: ngram by default)
 *
 * With VERIFIER (e.g. ipc:///run/user/0/specd/verifier.sock, a running specd-verifier) the same
 * calls have the daemon decide the drafting steps; the engine writes the target's logits straight
 * into the shared buffer it reads (specd_spec_verifier_logits).
 */
#include <specd/specd.h>
#include <specd/runtime.h>
#include <specd/spec.h>
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

/* Decodes every prompt under policy; outputs[s] receives N_GEN tokens. Returns target forwards. */
static long run_engine(specd_model *model, specd_tokenizer *tok, const char *policy,
                       const char *verifier, int32_t outputs[N_SEQ][N_GEN]) {
    specd_error err;
    int32_t n_vocab = specd_model_get_info(model)->n_vocab;

    /* The engine's own state: one KV slot per sequence, a logits buffer for one step. */
    specd_context_params cp = specd_context_default_params();
    cp.n_seq = N_SEQ;
    cp.n_ctx = 512;
    cp.n_batch = 64;
    specd_context *ctx;
    CHECK(specd_context_create(model, &cp, &ctx, &err));
    float *logits = malloc(sizeof(float) * (size_t)(MAX_DRAFT + 1) * (size_t)n_vocab);

    /* specd: one spec handle for the engine, one sequence per request. */
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = n_vocab;
    sp.max_draft = MAX_DRAFT;
    sp.verifier_endpoint = verifier; /* NULL: verify in-process */
    specd_spec *spec;
    CHECK(specd_spec_create(&sp, &spec, &err));
    float *step_logits = specd_spec_verifier_logits(spec) ? specd_spec_verifier_logits(spec) : logits;
    for (int s = 0; s < N_SEQ; s++) {
        int32_t ids[256];
        size_t n;
        CHECK(specd_tokenizer_encode(tok, prompts[s], strlen(prompts[s]), 0, ids, 256, &n, &err));
        specd_seq_params p = specd_seq_default_params();
        p.policy = policy;
        p.sampling.temperature = 0.7f;
        p.seed = 2024;
        p.max_tokens = N_GEN;
        p.adaptive = 0;
        CHECK(specd_spec_seq_open(spec, s, ids, (int64_t)n, &p, &err));
        /* prefill: the KV cache holds the prompt minus its last token (specd/spec.h) */
        if (n > 1) {
            specd_seq_batch b = {.seq = s, .n_tokens = (int32_t)n - 1, .tokens = ids};
            CHECK(specd_context_extend(ctx, &b, 1, NULL, &err));
        }
    }

    long forwards = 0;
    for (int active = N_SEQ; active > 0;) {
        active = 0;
        for (int s = 0; s < N_SEQ; s++) {
            if (specd_spec_seq_done(spec, s)) continue;
            active++;
            /* 1. specd lays out the step; 2. the engine runs its target; 3. specd verifies */
            specd_step_layout lay;
            CHECK(specd_spec_seq_layout(spec, s, &lay, &err));
            int32_t kv_before = specd_context_kv_len(ctx, s);
            specd_seq_batch b = {.seq = s, .n_tokens = lay.n_tokens, .tokens = lay.tokens,
                                 .pos = lay.pos, .visible = lay.visible};
            specd_extend_out out = {.n_rows = lay.n_rows, .rows = lay.rows, .logits = step_logits};
            CHECK(specd_context_extend(ctx, &b, 1, &out, &err));
            forwards++;
            specd_step_outcome o;
            CHECK(specd_spec_seq_verify(spec, s, step_logits, &o, &err));
            /* 4. the engine keeps the KV rows specd says were accepted */
            int32_t keep[MAX_DRAFT + 1];
            for (int i = 0; i < o.n_keep; i++) keep[i] = kv_before + o.keep[i];
            CHECK(specd_context_kv_keep(ctx, s, kv_before, o.n_keep, keep, &err));
        }
    }
    int64_t remote = 0;
    for (int s = 0; s < N_SEQ; s++) {
        specd_seq_stats st;
        CHECK(specd_spec_seq_stats(spec, s, &st, &err));
        remote += st.n_remote_verified;
        int64_t n;
        const int32_t *toks = specd_spec_seq_output(spec, s, &n);
        memset(outputs[s], 0, sizeof outputs[s]);
        memcpy(outputs[s], toks, sizeof(int32_t) * (size_t)(n < N_GEN ? n : N_GEN));
    }
    if (verifier) printf("steps verified by specd-verifier: %lld\n", (long long)remote);
    specd_spec_destroy(spec);
    free(logits);
    specd_context_destroy(ctx);
    return forwards;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [policy [VERIFIER_ENDPOINT]]\n", argv[0]);
        return 2;
    }
    const char *policy = argc > 2 ? argv[2] : "ngram";
    specd_error err;
    specd_model *model;
    specd_tokenizer *tok;
    CHECK(specd_model_create(argv[1], &model, &err));
    CHECK(specd_tokenizer_create_from_gguf(specd_model_gguf(model), &tok, &err));

    static int32_t plain[N_SEQ][N_GEN], spec[N_SEQ][N_GEN];
    long f_plain = run_engine(model, tok, "none", NULL, plain);
    long f_spec = run_engine(model, tok, policy, argc > 3 ? argv[3] : NULL, spec);
    int same = !memcmp(plain, spec, sizeof plain);
    for (int s = 0; s < N_SEQ; s++) {
        char text[4096];
        size_t n;
        CHECK(specd_tokenizer_decode(tok, spec[s], N_GEN, 0, text, sizeof text - 1, &n, &err));
        text[n] = '\0';
        printf("[%d] %s%s\n", s, prompts[s], text);
    }
    printf("target forwards: plain %ld, %s %ld; outputs identical: %s\n", f_plain, policy, f_spec,
           same ? "yes" : "NO");
    specd_tokenizer_destroy(tok);
    specd_model_destroy(model);
    return same && f_spec < f_plain ? 0 : 1;
}
