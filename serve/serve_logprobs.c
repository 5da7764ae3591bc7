#include "serve/serve_logprobs.h"

#include <stdlib.h>
#include <string.h>

#include "common/json_out.h"

int serve_logprobs_compute(serve_engine *eng, const serve_request *req, serve_job *job,
                           int64_t n_completion, serve_answer_logprobs *lp, serve_refusal *why) {
    memset(lp, 0, sizeof *lp);
    if (!req->logprobs) return 0;
    lp->asked = 1;
    lp->top_n = req->top_logprobs;
    int64_t n_all = req->n_prompt + n_completion;
    int32_t *all = malloc((size_t)n_all * sizeof *all);
    /* echo: every prompt token is reported, the first without a log-probability (nothing
     * precedes it); else only the completion's */
    int64_t from = req->echo ? 1 : req->n_prompt;
    lp->n_unscored = req->echo ? 1 : 0;
    lp->n = n_all - from + lp->n_unscored;
    lp->pos = calloc((size_t)(lp->n ? lp->n : 1), sizeof *lp->pos);
    if (!all || !lp->pos) {
        free(all);
        return serve_refuse(why, 500, "server_error", NULL, "no memory for logprobs");
    }
    memcpy(all, req->prompt, (size_t)req->n_prompt * sizeof *all);
    if (serve_job_tokens(job, all + req->n_prompt, n_completion) != n_completion) {
        free(all);
        return serve_refuse(why, 500, "server_error", NULL, "logprobs: tokens missing");
    }
    if (lp->n_unscored) lp->pos[0].token = all[0];
    specd_error err;
    specd_status st = serve_engine_score(eng, all, n_all, from, lp->top_n,
                                         lp->pos + lp->n_unscored, &err);
    free(all);
    if (st != SPECD_OK)
        return serve_refuse(why, 500, "server_error", NULL, "logprobs: %s", err.message);
    if (!req->echo) /* OpenAI's text_offset counts from the prompt's start */
        for (size_t i = 0; i < req->prompt_text_len; i++)
            lp->text_offset0 += ((unsigned char)req->prompt_text[i] & 0xC0) != 0x80;
    return 0;
}

void serve_logprobs_free(serve_answer_logprobs *lp) {
    free(lp->pos);
    memset(lp, 0, sizeof *lp);
}

/* A token's bytes: special tokens as their text ("<|im_end|>"), since they have no other. */
static void piece(const specd_tokenizer *tok, int32_t id, const char **p, size_t *len) {
    if (specd_tokenizer_token_to_piece(tok, id, SPECD_DETOKENIZE_RENDER_SPECIAL, p, len, NULL) !=
        SPECD_OK) {
        *p = "";
        *len = 0;
    }
}

/* Shortest text that reads back as the same float. */
static void logprob_number(FILE *f, float v) { fprintf(f, "%.9g", (double)v); }

static void chat_token(FILE *f, const specd_tokenizer *tok, int32_t id, float logprob) {
    const char *p;
    size_t len;
    piece(tok, id, &p, &len);
    fputs("{\"token\":", f);
    json_string(f, p, len);
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
        json_string(f, p, len);
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
            json_string(f, p, len);
            fputc(':', f);
            logprob_number(f, e->top_logprob[k]);
            chosen_listed |= e->top_token[k] == e->token;
        }
        if (!chosen_listed) {
            piece(tok, e->token, &p, &len);
            if (e->n_top) fputc(',', f);
            json_string(f, p, len);
            fputc(':', f);
            logprob_number(f, e->logprob);
        }
        fputc('}', f);
    }
    /* in characters (code points) of the text the tokens make, counted from the prompt's start */
    fputs("],\"text_offset\":[", f);
    int64_t off = lp->text_offset0;
    for (int64_t i = 0; i < lp->n; i++) {
        if (i) fputc(',', f);
        fprintf(f, "%lld", (long long)off);
        piece(tok, lp->pos[i].token, &p, &len);
        for (size_t k = 0; k < len; k++) off += ((unsigned char)p[k] & 0xC0) != 0x80;
    }
    fputs("]}", f);
}

void serve_logprobs_write(FILE *f, const serve_answer_logprobs *lp, int chat,
                          const specd_tokenizer *tok) {
    if (!lp || !lp->asked) fputs("null", f);
    else if (chat) write_chat(f, lp, tok);
    else write_completion(f, lp, tok);
}
