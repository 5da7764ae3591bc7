#include "serve/serve_logprobs.h"

#include <stdlib.h>
#include <string.h>

#include "common/json_out.h"
#include "common/utf8.h"

/* A token's bytes: special tokens as their text ("<|im_end|>"), since they have no other. */
static void piece(const specd_tokenizer *tok, int32_t id, const char **p, size_t *len) {
    if (specd_tokenizer_token_to_piece(tok, id, SPECD_DETOKENIZE_RENDER_SPECIAL, p, len, NULL) !=
        SPECD_OK) {
        *p = "";
        *len = 0;
    }
}

/* Counts UTF-8 characters over a byte stream fed in pieces: lead bytes seen, and whether the
 * last character still misses bytes (its lead seen, not all its continuation bytes). */
typedef struct char_count {
    int64_t started;
    int missing;
} char_count;

static void count_bytes(char_count *c, const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if ((b[i] & 0xC0) == 0x80) {
            if (c->missing > 0) c->missing--;
            continue;
        }
        c->started++;
        c->missing = b[i] >= 0xF0 ? 3 : b[i] >= 0xE0 ? 2 : b[i] >= 0xC0 ? 1 : 0;
    }
}

/* Characters wholly before the next byte. */
static int64_t complete_chars(const char_count *c) { return c->started - (c->missing > 0); }

int serve_logprobs_compute(serve_engine *eng, const specd_tokenizer *tok, const serve_request *req,
                           const serve_prompt *p, const int32_t *completion, int64_t n_completion,
                           int64_t from, serve_answer_logprobs *lp, serve_refusal *why) {
    memset(lp, 0, sizeof *lp);
    if (!req->logprobs) return 0;
    lp->asked = 1;
    lp->top_n = req->top_logprobs;
    int echo = req->echo && from == 0;
    int64_t n_all = p->n + n_completion;
    int32_t *all = malloc((size_t)n_all * sizeof *all);
    /* echo: every prompt token is reported, the first without a log-probability (nothing
     * precedes it); else only the completion's from `from` on */
    int64_t first = echo ? 1 : p->n + from;
    lp->n_unscored = echo ? 1 : 0;
    lp->n = n_all - first + lp->n_unscored;
    lp->pos = calloc((size_t)(lp->n ? lp->n : 1), sizeof *lp->pos);
    lp->offset = calloc((size_t)(lp->n ? lp->n : 1), sizeof *lp->offset);
    if (!all || !lp->pos || !lp->offset) {
        free(all);
        return serve_refuse(why, 500, "server_error", NULL, "no memory for logprobs");
    }
    memcpy(all, p->ids, (size_t)p->n * sizeof *all);
    if (n_completion) memcpy(all + p->n, completion, (size_t)n_completion * sizeof *all);
    if (lp->n_unscored) lp->pos[0].token = all[0];
    specd_error err;
    specd_status st = lp->n > lp->n_unscored
                          ? serve_engine_score(eng, all, n_all, first, lp->top_n,
                                               lp->pos + lp->n_unscored, &err)
                          : SPECD_OK;
    /* text_offset: OpenAI's counts from the prompt's start, in the text as the answer gives it
     * (the prompt as sent, then the completion's bytes) */
    char_count c = {0};
    const char *b;
    size_t bl;
    if (!echo) count_bytes(&c, (const unsigned char *)p->text, p->text ? p->text_len : 0);
    for (int64_t i = echo ? 0 : p->n, k = 0; i < n_all; i++) {
        if (echo || i >= first) lp->offset[k++] = complete_chars(&c);
        piece(tok, all[i], &b, &bl);
        count_bytes(&c, (const unsigned char *)b, bl);
    }
    free(all);
    if (st != SPECD_OK)
        return serve_refuse(why, 500, "server_error", NULL, "logprobs: %s", err.message);
    return 0;
}

void serve_logprobs_free(serve_answer_logprobs *lp) {
    free(lp->pos);
    free(lp->offset);
    memset(lp, 0, sizeof *lp);
}

/* A token's name in the JSON: its text when that is whole UTF-8 characters, else OpenAI's
 * "bytes:\\xNN..." (a byte-level piece of a character would otherwise show as U+FFFD). */
static void token_name(FILE *f, const char *p, size_t len) {
    size_t i = 0;
    while (i < len) {
        size_t l = utf8_valid_len((const unsigned char *)p + i, len - i);
        if (!l) break;
        i += l;
    }
    if (i == len) {
        json_string(f, p, len);
        return;
    }
    fputs("\"bytes:", f);
    for (size_t k = 0; k < len; k++) fprintf(f, "\\\\x%02x", (unsigned char)p[k]);
    fputc('"', f);
}

/* Shortest text that reads back as the same float. */
static void logprob_number(FILE *f, float v) { fprintf(f, "%.9g", (double)v); }

static void chat_token(FILE *f, const specd_tokenizer *tok, int32_t id, float logprob) {
    const char *p;
    size_t len;
    piece(tok, id, &p, &len);
    fputs("{\"token\":", f);
    token_name(f, p, len);
    fputs(",\"logprob\":", f);
    logprob_number(f, logprob);
    fputs(",\"bytes\":[", f);
    for (size_t i = 0; i < len; i++) fprintf(f, "%s%u", i ? "," : "", (unsigned char)p[i]);
    fputc(']', f);
}

static void write_chat(FILE *f, const serve_answer_logprobs *lp, const specd_tokenizer *tok) {
    fputs("{\"content\":[", f);
    for (int64_t i = 0; i < lp->n; i++) {
        const serve_logprob *e = &lp->pos[i];
        if (i) fputc(',', f);
        chat_token(f, tok, e->token, e->logprob);
        fputs(",\"top_logprobs\":[", f);
        for (int32_t k = 0; k < e->n_top; k++) {
            if (k) fputc(',', f);
            chat_token(f, tok, e->top_token[k], e->top_logprob[k]);
            fputc('}', f);
        }
        fputs("]}", f);
    }
    fputs("],\"refusal\":null}", f);
}

static void write_completion(FILE *f, const serve_answer_logprobs *lp, const specd_tokenizer *tok) {
    const char *p;
    size_t len;
    fputs("{\"tokens\":[", f);
    for (int64_t i = 0; i < lp->n; i++) {
        piece(tok, lp->pos[i].token, &p, &len);
        if (i) fputc(',', f);
        token_name(f, p, len);
    }
    fputs("],\"token_logprobs\":[", f);
    for (int64_t i = 0; i < lp->n; i++) {
        if (i) fputc(',', f);
        if (i < lp->n_unscored) fputs("null", f);
        else logprob_number(f, lp->pos[i].logprob);
    }
    /* each position's top alternatives and the token itself, by text (as OpenAI's dict) */
    fputs("],\"top_logprobs\":[", f);
    for (int64_t i = 0; i < lp->n; i++) {
        const serve_logprob *e = &lp->pos[i];
        if (i) fputc(',', f);
        if (i < lp->n_unscored) {
            fputs("null", f);
            continue;
        }
        fputc('{', f);
        int chosen_listed = 0;
        for (int32_t k = 0; k < e->n_top; k++) {
            piece(tok, e->top_token[k], &p, &len);
            if (k) fputc(',', f);
            token_name(f, p, len);
            fputc(':', f);
            logprob_number(f, e->top_logprob[k]);
            chosen_listed |= e->top_token[k] == e->token;
        }
        if (!chosen_listed) {
            piece(tok, e->token, &p, &len);
            if (e->n_top) fputc(',', f);
            token_name(f, p, len);
            fputc(':', f);
            logprob_number(f, e->logprob);
        }
        fputc('}', f);
    }
    /* in characters (code points) of the answer's text: see serve_answer_logprobs.offset */
    fputs("],\"text_offset\":[", f);
    for (int64_t i = 0; i < lp->n; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)lp->offset[i]);
    fputs("]}", f);
}

void serve_logprobs_write(FILE *f, const serve_answer_logprobs *lp, int chat,
                          const specd_tokenizer *tok) {
    if (!lp || !lp->asked) fputs("null", f);
    else if (chat) write_chat(f, lp, tok);
    else write_completion(f, lp, tok);
}
