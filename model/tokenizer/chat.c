/* ChatML rendering (SmolLM2, Qwen): the one template family the supported models use. */
#include <stdlib.h>
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

/* The template's pieces in order: its own markers ("<|im_start|>", "<|im_end|>": special) and
 * text (roles, contents, newlines). Rendering and encoding walk the same sequence, so the tokens
 * of a conversation are its rendering's, except that content is never read as markers. */
typedef void (*piece_fn)(void *user, const char *p, int special);

static void walk_template(const specd_tokenizer *tok, const specd_chat_message *messages,
                          size_t n, int add_generation_prompt, piece_fn emit, void *user) {
    if (tok->default_system && n > 0 && strcmp(messages[0].role, "system") != 0) {
        emit(user, "<|im_start|>", 1);
        emit(user, "system\n", 0);
        emit(user, tok->default_system, 0);
        emit(user, "<|im_end|>", 1);
        emit(user, "\n", 0);
    }
    for (size_t i = 0; i < n; i++) {
        emit(user, "<|im_start|>", 1);
        emit(user, messages[i].role, 0);
        emit(user, "\n", 0);
        emit(user, messages[i].content, 0);
        emit(user, "<|im_end|>", 1);
        emit(user, "\n", 0);
    }
    if (add_generation_prompt) {
        emit(user, "<|im_start|>", 1);
        emit(user, "assistant\n", 0);
    }
}

static specd_status check_messages(const specd_tokenizer *tok,
                                   const specd_chat_message *messages, size_t n,
                                   specd_error *err) {
    if (!tok->chatml)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "tokenizer.chat_template is missing or not ChatML");
    for (size_t i = 0; i < n; i++)
        if (!messages[i].role || !messages[i].content)
            return specd_fail(err, SPECD_E_INVALID_ARG, "chat message %zu: NULL %s", i,
                              messages[i].role ? "content" : "role");
    return SPECD_OK;
}

static void render_piece(void *user, const char *p, int special) {
    (void)special;
    puts_(user, p);
}

specd_status specd_tokenizer_apply_chat_template(const specd_tokenizer *tok,
                                                 const specd_chat_message *messages, size_t n,
                                                 int add_generation_prompt, char *buf, size_t cap,
                                                 size_t *n_out, specd_error *err) {
    if (!tok || !n_out || (!messages && n) || (!buf && cap))
        return specd_fail(err, SPECD_E_INVALID_ARG, "chat template: NULL argument");
    SPECD_TRY(check_messages(tok, messages, n, err));
    /* Measure first, write second: nothing is written when buf is too small. */
    for (int pass = 0; pass < 2; pass++) {
        sink s = {pass ? buf : NULL, pass ? cap : 0, 0};
        walk_template(tok, messages, n, add_generation_prompt, render_piece, &s);
        if (pass == 0) {
            *n_out = s.len;
            if (s.len > cap)
                return specd_fail(err, SPECD_E_INVALID_ARG,
                                  "chat template: %zu bytes need room, %zu given", s.len, cap);
        }
    }
    return SPECD_OK;
}

/* Encoding as the walk goes: text pieces gather until a marker, then are encoded as one
 * fragment (as encode with PARSE_SPECIAL encodes the text between two markers), never parsing
 * special tokens inside them. */
typedef struct chat_enc {
    const specd_tokenizer *tok;
    uint32_t flags; /* EXACT_BYTES or 0 */
    char *text;
    size_t text_len, text_cap;
    int32_t *ids;
    size_t n_ids, cap_ids;
    specd_status st;
    specd_error *err;
} chat_enc;

static void push_ids(chat_enc *c, const int32_t *ids, size_t n) {
    if (c->st != SPECD_OK) return;
    if (c->n_ids + n > c->cap_ids) {
        size_t cap = c->cap_ids ? c->cap_ids : 64;
        while (cap < c->n_ids + n) cap *= 2;
        int32_t *p = realloc(c->ids, cap * sizeof *p);
        if (!p) {
            c->st = specd_fail(c->err, SPECD_E_NOMEM, "chat encode: no memory");
            return;
        }
        c->ids = p;
        c->cap_ids = cap;
    }
    memcpy(c->ids + c->n_ids, ids, n * sizeof *ids);
    c->n_ids += n;
}

static void flush_text(chat_enc *c) {
    if (c->st != SPECD_OK || c->text_len == 0) return;
    size_t need = 0;
    specd_tokenizer_encode(c->tok, c->text, c->text_len, c->flags, NULL, 0, &need, NULL);
    int32_t *ids = malloc((need ? need : 1) * sizeof *ids);
    if (!ids) {
        c->st = specd_fail(c->err, SPECD_E_NOMEM, "chat encode: no memory");
        return;
    }
    c->st = specd_tokenizer_encode(c->tok, c->text, c->text_len, c->flags, ids, need, &need,
                                   c->err);
    if (c->st == SPECD_OK) push_ids(c, ids, need);
    free(ids);
    c->text_len = 0;
}

static void encode_piece(void *user, const char *p, int special) {
    chat_enc *c = user;
    if (c->st != SPECD_OK) return;
    size_t len = strlen(p);
    int32_t id = special ? specd_tokenizer_find(c->tok, p, len) : -1;
    if (id >= 0) {
        flush_text(c);
        push_ids(c, &id, 1);
        return;
    }
    if (c->text_len + len > c->text_cap) { /* (a marker the vocab lacks stays text) */
        size_t cap = c->text_cap ? c->text_cap : 256;
        while (cap < c->text_len + len) cap *= 2;
        char *t = realloc(c->text, cap);
        if (!t) {
            c->st = specd_fail(c->err, SPECD_E_NOMEM, "chat encode: no memory");
            return;
        }
        c->text = t;
        c->text_cap = cap;
    }
    memcpy(c->text + c->text_len, p, len);
    c->text_len += len;
}

specd_status specd_tokenizer_encode_chat(const specd_tokenizer *tok,
                                         const specd_chat_message *messages, size_t n,
                                         int add_generation_prompt, uint32_t flags, int32_t *ids,
                                         size_t cap, size_t *n_out, specd_error *err) {
    if (!tok || !n_out || (!messages && n) || (!ids && cap))
        return specd_fail(err, SPECD_E_INVALID_ARG, "chat encode: NULL argument");
    if (flags & ~(uint32_t)(SPECD_TOKENIZE_ADD_SPECIAL | SPECD_TOKENIZE_EXACT_BYTES))
        return specd_fail(err, SPECD_E_INVALID_ARG, "chat encode: flags 0x%x (only ADD_SPECIAL "
                                                    "and EXACT_BYTES apply)", (unsigned)flags);
    SPECD_TRY(check_messages(tok, messages, n, err));
    chat_enc c = {.tok = tok, .flags = flags & SPECD_TOKENIZE_EXACT_BYTES, .err = err};
    int add = (flags & SPECD_TOKENIZE_ADD_SPECIAL) != 0;
    if (add && tok->add_bos) push_ids(&c, &tok->bos, 1);
    walk_template(tok, messages, n, add_generation_prompt, encode_piece, &c);
    flush_text(&c);
    if (add && tok->add_eos) push_ids(&c, &tok->eos, 1);
    specd_status st = c.st;
    if (st == SPECD_OK) {
        *n_out = c.n_ids;
        if (c.n_ids > cap)
            st = specd_fail(err, SPECD_E_INVALID_ARG, "chat encode: %zu ids need room, %zu given",
                            c.n_ids, cap);
        else if (c.n_ids)
            memcpy(ids, c.ids, c.n_ids * sizeof *ids);
    }
    free(c.text);
    free(c.ids);
    return st;
}
