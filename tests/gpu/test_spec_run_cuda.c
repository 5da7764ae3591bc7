/* specd's own runtime on CUDA as the spec session's host: specd_spec_run (the CLI's generate and
 * ab) and the batch loop (specd serve) leave a CUDA target's logits on the device
 * (specd_extend_out.device_logits) and the session verifies them there (session/spec_device.h).
 * Shown on the real model, greedy and at T 0.8 coupled:
 *   - ngram's output equals plain decoding's on the same device, and equals the same run with
 *     the logits copied to the host (SPECD_CUDA_VERIFY=host);
 *   - steps were decided on the device (counted), and none when the copy is forced.
 * specd_spec_run's contexts keep SPECD_TEST_LAYERS layers when it is set (the CPU emulation runs
 * 2); the loop makes its own context of all layers, so it runs only where that variable is unset
 * (on a device). Skipped (77) without the model or a CUDA device. */
#include "test_check.h"
#include "test_main.h"

#include "session/spec_device.h"
#include "specd/spec_loop.h"
#include "specd/spec_runtime.h"
#include "specd/tokenizer.h"

#include <string.h>

enum { N_GEN = 24, LOOP_GEN = 16 };

static const char *const prompt_text =
    "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat";

#define CHECK(c, ...) CHECK_OR(c, exit(1), __VA_ARGS__)

static specd_model *model;
static int32_t prompt[128];
static int64_t n_prompt;

static specd_seq_params params_for(const char *policy, float temperature) {
    specd_seq_params p = specd_seq_default_params();
    p.policy = policy;
    p.sampling.temperature = temperature;
    p.seed = 77;
    p.max_tokens = N_GEN;
    p.adaptive = 0;
    return p;
}

/* N_GEN tokens of policy through specd_spec_run on ctx; *device_steps: steps decided on the
 * device meanwhile. */
static void run(specd_context *ctx, const char *policy, float temperature, int32_t *out,
                uint64_t *device_steps) {
    specd_error err;
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = specd_model_get_info(model)->n_vocab;
    sp.max_draft = 6;
    specd_spec *spec;
    CHECK(specd_spec_create(&sp, &spec, &err) == SPECD_OK, "spec: %s", err.message);
    specd_seq_params p = params_for(policy, temperature);
    CHECK(specd_spec_seq_open(spec, 0, prompt, n_prompt, &p, &err) == SPECD_OK, "open: %s",
          err.message);
    uint64_t d0 = specd_device_verify_count();
    specd_run_stats rs;
    CHECK(specd_spec_run(spec, 0, ctx, 0, NULL, NULL, &rs, &err) == SPECD_OK, "run %s: %s", policy,
          err.message);
    *device_steps = specd_device_verify_count() - d0;
    int64_t n;
    const int32_t *toks = specd_spec_seq_output(spec, 0, &n);
    CHECK(n == N_GEN, "%s emitted %lld tokens", policy, (long long)n);
    memcpy(out, toks, sizeof(int32_t) * N_GEN);
    specd_spec_destroy(spec);
}

static int check_spec_run(void) {
    specd_context_params cp = specd_context_default_params();
    cp.device = SPECD_DEVICE_CUDA;
    cp.n_ctx = 256;
    cp.n_batch = 64;
    const char *layers = getenv("SPECD_TEST_LAYERS");
    if (layers && *layers) cp.n_layers = atoi(layers);
    specd_context *ctx;
    specd_error err;
    if (specd_context_create(model, &cp, &ctx, &err) != SPECD_OK) {
        printf("skipped: no CUDA context: %s\n", err.message);
        return SPECD_TEST_SKIP;
    }
    const float temps[2] = {0.0f, 0.8f};
    for (int t = 0; t < 2; t++) {
        int32_t plain[N_GEN], dev[N_GEN], host[N_GEN];
        uint64_t plain_steps, dev_steps, host_steps;
        unsetenv("SPECD_CUDA_VERIFY");
        run(ctx, "none", temps[t], plain, &plain_steps);
        run(ctx, "ngram", temps[t], dev, &dev_steps);
        setenv("SPECD_CUDA_VERIFY", "host", 1);
        run(ctx, "ngram", temps[t], host, &host_steps);
        unsetenv("SPECD_CUDA_VERIFY");
        int same_plain = !memcmp(plain, dev, sizeof plain), same_host = !memcmp(host, dev, sizeof dev);
        printf("spec_run T %.1f (%s layers): ngram on the device %s plain, %s the host copy; "
               "steps decided on the device: plain %llu, ngram %llu, forced copy %llu\n",
               (double)temps[t], layers && *layers ? layers : "all",
               same_plain ? "equals" : "DIFFERS FROM", same_host ? "equals" : "DIFFERS FROM",
               (unsigned long long)plain_steps, (unsigned long long)dev_steps,
               (unsigned long long)host_steps);
        CHECK(same_plain && same_host, "outputs differ");
        CHECK(plain_steps > 0 && dev_steps > 0, "the device path did not run");
        CHECK(host_steps == 0, "SPECD_CUDA_VERIFY=host still verified on the device");
    }
    specd_context_destroy(ctx);
    return 0;
}

typedef struct record {
    int32_t tokens[LOOP_GEN];
    int32_t n;
    int done;
    specd_status status;
} record;

static void on_event(const specd_loop_event *ev, void *user) {
    record *r = user;
    for (int32_t i = 0; i < ev->n_tokens && r->n < LOOP_GEN; i++) r->tokens[r->n++] = ev->tokens[i];
    if (ev->done) {
        r->done = 1;
        r->status = ev->status;
    }
}

/* One loop on CUDA with a plain and an ngram request at temperature; *device_steps as run's. */
static void run_loop(float temperature, record r[2], uint64_t *device_steps) {
    specd_loop_params lp = specd_loop_default_params();
    lp.max_seqs = 2;
    lp.n_ctx = 256;
    lp.n_batch = 128;
    lp.max_draft = 6;
    lp.device = SPECD_DEVICE_CUDA;
    specd_loop *loop;
    specd_error err;
    CHECK(specd_loop_create(model, &lp, &loop, &err) == SPECD_OK, "loop: %s", err.message);
    const char *policies[2] = {"none", "ngram"};
    uint64_t d0 = specd_device_verify_count();
    for (int i = 0; i < 2; i++) {
        specd_seq_params p = params_for(policies[i], temperature);
        p.max_tokens = LOOP_GEN;
        p.stream_key = 0x5eed; /* both requests draw the same stream: plain's tokens */
        memset(&r[i], 0, sizeof r[i]);
        int64_t id;
        CHECK(specd_loop_submit(loop, prompt, n_prompt, &p, on_event, &r[i], &id, &err) ==
                  SPECD_OK,
              "submit: %s", err.message);
    }
    while (specd_loop_n_running(loop) + specd_loop_n_queued(loop) > 0)
        CHECK(specd_loop_step(loop, NULL, &err) == SPECD_OK, "step: %s", err.message);
    *device_steps = specd_device_verify_count() - d0;
    for (int i = 0; i < 2; i++)
        CHECK(r[i].done && r[i].status == SPECD_OK && r[i].n == LOOP_GEN, "request %d: %d tokens",
              i, r[i].n);
    specd_loop_destroy(loop);
}

static void check_loop(void) {
    const float temps[2] = {0.0f, 0.8f};
    for (int t = 0; t < 2; t++) {
        record dev[2], host[2];
        uint64_t dev_steps, host_steps;
        unsetenv("SPECD_CUDA_VERIFY");
        run_loop(temps[t], dev, &dev_steps);
        setenv("SPECD_CUDA_VERIFY", "host", 1);
        run_loop(temps[t], host, &host_steps);
        unsetenv("SPECD_CUDA_VERIFY");
        int same_plain = !memcmp(dev[0].tokens, dev[1].tokens, sizeof dev[0].tokens);
        int same_host = !memcmp(dev[1].tokens, host[1].tokens, sizeof dev[1].tokens) &&
                        !memcmp(dev[0].tokens, host[0].tokens, sizeof dev[0].tokens);
        printf("loop T %.1f: ngram %s plain in one batch, %s the host copy; steps decided on "
               "the device %llu, forced copy %llu\n",
               (double)temps[t], same_plain ? "equals" : "DIFFERS FROM",
               same_host ? "equals" : "DIFFERS FROM", (unsigned long long)dev_steps,
               (unsigned long long)host_steps);
        CHECK(same_plain && same_host, "outputs differ");
        CHECK(dev_steps > 0 && host_steps == 0, "device path counts");
    }
}

int main(void) {
    const char *path = specd_test_model_path();
    if (!path || !*path) {
        printf("skipped: SPECD_TEST_MODEL is not set\n");
        return SPECD_TEST_SKIP;
    }
    specd_error err;
    if (specd_model_create(path, &model, &err) != SPECD_OK) {
        printf("skipped: the model does not load: %s\n", err.message);
        return SPECD_TEST_SKIP;
    }
    specd_tokenizer *tok;
    CHECK(specd_tokenizer_create_from_gguf(specd_model_gguf(model), &tok, &err) == SPECD_OK,
          "tokenizer: %s", err.message);
    size_t n;
    CHECK(specd_tokenizer_encode(tok, prompt_text, strlen(prompt_text), 0, prompt, 128, &n,
                                 &err) == SPECD_OK,
          "encode: %s", err.message);
    n_prompt = (int64_t)n;
    specd_tokenizer_destroy(tok);
    int rc = check_spec_run();
    if (rc == 0) {
        const char *layers = getenv("SPECD_TEST_LAYERS");
        if (layers && *layers)
            printf("loop: not run (SPECD_TEST_LAYERS is set: the loop's context has all layers)\n");
        else
            check_loop();
        printf("PASS\n");
    }
    specd_model_destroy(model);
    return rc;
}
