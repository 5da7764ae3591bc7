#include "serve/serve_request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_structured.h"
#include "specd/policy.h"

int serve_refuse(serve_refusal *why, int status, const char *type, const char *param,
                 const char *fmt, ...) {
    why->status = status;
    why->code[0] = '\0';
    snprintf(why->type, sizeof why->type, "%s", type);
    snprintf(why->param, sizeof why->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why->message, sizeof why->message, fmt, ap);
    va_end(ap);
    return -1;
}

#define BAD(param, ...) serve_refuse(why, 400, "invalid_request_error", param, __VA_ARGS__)

/* A number field: absent (returns 0, *v untouched), or a number in [lo, hi] (integral when
 * integer is set). Refusals name the field. */
static int get_number(const cJSON *root, const char *name, double lo, double hi, int integer,
                      double *v, int *present, serve_refusal *why) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    if (present) *present = 0;
    if (!f || cJSON_IsNull(f)) return 0;
    if (!cJSON_IsNumber(f)) return BAD(name, "'%s' must be a number", name);
    double x = f->valuedouble;
    if (!isfinite(x) || x < lo || x > hi)
        return BAD(name, "'%s' is %g, outside [%g, %g]", name, x, lo, hi);
    if (integer && x != floor(x)) return BAD(name, "'%s' must be an integer, got %g", name, x);
    *v = x;
    if (present) *present = 1;
    return 0;
}

static int get_bool(const cJSON *root, const char *name, int *v, serve_refusal *why) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!f || cJSON_IsNull(f)) return 0;
    if (!cJSON_IsBool(f)) return BAD(name, "'%s' must be true or false", name);
    *v = cJSON_IsTrue(f);
    return 0;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int parse_stop(const cJSON *root, serve_request *r, serve_refusal *why) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (!f || cJSON_IsNull(f)) return 0;
    const cJSON *one[1] = {f};
    int n = cJSON_IsString(f) ? 1 : cJSON_IsArray(f) ? cJSON_GetArraySize(f) : -1;
    if (n < 0) return BAD("stop", "'stop' must be a string or an array of strings");
    if (n > SERVE_MAX_STOP) return BAD("stop", "'stop' has %d strings; at most %d", n,
                                       SERVE_MAX_STOP);
    for (int i = 0; i < n; i++) {
        const cJSON *s = cJSON_IsString(f) ? one[0] : cJSON_GetArrayItem(f, i);
        if (!cJSON_IsString(s)) return BAD("stop", "'stop'[%d] must be a string", i);
        size_t len = strlen(s->valuestring);
        if (len == 0 || len > SERVE_MAX_STOP_LEN)
            return BAD("stop", "'stop'[%d] must have 1..%d bytes", i, SERVE_MAX_STOP_LEN);
        r->stop[r->n_stop] = dup_n(s->valuestring, len);
        if (!r->stop[r->n_stop]) return serve_refuse(why, 500, "server_error", NULL, "no memory");
        r->stop_len[r->n_stop++] = len;
    }
    return 0;
}

/* A message's content: a string, or OpenAI's array of parts whose text parts are joined. */
static char *message_content(const cJSON *c, int i, serve_refusal *why) {
    if (cJSON_IsString(c)) return dup_n(c->valuestring, strlen(c->valuestring));
    if (!cJSON_IsArray(c)) {
        BAD("messages", "'messages'[%d].content must be a string or an array of text parts", i);
        return NULL;
    }
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
            BAD("messages", "'messages'[%d].content: only {\"type\": \"text\", \"text\": ...} "
                            "parts are supported", i);
            return NULL;
        }
        len += strlen(text->valuestring);
    }
    char *out = malloc(len + 1), *p = out;
    if (!out) return NULL;
    cJSON_ArrayForEach(part, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t l = strlen(t);
        memcpy(p, t, l);
        p += l;
    }
    *p = '\0';
    return out;
}

/* a + sep + b (either may be NULL or empty), malloc'd; a is freed. */
static char *join_text(char *a, const char *sep, const char *b) {
    size_t la = a ? strlen(a) : 0, ls = strlen(sep), lb = b ? strlen(b) : 0;
    char *out = malloc(la + ls + lb + 1);
    if (out) {
        memcpy(out, a ? a : "", la);
        memcpy(out + la, la && lb ? sep : "", la && lb ? ls : 0);
        size_t at = la + (la && lb ? ls : 0);
        memcpy(out + at, b ? b : "", lb);
        out[at + lb] = '\0';
    }
    free(a);
    return out;
}

/* An assistant turn's tool_calls as the text a forced call is decoded as (serve_structured.h):
 * one {"name": N, "arguments": {...}} per line, the arguments parsed back from OpenAI's string
 * (kept as the string when it is not JSON), so the model sees its own calls in the shape it
 * writes them. */
static char *tool_calls_text(const cJSON *calls, int i, serve_refusal *why) {
    if (!cJSON_IsArray(calls)) {
        BAD("messages", "'messages'[%d].tool_calls must be an array", i);
        return NULL;
    }
    char *text = NULL;
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsString(name) || (args && !cJSON_IsString(args) && !cJSON_IsObject(args))) {
            BAD("messages", "'messages'[%d].tool_calls: each must be {\"function\": {\"name\": "
                            "string, \"arguments\": string}}", i);
            free(text);
            return NULL;
        }
        cJSON *one = cJSON_CreateObject();
        cJSON *a = !args ? cJSON_CreateObject()
                   : cJSON_IsObject(args) ? cJSON_Duplicate(args, 1)
                                          : cJSON_Parse(args->valuestring);
        if (args && cJSON_IsString(args) && !a) a = cJSON_CreateString(args->valuestring);
        char *line = NULL;
        if (one && a && cJSON_AddStringToObject(one, "name", name->valuestring)) {
            cJSON_AddItemToObject(one, "arguments", a);
            a = NULL;
            line = cJSON_PrintUnformatted(one);
        }
        cJSON_Delete(a);
        cJSON_Delete(one);
        char *joined = line ? join_text(text, "\n", line) : NULL;
        cJSON_free(line);
        if (!joined) {
            if (!line) free(text);
            serve_refuse(why, 500, "server_error", NULL, "no memory");
            return NULL;
        }
        text = joined;
    }
    return text ? text : join_text(NULL, "", "");
}

/* One message's role and text. Tool results (role tool, with their tool_call_id) keep their role:
 * ChatML writes any role name; an assistant turn's tool_calls follow its content as text. */
static int chat_message(const cJSON *msg, int i, const char **role, char **text,
                        serve_refusal *why) {
    const cJSON *rl = cJSON_GetObjectItemCaseSensitive(msg, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    int has_calls = calls && !cJSON_IsNull(calls);
    if (!cJSON_IsObject(msg) || !cJSON_IsString(rl))
        return BAD("messages", "'messages'[%d] must be an object with a string 'role'", i);
    const char *r = rl->valuestring;
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") &&
        strcmp(r, "developer") && strcmp(r, "tool"))
        return BAD("messages", "'messages'[%d].role '%.40s' is not system, developer, user, "
                               "assistant or tool", i, r);
    if (has_calls && strcmp(r, "assistant"))
        return BAD("messages", "'messages'[%d]: only assistant messages have tool_calls", i);
    if ((!content || cJSON_IsNull(content)) && !has_calls)
        return BAD("messages", "'messages'[%d] must have a 'content'%s", i,
                   strcmp(r, "assistant") ? "" : " or 'tool_calls'");
    *role = strcmp(r, "developer") ? r : "system";
    *text = content && !cJSON_IsNull(content) ? message_content(content, i, why)
                                              : join_text(NULL, "", "");
    if (!*text) return why->status ? -1 : serve_refuse(why, 500, "server_error", NULL, "no memory");
    if (!has_calls) return 0;
    char *ct = tool_calls_text(calls, i, why);
    if (!ct) return -1;
    *text = join_text(*text, "\n", ct);
    free(ct);
    return *text ? 0 : serve_refuse(why, 500, "server_error", NULL, "no memory");
}

/* The conversation's tokens in the model's chat template: only the template's own markers are
 * special tokens; each message's content is text, whatever it contains (else a client could
 * close its turn and open a system turn with "<|im_start|>" in its content). tool_prompt (may
 * be NULL): the tools' description, appended to the first message when it is a system one,
 * else a system message of its own before the others. */
static int encode_chat(const cJSON *root, const specd_tokenizer *tok, const char *tool_prompt,
                       serve_prompt *r, serve_refusal *why) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!msgs) return BAD("messages", "'messages' is required");
    int n_in = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : -1;
    if (n_in <= 0) return BAD("messages", "'messages' must be a non-empty array");
    int n = n_in + (tool_prompt ? 1 : 0); /* room for the tools' own system message */
    specd_chat_message *m = calloc((size_t)n, sizeof *m);
    char **contents = calloc((size_t)n, sizeof *contents);
    int rc = -1;
    if (!m || !contents) goto done;
    int k = 0;
    for (int i = 0; i < n_in; i++, k++) {
        if (chat_message(cJSON_GetArrayItem(msgs, i), i, &m[k].role, &contents[k], why))
            goto done;
        if (tool_prompt && i == 0) {
            if (!strcmp(m[0].role, "system")) {
                if (!(contents[0] = join_text(contents[0], "\n\n", tool_prompt))) goto done;
                n--;
            } else { /* the tools' system message first */
                m[1] = m[0];
                contents[1] = contents[0];
                m[0].role = "system";
                if (!(contents[0] = join_text(NULL, "", tool_prompt))) goto done;
                k++;
            }
        }
    }
    for (int i = 0; i < n; i++) m[i].content = contents[i];
    specd_error err;
    size_t need = 0;
    specd_tokenizer_encode_chat(tok, m, (size_t)n, 1, SPECD_TOKENIZE_ADD_SPECIAL, NULL, 0, &need,
                                NULL);
    if (need == 0) {
        BAD("messages", "'messages' encode to no tokens");
        goto done;
    }
    if (!(r->ids = malloc(need * sizeof *r->ids))) goto done;
    if (specd_tokenizer_encode_chat(tok, m, (size_t)n, 1, SPECD_TOKENIZE_ADD_SPECIAL, r->ids,
                                    need, &need, &err) != SPECD_OK) {
        BAD("messages", "chat template: %s", err.message);
        goto done;
    }
    r->n = (int64_t)need;
    rc = 0;
done:
    if (contents)
        for (int i = 0; i < n_in + (tool_prompt ? 1 : 0); i++) free(contents[i]);
    free(contents);
    free(m);
    if (rc && why->status == 0) serve_refuse(why, 500, "server_error", NULL, "no memory");
    return rc;
}

static int encode(const specd_tokenizer *tok, const char *text, size_t len, uint32_t flags,
                  serve_prompt *r, const char *param, serve_refusal *why) {
    specd_error err;
    size_t need = 0;
    specd_tokenizer_encode(tok, text, len, flags, NULL, 0, &need, NULL);
    if (need == 0) return BAD(param, "'%s' encodes to no tokens", param);
    r->ids = malloc(need * sizeof *r->ids);
    if (!r->ids) return serve_refuse(why, 500, "server_error", NULL, "no memory");
    if (specd_tokenizer_encode(tok, text, len, flags, r->ids, need, &need, &err) != SPECD_OK)
        return BAD(param, "cannot encode '%s': %s", param, err.message);
    r->n = (int64_t)need;
    return 0;
}

/* A token-id prompt: a non-empty array of ids in the vocabulary; its text (for echo) is its
 * decoding, control tokens as their text. */
static int prompt_ids(const cJSON *a, const specd_tokenizer *tok, serve_prompt *r,
                      serve_refusal *why) {
    int n = cJSON_GetArraySize(a);
    int32_t n_vocab = specd_tokenizer_vocab_size(tok);
    if (n == 0) return BAD("prompt", "'prompt' has no tokens");
    if (!(r->ids = malloc((size_t)n * sizeof *r->ids)))
        return serve_refuse(why, 500, "server_error", NULL, "no memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(v >= 0 && v < n_vocab && v == floor(v)))
            return BAD("prompt", "'prompt'[%lld] is not a token id in [0, %d)", (long long)r->n,
                       n_vocab);
        r->ids[r->n++] = (int32_t)v;
    }
    size_t need = 0;
    specd_tokenizer_decode(tok, r->ids, (size_t)n, SPECD_DETOKENIZE_RENDER_SPECIAL, NULL, 0,
                           &need, NULL);
    if (!(r->text = malloc(need + 1)) ||
        specd_tokenizer_decode(tok, r->ids, (size_t)n, SPECD_DETOKENIZE_RENDER_SPECIAL, r->text,
                               need, &need, NULL) != SPECD_OK)
        return serve_refuse(why, 500, "server_error", NULL, "no memory");
    r->text[need] = '\0';
    r->text_len = need;
    return 0;
}

/* One prompt of the batch: a string (the raw form: special-token texts in it are parsed, which
 * the chat endpoint never does) or an array of token ids. */
static int one_prompt(const cJSON *p, const specd_tokenizer *tok, serve_prompt *r,
                      serve_refusal *why) {
    if (cJSON_IsArray(p)) return prompt_ids(p, tok, r, why);
    size_t pl = strlen(p->valuestring);
    if (encode(tok, p->valuestring, pl, SPECD_TOKENIZE_ADD_SPECIAL | SPECD_TOKENIZE_PARSE_SPECIAL,
               r, "prompt", why))
        return -1;
    if (!(r->text = dup_n(p->valuestring, pl)))
        return serve_refuse(why, 500, "server_error", NULL, "no memory");
    r->text_len = pl;
    return 0;
}

/* prompt: a string, an array of token ids, or a batch: an array of strings or of token-id arrays
 * (lm-evaluation-harness sends its prompts so), each prompt its own choices. */
static int parse_prompt(const cJSON *root, const specd_tokenizer *tok, serve_request *r,
                        serve_refusal *why) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p) return BAD("prompt", "'prompt' is required");
    int batch = cJSON_IsArray(p) && p->child && !cJSON_IsNumber(p->child);
    if (!batch && !cJSON_IsString(p) && !cJSON_IsArray(p))
        return BAD("prompt", "'prompt' must be a string, an array of token ids, or an array of "
                             "those");
    int n = batch ? cJSON_GetArraySize(p) : 1;
    if (n > SERVE_MAX_CHOICES)
        return BAD("prompt", "'prompt' holds %d prompts; at most %d", n, SERVE_MAX_CHOICES);
    if (!(r->prompts = calloc((size_t)n, sizeof *r->prompts)))
        return serve_refuse(why, 500, "server_error", NULL, "no memory");
    r->n_prompts = n;
    const cJSON *e = batch ? p->child : p;
    for (int i = 0; i < n; i++, e = e->next) {
        if (batch && !cJSON_IsString(e) && !(cJSON_IsArray(e) && (!e->child ||
                                                                   cJSON_IsNumber(e->child))))
            return BAD("prompt", "'prompt'[%d]: a batch holds strings or arrays of token ids", i);
        if (one_prompt(e, tok, &r->prompts[i], why)) return -1;
    }
    return 0;
}

/* policy, policy_options and draft_max: the policy must be registered, its options may not
 * name files (paths are the operator's to choose, with --policy at start), and draft_max
 * becomes the k= option of the policies that have one. */
/* A client's policy options: "key=number,..." only. Every key naming a file (a draft model, an
 * adapter) or an endpoint takes a string, so numbers-only keeps the server's files the operator's
 * to name, without a list of such keys to keep in step with the policies. */
static int numeric_options(const char *s) {
    while (*s) {
        const char *eq = strchr(s, '=');
        if (!eq || eq == s) return 0;
        char *end;
        strtod(eq + 1, &end);
        if (end == eq + 1 || (*end && *end != ',')) return 0;
        if (*end && !end[1]) return 0; /* a trailing comma */
        s = *end ? end + 1 : end;
    }
    return 1;
}

static int parse_policy(const cJSON *root, const serve_limits *lim, serve_request *r,
                        serve_refusal *why) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "policy");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "policy_options");
    const char *name = lim->default_policy ? lim->default_policy : "none";
    const char *opts = lim->default_policy_options;
    if (p && !cJSON_IsNull(p)) {
        if (!cJSON_IsString(p)) return BAD("policy", "'policy' must be a string");
        name = p->valuestring;
        opts = NULL; /* the default's options belong to the default policy */
    }
    if (!specd_policy_find(name)) return BAD("policy", "unknown policy '%.64s'", name);
    if (o && !cJSON_IsNull(o)) {
        if (!cJSON_IsString(o)) return BAD("policy_options", "'policy_options' must be a string");
        if (!numeric_options(o->valuestring))
            return BAD("policy_options", "'policy_options' takes numeric key=value pairs only: "
                                         "files and endpoints are the operator's (specd serve "
                                         "--policy)");
        opts = o->valuestring;
    }
    double k = 0;
    int has_k = 0;
    if (get_number(root, "draft_max", 1, lim->max_draft, 1, &k, &has_k, why)) return -1;
    /* (plain decoding drafts nothing: any draft_max is moot there, so a client may send one
     * request body to both and compare) */
    if (has_k && !strcmp(name, "none")) has_k = 0;
    if (has_k && strcmp(name, "ngram") && strcmp(name, "draft") && strcmp(name, "layerskip"))
        return BAD("draft_max", "'draft_max' applies to ngram, draft and layerskip, not '%.64s'",
                   name);
    r->policy = dup_n(name, strlen(name));
    size_t ol = opts ? strlen(opts) : 0;
    r->policy_options = malloc(ol + 32);
    if (!r->policy || !r->policy_options)
        return serve_refuse(why, 500, "server_error", NULL, "no memory");
    snprintf(r->policy_options, ol + 32, "%s", opts ? opts : "");
    if (has_k) /* a later key wins in the policies' option parser */
        snprintf(r->policy_options + ol, 32, "%sk=%d", ol ? "," : "", (int)k);
    return 0;
}

static int parse_sampling(const cJSON *root, serve_request *r, serve_refusal *why) {
    double v;
    int has;
    r->sampling = specd_sampling_default_params();
    if (get_number(root, "temperature", 0, 2, 0, &v, &has, why)) return -1;
    if (has) r->sampling.temperature = v < SERVE_GREEDY_BELOW ? 0.0f : (float)v;
    if (get_number(root, "top_p", 0, 1, 0, &v, &has, why)) return -1;
    if (has) {
        if (v <= 0) return BAD("top_p", "'top_p' must be in (0, 1]");
        r->sampling.top_p = (float)v;
    }
    if (get_number(root, "top_k", -1, 1 << 30, 1, &v, &has, why)) return -1;
    if (has) r->sampling.top_k = v < 0 ? 0 : (int32_t)v; /* -1 is vLLM's "off" */
    if (get_number(root, "min_p", 0, 1, 0, &v, &has, why)) return -1;
    if (has) {
        if (v >= 1) return BAD("min_p", "'min_p' must be in [0, 1)");
        r->sampling.min_p = (float)v;
    }
    /* Up to 2^53: the largest integer a JSON number carries exactly in every client. */
    if (get_number(root, "seed", 0, 9007199254740992.0, 1, &v, &r->has_seed, why)) return -1;
    if (r->has_seed) r->seed = (uint64_t)v;
    return 0;
}

/* The fields each endpoint reads (besides specd's own, below). */
static const char *const common_fields[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stream",
    "stream_options", "n", "logit_bias", "logprobs", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "policy", "policy_options", "draft_max", "adaptive", NULL};
static const char *const chat_fields[] = {"messages", "max_completion_tokens", "top_logprobs",
                                          NULL};
static const char *const completion_fields[] = {"prompt", "echo", "best_of", "suffix", NULL};
/* OpenAI fields accepted and ignored because they change nothing a client gets back here:
 * user (the end user's id, for the provider's abuse monitoring), parallel_tool_calls (an answer
 * here is at most one call, so there are none to run in parallel), store (checked: false only, since
 * nothing is stored). Listed in docs/serving.md. */
static const char *const ignored_fields[] = {"user", "parallel_tool_calls", "store", NULL};

static int listed(const char *const *list, const char *name) {
    for (; *list; list++)
        if (!strcmp(*list, name)) return 1;
    return 0;
}

static int check_fields(const cJSON *root, int chat, serve_refusal *why) {
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        const char *name = f->string;
        if (listed(common_fields, name) || listed(chat ? chat_fields : completion_fields, name) ||
            serve_structured_field(name)) /* serve_structured_parse says which endpoint */
            continue;
        if (listed(ignored_fields, name)) {
            if (!strcmp(name, "store") && cJSON_IsTrue(f))
                return BAD("store", "'store' true is not supported: this server stores nothing");
            continue;
        }
        return BAD(name, "'%.32s' is not supported by this server%s", name,
                   listed(chat ? completion_fields : chat_fields, name)
                       ? (chat ? " on /v1/chat/completions (it is a /v1/completions field)"
                               : " on /v1/completions (it is a /v1/chat/completions field)")
                       : "");
    }
    return 0;
}

/* cJSON keeps strings NUL-terminated, so a \u0000 escape would silently cut a prompt, a message
 * or a stop string: such a request is refused instead, naming the top-level field that holds it.
 * Scans the (already parsed, so well-formed) body; returns 1 with name filled when found. */
static int nul_escape_field(const char *b, size_t len, char *name, size_t cap) {
    int depth = 0, in_str = 0, key_next = 0; /* key_next: the next string at depth 1 is a key */
    size_t str0 = 0, key0 = 0, key_len = 0;
    for (size_t i = 0; i < len; i++) {
        char c = b[i];
        if (in_str) {
            if (c == '\\') {
                if (i + 5 < len && !memcmp(b + i + 1, "u0000", 5)) {
                    size_t n = key_len < cap ? key_len : cap - 1;
                    memcpy(name, b + key0, n);
                    name[n] = '\0';
                    return 1;
                }
                i++; /* the escaped character */
            } else if (c == '"') {
                in_str = 0;
                if (depth == 1 && key_next) key0 = str0, key_len = i - str0, key_next = 0;
            }
            continue;
        }
        if (c == '"') in_str = 1, str0 = i + 1;
        else if (c == '{' || c == '[') key_next = ++depth == 1;
        else if (c == '}' || c == ']') depth--;
        else if (c == ',' && depth == 1) key_next = 1;
    }
    return 0;
}

/* logit_bias: {"token id": bias in [-100, 100]}, added to the target's logits before sampling
 * (specd/sampling.h step 1), so it shapes both the tokens and their verification. */
static int parse_logit_bias(const cJSON *root, const specd_tokenizer *tok, serve_request *r,
                            serve_refusal *why) {
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (!lb || cJSON_IsNull(lb)) return 0;
    if (!cJSON_IsObject(lb))
        return BAD("logit_bias", "'logit_bias' must be an object of token id -> bias");
    int n = cJSON_GetArraySize(lb);
    if (n > SERVE_MAX_LOGIT_BIAS)
        return BAD("logit_bias", "'logit_bias' has %d entries; at most %d", n,
                   SERVE_MAX_LOGIT_BIAS);
    if (n == 0) return 0;
    if (!(r->bias = calloc((size_t)n, sizeof *r->bias)))
        return serve_refuse(why, 500, "server_error", NULL, "no memory");
    int32_t n_vocab = specd_tokenizer_vocab_size(tok);
    const cJSON *e;
    cJSON_ArrayForEach(e, lb) {
        const char *k = e->string;
        char *end;
        long id = strtol(k, &end, 10);
        if (!*k || *end || k[0] == '-' || k[0] == '+' || k[0] == ' ' || id < 0 || id >= n_vocab)
            return BAD("logit_bias", "'logit_bias' key '%.24s' is not a token id in [0, %d)", k,
                       n_vocab);
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < -100 ||
            e->valuedouble > 100)
            return BAD("logit_bias", "'logit_bias'['%.24s'] must be a number in [-100, 100]", k);
        for (size_t j = 0; j < r->n_bias; j++)
            if (r->bias[j].token == (int32_t)id)
                return BAD("logit_bias", "'logit_bias' names token %ld twice", id);
        r->bias[r->n_bias++] = (specd_logit_bias){.token = (int32_t)id,
                                                  .bias = (float)e->valuedouble};
    }
    r->sampling.bias = r->bias;
    r->sampling.n_bias = r->n_bias;
    return 0;
}

/* presence_penalty and frequency_penalty (OpenAI's, [-2, 2]) and repetition_penalty
 * (llama-server's and vLLM's, (0, 10]): a row processor in the session (specd/processor.h), so
 * every verified row gets them and speculation stays lossless. */
static int parse_penalties(const cJSON *root, serve_request *r, serve_refusal *why) {
    double v;
    int has;
    r->penalties = (specd_penalties_params){0, 0, 1};
    if (get_number(root, "presence_penalty", -2, 2, 0, &v, &has, why)) return -1;
    if (has) r->penalties.presence_penalty = (float)v;
    if (get_number(root, "frequency_penalty", -2, 2, 0, &v, &has, why)) return -1;
    if (has) r->penalties.frequency_penalty = (float)v;
    if (get_number(root, "repetition_penalty", 0, 10, 0, &v, &has, why)) return -1;
    if (has && v <= 0) return BAD("repetition_penalty", "'repetition_penalty' must be in (0, 10]");
    if (has) r->penalties.repetition_penalty = (float)v;
    return 0;
}

/* OpenAI fields taken at their neutral value only: a request that needs them changed is refused
 * (naming the field) rather than answered as if it had not asked. */
static int parse_neutral(const cJSON *root, int chat, serve_request *r, serve_refusal *why) {
    double v;
    int has;
    if (get_number(root, "n", 1, SERVE_MAX_CHOICES, 1, &v, &has, why)) return -1;
    r->n = has ? (int)v : 1;
    if (parse_penalties(root, r, why)) return -1;
    if (chat) return 0;
    if (get_number(root, "best_of", 1, 1e9, 1, &v, &has, why)) return -1;
    /* best_of = n is n choices all returned: the same thing */
    if (has && v != r->n) return BAD("best_of", "'best_of' other than n is not supported");
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(root, "suffix");
    if (sf && !cJSON_IsNull(sf) && !(cJSON_IsString(sf) && !sf->valuestring[0]))
        return BAD("suffix", "'suffix' is not supported (no insertion mode)");
    return 0;
}

/* The structured-output fields, and which of them holds the constraint (named by a grammar the
 * server cannot compile). */
static int parse_structured(const cJSON *root, int chat, serve_request *r, serve_refusal *why) {
    if (!(r->structured = calloc(1, sizeof *r->structured)))
        return serve_refuse(why, 500, "server_error", NULL, "no memory");
    if (serve_structured_parse(root, chat, r->structured, why)) return -1;
    const serve_structured *st = r->structured;
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(root, "json_schema");
    const char *param = st->kind == SERVE_CONSTRAINT_NONE    ? ""
                        : st->kind == SERVE_CONSTRAINT_GBNF  ? "grammar"
                        : st->tool_mode == SERVE_TOOLS_FORCED ? "tools"
                        : js && !cJSON_IsNull(js)            ? "json_schema"
                                                             : "response_format";
    snprintf(r->constraint_param, sizeof r->constraint_param, "%s", param);
    return 0;
}

/* logprobs, top_logprobs (chat) and echo (completions). */
static int parse_logprobs(const cJSON *root, int chat, serve_request *r, serve_refusal *why) {
    double v;
    int has;
    if (chat) {
        if (get_bool(root, "logprobs", &r->logprobs, why)) return -1;
        if (get_number(root, "top_logprobs", 0, SERVE_MAX_TOP_LOGPROBS, 1, &v, &has, why))
            return -1;
        if (has && !r->logprobs)
            return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (has) r->top_logprobs = (int)v;
    } else {
        if (get_number(root, "logprobs", 0, 5, 1, &v, &has, why)) return -1;
        r->logprobs = has;
        if (has) r->top_logprobs = (int)v;
        if (get_bool(root, "echo", &r->echo, why)) return -1;
    }
    if (r->stream && r->echo) return BAD("echo", "echo with stream not supported");
    return 0;
}

int serve_request_parse(const char *body, size_t len, int chat, const serve_limits *lim,
                        const specd_tokenizer *tok, serve_request *out, serve_refusal *why) {
    memset(why, 0, sizeof *why);
    serve_request r = {.chat = chat, .max_tokens = lim->default_max_tokens, .adaptive = 1, .n = 1};
    int rc = -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        BAD(NULL, "the body is not valid JSON (near byte %zu)", at);
        goto fail;
    }
    for (; end && (size_t)(end - body) < len; end++)
        if (*end != ' ' && *end != '\n' && *end != '\r' && *end != '\t') {
            BAD(NULL, "the body has bytes after its JSON value (byte %zu)",
                (size_t)(end - body));
            goto fail;
        }
    if (!cJSON_IsObject(root)) {
        BAD(NULL, "the body must be a JSON object");
        goto fail;
    }
    char nul_in[40];
    if (nul_escape_field(body, len, nul_in, sizeof nul_in)) {
        BAD(nul_in, "'%s' contains a NUL character (\\u0000), which this server cannot carry",
            nul_in[0] ? nul_in : "the body");
        goto fail;
    }
    if (check_fields(root, chat, why)) goto fail;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) {
            BAD("model", "'model' must be a string");
            goto fail;
        }
        if (strcmp(model->valuestring, lim->model_id)) {
            serve_refuse(why, 404, "not_found_error", "model",
                         "the model '%.100s' does not exist; this server serves '%.100s'",
                         model->valuestring, lim->model_id);
            goto fail;
        }
    }
    double v;
    int has;
    if (parse_neutral(root, chat, &r, why)) goto fail;
    /* OpenAI's newer name for the same limit on the chat endpoint. */
    const char *mt = cJSON_GetObjectItemCaseSensitive(root, "max_completion_tokens") &&
                             !cJSON_GetObjectItemCaseSensitive(root, "max_tokens")
                         ? "max_completion_tokens"
                         : "max_tokens";
    if (get_number(root, mt, 0, 1e18, 1, &v, &has, why)) goto fail;
    if (has) {
        if (v > lim->max_tokens_cap) {
            BAD(mt, "'%s' is %.0f; this server allows at most %d", mt, v, lim->max_tokens_cap);
            goto fail;
        }
        r.max_tokens = (int32_t)v;
    }
    if (r.max_tokens > lim->max_tokens_cap) r.max_tokens = lim->max_tokens_cap;
    if (parse_sampling(root, &r, why) || parse_stop(root, &r, why) ||
        get_bool(root, "stream", &r.stream, why) || get_bool(root, "adaptive", &r.adaptive, why) ||
        parse_policy(root, lim, &r, why) || parse_logit_bias(root, tok, &r, why) ||
        parse_logprobs(root, chat, &r, why))
        goto fail;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) {
            BAD("stream_options", "'stream_options' must be an object");
            goto fail;
        }
        if (get_bool(so, "include_usage", &r.include_usage, why)) goto fail;
    }
    if (parse_structured(root, chat, &r, why)) goto fail;
    if (chat) {
        if (!(r.prompts = calloc(1, sizeof *r.prompts))) {
            serve_refuse(why, 500, "server_error", NULL, "no memory");
            goto fail;
        }
        r.n_prompts = 1;
        char *tools = serve_structured_tool_prompt(r.structured);
        if (!tools && r.structured->tool_mode != SERVE_TOOLS_OFF && r.structured->n_tools > 0) {
            serve_refuse(why, 500, "server_error", NULL, "no memory");
            goto fail;
        }
        int bad = encode_chat(root, tok, tools, &r.prompts[0], why);
        free(tools);
        if (bad) goto fail;
    } else {
        if (parse_prompt(root, tok, &r, why)) goto fail;
    }
    if ((int64_t)r.n_prompts * r.n > SERVE_MAX_CHOICES) {
        BAD("n", "%d prompts times n %d is %d choices; at most %d", r.n_prompts, r.n,
            r.n_prompts * r.n, SERVE_MAX_CHOICES);
        goto fail;
    }
    for (int i = 0; i < r.n_prompts; i++)
        if (r.prompts[i].n + r.max_tokens + lim->step_rows > lim->n_ctx) {
            BAD(chat ? "messages" : "prompt",
                "the prompt%s (%lld tokens) plus max_tokens (%d) does not fit the context of %d "
                "tokens per request (%d kept for a speculative step)",
                r.n_prompts > 1 ? " of a batch" : "", (long long)r.prompts[i].n, r.max_tokens,
                lim->n_ctx, lim->step_rows);
            goto fail;
        }
    rc = 0;
    *out = r;
fail:
    cJSON_Delete(root);
    if (rc) serve_request_free(&r);
    return rc;
}

void serve_request_free(serve_request *r) {
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].ids);
        free(r->prompts[i].text);
    }
    free(r->prompts);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->policy);
    free(r->policy_options);
    free(r->bias);
    serve_structured_free(r->structured);
    free(r->structured);
    memset(r, 0, sizeof *r);
}
