#include "serve/serve_tokenize.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_out.h"
#include "common/utf8.h"

#define BAD(param, ...) serve_refuse(why, 400, "invalid_request_error", param, __VA_ARGS__)

static cJSON *parse_object(const char *body, size_t len, serve_refusal *why) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        BAD(NULL, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

/* A boolean field: absent or null leaves *v. -1 (why filled) when it is not a boolean. */
static int flag(const cJSON *root, const char *name, int *v, serve_refusal *why) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!f || cJSON_IsNull(f)) return 0;
    if (!cJSON_IsBool(f)) return BAD(name, "'%s' must be true or false", name);
    *v = cJSON_IsTrue(f);
    return 0;
}

static int no_memory(serve_refusal *why) {
    return serve_refuse(why, 500, "server_error", NULL, "no memory");
}

/* A memstream for an answer's body, or NULL with why filled. */
static FILE *open_body(char **buf, size_t *len, serve_refusal *why) {
    FILE *f = open_memstream(buf, len);
    if (!f) no_memory(why);
    return f;
}

/* Closes a memstream: its buffer (valid only once closed), or NULL with why filled. */
static char *finish(FILE *f, char **buf, serve_refusal *why) {
    if (fclose(f) != 0) {
        free(*buf);
        *buf = NULL;
    }
    if (!*buf) no_memory(why);
    return *buf;
}

static int whole_utf8(const char *p, size_t len) {
    for (size_t i = 0, l; i < len; i += l)
        if (!(l = utf8_valid_len((const unsigned char *)p + i, len - i))) return 0;
    return 1;
}

/* A token's piece as llama-server's with_pieces gives it: a string, or its bytes when they are
 * not whole UTF-8 characters. */
static void piece_value(FILE *f, const specd_tokenizer *tok, int32_t id) {
    const char *p = "";
    size_t len = 0;
    specd_tokenizer_token_to_piece(tok, id, SPECD_DETOKENIZE_RENDER_SPECIAL, &p, &len, NULL);
    if (whole_utf8(p, len)) {
        json_string(f, p, len);
        return;
    }
    fputc('[', f);
    for (size_t i = 0; i < len; i++)
        fprintf(f, "%s%u", i ? "," : "", (unsigned char)p[i]);
    fputc(']', f);
}

char *serve_tokenize(const char *body, size_t body_len, const specd_tokenizer *tok, size_t *len,
                     serve_refusal *why) {
    cJSON *root = parse_object(body, body_len, why);
    if (!root) return NULL;
    char *out = NULL;
    int32_t *ids = NULL;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(root, "content");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const cJSON *text = content ? content : prompt;
    const char *param = content ? "content" : "prompt";
    /* llama-server's add_special defaults to false, vLLM's add_special_tokens to true */
    int add_special = !content, parse_special = 1, with_pieces = 0;
    if (!text || !cJSON_IsString(text)) {
        BAD(param, "'content' (or 'prompt') must be a string");
        goto done;
    }
    if (flag(root, "add_special", &add_special, why) ||
        flag(root, "add_special_tokens", &add_special, why) ||
        flag(root, "parse_special", &parse_special, why) ||
        flag(root, "with_pieces", &with_pieces, why))
        goto done;
    uint32_t flags = (add_special ? SPECD_TOKENIZE_ADD_SPECIAL : 0u) |
                     (parse_special ? SPECD_TOKENIZE_PARSE_SPECIAL : 0u);
    size_t tl = strlen(text->valuestring), need = 0;
    specd_error err;
    specd_tokenizer_encode(tok, text->valuestring, tl, flags, NULL, 0, &need, NULL);
    if (!(ids = malloc((need ? need : 1) * sizeof *ids))) {
        no_memory(why);
        goto done;
    }
    if (need && specd_tokenizer_encode(tok, text->valuestring, tl, flags, ids, need, &need, &err) !=
                    SPECD_OK) {
        BAD(param, "cannot encode '%s': %s", param, err.message);
        goto done;
    }
    char *buf = NULL;
    FILE *f = open_body(&buf, len, why);
    if (!f) goto done;
    fputs("{\"tokens\":[", f);
    for (size_t i = 0; i < need; i++) {
        if (i) fputc(',', f);
        if (!with_pieces) {
            fprintf(f, "%d", ids[i]);
            continue;
        }
        fprintf(f, "{\"id\":%d,\"piece\":", ids[i]);
        piece_value(f, tok, ids[i]);
        fputc('}', f);
    }
    fprintf(f, "],\"count\":%zu}", need);
    out = finish(f, &buf, why);
done:
    free(ids);
    cJSON_Delete(root);
    return out;
}

char *serve_detokenize(const char *body, size_t body_len, const specd_tokenizer *tok, size_t *len,
                       serve_refusal *why) {
    cJSON *root = parse_object(body, body_len, why);
    if (!root) return NULL;
    char *out = NULL, *text = NULL;
    int32_t *ids = NULL;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsArray(a)) {
        BAD("tokens", "'tokens' must be an array of token ids");
        goto done;
    }
    int n = cJSON_GetArraySize(a);
    int32_t n_vocab = specd_tokenizer_vocab_size(tok);
    if (!(ids = malloc((size_t)(n ? n : 1) * sizeof *ids))) {
        no_memory(why);
        goto done;
    }
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(v >= 0 && v < n_vocab && v == floor(v))) {
            BAD("tokens", "'tokens'[%d] is not a token id in [0, %d)", k, n_vocab);
            goto done;
        }
        ids[k++] = (int32_t)v;
    }
    size_t need = 0;
    specd_tokenizer_decode(tok, ids, (size_t)n, SPECD_DETOKENIZE_RENDER_SPECIAL, NULL, 0, &need,
                           NULL);
    if (!(text = malloc(need + 1)) ||
        specd_tokenizer_decode(tok, ids, (size_t)n, SPECD_DETOKENIZE_RENDER_SPECIAL, text, need,
                               &need, NULL) != SPECD_OK) {
        no_memory(why);
        goto done;
    }
    char *buf = NULL;
    FILE *f = open_body(&buf, len, why);
    if (!f) goto done;
    fputs("{\"content\":", f);
    json_string(f, text, need);
    fputs(",\"prompt\":", f);
    json_string(f, text, need);
    fputc('}', f);
    out = finish(f, &buf, why);
done:
    free(text);
    free(ids);
    cJSON_Delete(root);
    return out;
}

/* A special token's text, or null when the model has none. */
static void special(FILE *f, const specd_tokenizer *tok, int32_t id) {
    const char *p = NULL;
    size_t len = 0;
    if (id < 0 || specd_tokenizer_token_to_piece(tok, id, SPECD_DETOKENIZE_RENDER_SPECIAL, &p, &len,
                                                 NULL) != SPECD_OK) {
        fputs("null", f);
        return;
    }
    json_string(f, p, len);
}

char *serve_tokenizer_info(const specd_tokenizer *tok, int32_t n_ctx, size_t *len,
                           serve_refusal *why) {
    char *buf = NULL;
    FILE *f = open_body(&buf, len, why);
    if (!f) return NULL;
    /* no pad token and no Jinja template: the chat template is applied here, not by clients */
    fputs("{\"tokenizer_class\":\"specd\",\"eos_token\":", f);
    special(f, tok, specd_tokenizer_eos(tok));
    fputs(",\"bos_token\":", f);
    special(f, tok, specd_tokenizer_bos(tok));
    fprintf(f,
            ",\"pad_token\":null,\"chat_template\":null,\"model_max_length\":%d,"
            "\"vocab_size\":%d}",
            n_ctx, specd_tokenizer_vocab_size(tok));
    return finish(f, &buf, why);
}
