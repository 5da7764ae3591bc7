/* fuzz_serve_request: the OpenAI request parser of `specd serve` (serve/serve_request.c) on
 * arbitrary bodies, the untrusted bytes of every POST to /v1/completions and /v1/chat/completions.
 * First byte: bit 0 picks the endpoint (1: chat), bits 1-2 one of four servers' limits (a tiny
 * context, another default policy, a max_tokens cap of 1), bit 3 the tokenizer endpoints'
 * parsers instead (serve/serve_tokenize.c; bit 0: /detokenize); the rest is the body, as HTTP
 * gives it (not NUL-terminated). A parse either refuses with a 4xx/5xx and a message, or gives a
 * request that keeps every promise the engine relies on (checked below; abort() otherwise).
 * The tokenizer is the toy vocabulary of the tokenizer tests with a ChatML template, built once:
 * no model file is needed, and the chat path reaches the template and the encoder. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_request.h"
#include "serve/serve_structured.h"
#include "serve/serve_tokenize.h"
#include "specd/gguf.h"
#include "specd/policy.h"
#include "specd/tokenizer.h"
#include "tokenizer/toy_vocab.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static specd_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static gguf_builder b;
    static specd_gguf *g;
    /* the Qwen2.5 form of ChatML (a default system prompt), as in the tokenizer's tests */
    toy_opts o = {.bos = 1,
                  .chat_template = "{%- if messages[0]['role'] == 'system' %}{{- "
                                   "'<|im_start|>system\\n' + messages[0]['content'] + "
                                   "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou "
                                   "are Qwen.<|im_end|>\\n' }}{%- endif %}"};
    toy_build(&b, &o);
    if (specd_gguf_create_from_memory(b.buf, b.len, &g, NULL) != SPECD_OK ||
        specd_tokenizer_create_from_gguf(g, &tok, NULL) != SPECD_OK)
        abort();
    return 0;
}

static const serve_limits limits[4] = {
    {.model_id = "smollm2", .max_tokens_cap = 512, .default_max_tokens = 16, .n_ctx = 2048,
     .step_rows = 17, .max_draft = 8, .default_policy = "none"},
    /* a context a long prompt does not fit */
    {.model_id = "smollm2", .max_tokens_cap = 32, .default_max_tokens = 8, .n_ctx = 48,
     .step_rows = 9, .max_draft = 4, .default_policy = "ngram", .default_policy_options = "k=4"},
    {.model_id = "m", .max_tokens_cap = 4096, .default_max_tokens = 256, .n_ctx = 8192,
     .step_rows = 33, .max_draft = 16, .default_policy = "ngram", .default_policy_options = "n=3"},
    {.model_id = "smollm2", .max_tokens_cap = 1, .default_max_tokens = 1, .n_ctx = 512,
     .step_rows = 3, .max_draft = 1, .default_policy = "none"},
};

static void check_request(const serve_request *r, const serve_limits *lim, int chat) {
    /* choices: one prompt on chat, a batch on completions, prompts x n within the bound */
    if (r->chat != chat || r->n_prompts < 1 || !r->prompts || (chat && r->n_prompts != 1) ||
        r->n < 1 || (int64_t)r->n_prompts * r->n > SERVE_MAX_CHOICES)
        abort();
    int32_t n_vocab = specd_tokenizer_vocab_size(tok);
    if (r->max_tokens < 0 || r->max_tokens > lim->max_tokens_cap) abort();
    for (int p = 0; p < r->n_prompts; p++) {
        const serve_prompt *pr = &r->prompts[p];
        if (pr->n < 1 || !pr->ids || (!chat && !pr->text)) abort();
        for (int64_t i = 0; i < pr->n; i++)
            if (pr->ids[i] < 0 || pr->ids[i] >= n_vocab) abort();
        if (pr->n + r->max_tokens + lim->step_rows > lim->n_ctx) abort();
    }
    if (r->n_stop < 0 || r->n_stop > SERVE_MAX_STOP) abort();
    for (int i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || r->stop_len[i] < 1 || r->stop_len[i] > SERVE_MAX_STOP_LEN ||
            strlen(r->stop[i]) != r->stop_len[i])
            abort();
    if (!r->policy || !specd_policy_find(r->policy) || !r->policy_options) abort();
    if (strchr(r->policy_options, '/') &&
        !(lim->default_policy_options && strchr(lim->default_policy_options, '/')))
        abort(); /* a request may not name files */
    const specd_sampling_params *s = &r->sampling;
    if (!(s->temperature >= 0 && s->temperature <= 2) || !(s->top_p > 0 && s->top_p <= 1) ||
        !(s->min_p >= 0 && s->min_p < 1) || s->top_k < 0)
        abort();
    if (r->has_seed && r->seed > (1ull << 53)) abort();
    if ((r->stream != 0 && r->stream != 1) || (r->adaptive != 0 && r->adaptive != 1)) abort();
    /* logit_bias: the sampler's bias, ids in the vocab and unique, values in [-100, 100] */
    if (s->bias != r->bias || s->n_bias != r->n_bias || (r->n_bias > 0) != (r->bias != NULL) ||
        r->n_bias > SERVE_MAX_LOGIT_BIAS)
        abort();
    for (size_t i = 0; i < r->n_bias; i++) {
        if (r->bias[i].token < 0 || r->bias[i].token >= n_vocab ||
            !(r->bias[i].bias >= -100 && r->bias[i].bias <= 100))
            abort();
        for (size_t j = 0; j < i; j++)
            if (r->bias[j].token == r->bias[i].token) abort();
    }
    /* penalties in their ranges; the structured fields read, tools only on chat */
    const specd_penalties_params *pp = &r->penalties;
    if (!(pp->presence_penalty >= -2 && pp->presence_penalty <= 2) ||
        !(pp->frequency_penalty >= -2 && pp->frequency_penalty <= 2) ||
        !(pp->repetition_penalty > 0 && pp->repetition_penalty <= 10))
        abort();
    if (!r->structured || (!chat && r->structured->n_tools) ||
        (r->structured->kind == SERVE_CONSTRAINT_GBNF && !r->structured->source) ||
        (r->structured->kind != SERVE_CONSTRAINT_NONE) != (r->constraint_param[0] != '\0'))
        abort();
    /* logprobs and echo: bounded, echo never with stream and only on completions */
    if (r->top_logprobs < 0 || r->top_logprobs > SERVE_MAX_TOP_LOGPROBS ||
        (!r->logprobs && r->top_logprobs) || (r->echo && r->stream) || (r->echo && chat))
        abort();
}

/* /tokenize and /detokenize bodies: an answer that is a JSON object, or a 4xx/5xx refusal. */
static void check_tokenizer_endpoint(const char *body, size_t len, int detokenize) {
    serve_refusal why;
    size_t out_len = 0;
    char *out = detokenize ? serve_detokenize(body, len, tok, &out_len, &why)
                           : serve_tokenize(body, len, tok, &out_len, &why);
    if (out) {
        if (out_len < 2 || out[0] != '{' || out[out_len - 1] != '}') abort();
        free(out);
    } else if ((why.status != 400 && why.status != 500) || !why.message[0]) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int chat = data[0] & 1;
    const serve_limits *lim = &limits[(data[0] >> 1) & 3];
    /* an exact-size copy, so that a read past the body is caught */
    size_t len = size - 1;
    char *body = malloc(len ? len : 1);
    if (len) memcpy(body, data + 1, len);
    if (data[0] & 8) { /* bit 3: the tokenizer endpoints (bit 0: /detokenize) */
        check_tokenizer_endpoint(body, len, chat);
        free(body);
        return 0;
    }
    serve_request r;
    serve_refusal why;
    if (serve_request_parse(body, len, chat, lim, tok, &r, &why) == 0) {
        check_request(&r, lim, chat);
        serve_request_free(&r);
    } else if ((why.status != 400 && why.status != 404 && why.status != 500) ||
               !why.message[0] || !why.type[0]) {
        abort();
    }
    free(body);
    return 0;
}
