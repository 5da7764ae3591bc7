#include "serve/serve_response.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_out.h"

static void str(FILE *f, const char *s) { json_string(f, s, strlen(s)); }

static char *close_stream(FILE *f, char **buf, size_t *len) {
    if (fclose(f) != 0) {
        free(*buf);
        return NULL;
    }
    return *buf;
}

char *serve_json_error(const serve_refusal *why, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    fputs("{\"error\":{\"message\":", f);
    str(f, why->message);
    fputs(",\"type\":", f);
    str(f, why->type[0] ? why->type : "invalid_request_error");
    fputs(",\"param\":", f);
    if (why->param[0]) str(f, why->param);
    else fputs("null", f);
    fputs(",\"code\":", f);
    if (why->code[0]) str(f, why->code);
    else fprintf(f, "%d", why->status);
    fputs("}}", f);
    return close_stream(f, &buf, len);
}

static void usage(FILE *f, int64_t n_prompt, int64_t n_completion) {
    fprintf(f, "\"usage\":{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"total_tokens\":%lld}",
            (long long)n_prompt, (long long)n_completion, (long long)(n_prompt + n_completion));
}

/* vLLM reports these per request under metrics.speculative_decoding. */
static void speculation(FILE *f, const char *policy, const specd_seq_stats *s) {
    fputs("\"metrics\":{\"speculative_decoding\":{\"policy\":", f);
    str(f, policy ? policy : "none");
    fprintf(f, ",\"num_drafts\":%lld,\"num_draft_tokens\":%lld,\"num_accepted_tokens\":%lld",
            (long long)s->n_drafts, (long long)s->n_draft_tokens, (long long)s->n_accepted);
    fputs(",\"acceptance_rate\":", f);
    json_number(f, s->n_draft_tokens ? (double)s->n_accepted / (double)s->n_draft_tokens : 0.0);
    fputs(",\"mean_acceptance_length\":", f);
    json_number(f, s->n_drafts ? 1.0 + (double)s->n_accepted / (double)s->n_drafts : 1.0);
    fprintf(f, ",\"num_target_forwards\":%lld,\"tokens_per_forward\":", (long long)s->n_steps);
    json_number(f, s->n_steps ? (double)s->n_emitted / (double)s->n_steps : 0.0);
    fputs(",\"num_accepted_tokens_per_pos\":[", f);
    for (int i = 0; i < SPECD_MAX_DRAFT && s->drafted_at[i] > 0; i++)
        fprintf(f, "%s%lld", i ? "," : "", (long long)s->accepted_at[i]);
    fprintf(f, "],\"num_guard_plain_steps\":%lld}}", (long long)s->n_guard_plain);
}

/* The end of the choices, then the usage and speculation figures of them all. */
static void totals(FILE *f, const serve_answer_meta *m, int64_t n_prompt, int64_t n_completion,
                   const specd_seq_stats *stats) {
    fputs("],", f);
    usage(f, n_prompt, n_completion);
    fputc(',', f);
    speculation(f, m->policy, stats);
}

static void head(FILE *f, const serve_answer_meta *m, const char *object) {
    fputs("{\"id\":", f);
    str(f, m->id);
    fprintf(f, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object, m->created);
    str(f, m->model);
    fputs(",\"choices\":[", f);
}

static void finish_reason(FILE *f, const char *reason) {
    fputs("\"finish_reason\":", f);
    if (reason) str(f, reason);
    else fputs("null", f);
    fputc('}', f);
}

/* A chat message's (or delta's) content, or null and the tool calls. */
static void content(FILE *f, const serve_choice_out *c) {
    fputs("\"content\":", f);
    if (c->tool_calls) {
        fputs("null,\"tool_calls\":", f);
        fputs(c->tool_calls, f); /* JSON written by cJSON */
        return;
    }
    json_string(f, c->text, c->text_len);
}

/* text: the echo's bytes then the text's, as one string. 0, or -1 when out of memory. */
static int text_value(FILE *f, const serve_choice_out *c) {
    if (!c->echo) {
        json_string(f, c->text, c->text_len);
        return 0;
    }
    char *both = malloc(c->echo_len + c->text_len + 1);
    if (!both) return -1;
    memcpy(both, c->echo, c->echo_len);
    if (c->text_len) memcpy(both + c->echo_len, c->text, c->text_len);
    json_string(f, both, c->echo_len + c->text_len);
    free(both);
    return 0;
}

char *serve_json_answer(const serve_answer_meta *m, const serve_choice_out *c, int n,
                        int64_t n_prompt, int64_t n_completion, const specd_seq_stats *stats,
                        const specd_tokenizer *tok, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    head(f, m, m->chat ? "chat.completion" : "text_completion");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s{\"index\":%d,", i ? "," : "", c[i].index);
        if (m->chat) {
            fputs("\"message\":{\"role\":\"assistant\",", f);
            content(f, &c[i]);
            fputs("},\"logprobs\":", f);
        } else {
            fputs("\"text\":", f);
            if (text_value(f, &c[i])) {
                fclose(f);
                free(buf);
                return NULL;
            }
            fputs(",\"logprobs\":", f);
        }
        serve_logprobs_write(f, c[i].logprobs, m->chat, tok);
        fputc(',', f);
        finish_reason(f, c[i].finish_reason);
    }
    totals(f, m, n_prompt, n_completion, stats);
    fputc('}', f);
    return close_stream(f, &buf, len);
}

char *serve_sse_chunk(const serve_answer_meta *m, const serve_choice_out *c, int first,
                      int usage_null, const specd_seq_stats *stats, const specd_tokenizer *tok,
                      size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    fputs("data: ", f);
    head(f, m, m->chat ? "chat.completion.chunk" : "text_completion");
    fprintf(f, "{\"index\":%d,", c->index);
    if (m->chat) {
        fputs("\"delta\":{", f);
        if (first) fputs("\"role\":\"assistant\",", f);
        content(f, c);
        fputs("},", f);
    } else {
        fputs("\"text\":", f);
        json_string(f, c->text, c->text_len);
        fputc(',', f);
    }
    fputs("\"logprobs\":", f);
    serve_logprobs_write(f, c->logprobs, m->chat, tok);
    fputc(',', f);
    finish_reason(f, c->finish_reason);
    fputc(']', f);
    if (usage_null) fputs(",\"usage\":null", f);
    if (stats) {
        fputc(',', f);
        speculation(f, m->policy, stats);
    }
    fputs("}\n\n", f);
    return close_stream(f, &buf, len);
}

char *serve_sse_usage(const serve_answer_meta *m, int64_t n_prompt, int64_t n_completion,
                      const specd_seq_stats *stats, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    fputs("data: ", f);
    head(f, m, m->chat ? "chat.completion.chunk" : "text_completion");
    totals(f, m, n_prompt, n_completion, stats);
    fputs("}\n\n", f);
    return close_stream(f, &buf, len);
}

char *serve_sse_error(const char *message, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    fputs("data: {\"error\":{\"message\":", f);
    str(f, message);
    fputs(",\"type\":\"server_error\",\"param\":null,\"code\":500}}\n\n", f);
    return close_stream(f, &buf, len);
}
