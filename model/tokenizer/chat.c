/* ChatML rendering (SmolLM2, Qwen): the one template family the supported models use. */
#include <string.h>

#include "common/status_internal.h"
#include "model/tokenizer/tokenizer_internal.h"

typedef struct sink {
    char *buf;
    size_t cap, len;
} sink;

static void put(sink *s, const char *p, size_t n) {
    if (s->len + n <= s->cap && n) memcpy(s->buf + s->len, p, n);
    s->len += n;
}
static void puts_(sink *s, const char *p) { put(s, p, strlen(p)); }

specd_status specd_tokenizer_apply_chat_template(const specd_tokenizer *tok,
                                                 const specd_chat_message *messages, size_t n,
                                                 int add_generation_prompt, char *buf, size_t cap,
                                                 size_t *n_out, specd_error *err) {
    if (!tok || !n_out || (!messages && n) || (!buf && cap))
        return specd_fail(err, SPECD_E_INVALID_ARG, "chat template: NULL argument");
    if (!tok->chatml)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "tokenizer.chat_template is missing or not ChatML");
    for (size_t i = 0; i < n; i++)
        if (!messages[i].role || !messages[i].content)
            return specd_fail(err, SPECD_E_INVALID_ARG, "chat message %zu: NULL %s", i,
                              messages[i].role ? "content" : "role");
    /* Measure first, write second: nothing is written when buf is too small. */
    for (int pass = 0; pass < 2; pass++) {
        sink s = {pass ? buf : NULL, pass ? cap : 0, 0};
        if (tok->default_system && n > 0 && strcmp(messages[0].role, "system") != 0) {
            puts_(&s, "<|im_start|>system\n");
            puts_(&s, tok->default_system);
            puts_(&s, "<|im_end|>\n");
        }
        for (size_t i = 0; i < n; i++) {
            puts_(&s, "<|im_start|>");
            puts_(&s, messages[i].role);
            puts_(&s, "\n");
            puts_(&s, messages[i].content);
            puts_(&s, "<|im_end|>\n");
        }
        if (add_generation_prompt) puts_(&s, "<|im_start|>assistant\n");
        if (pass == 0) {
            *n_out = s.len;
            if (s.len > cap)
                return specd_fail(err, SPECD_E_INVALID_ARG,
                                  "chat template: %zu bytes need room, %zu given", s.len, cap);
        }
    }
    return SPECD_OK;
}
