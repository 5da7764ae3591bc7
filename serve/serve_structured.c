#include "serve/serve_structured.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(param, ...) serve_refuse(why, 400, "invalid_request_error", param, __VA_ARGS__)
#define NO_MEMORY() serve_refuse(why, 500, "server_error", NULL, "no memory")

static const char *const fields[] = {"response_format", "grammar", "json_schema", "tools",
                                     "tool_choice", NULL};

int serve_structured_field(const char *name) {
    for (const char *const *f = fields; *f; f++)
        if (!strcmp(*f, name)) return 1;
    return 0;
}

static char *dup_text(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* A schema given as an object (OpenAI) or as its JSON text (some clients send it so). */
static int take_schema(const cJSON *v, const char *param, char **out, serve_refusal *why) {
    if (cJSON_IsString(v)) {
        cJSON *parsed = cJSON_Parse(v->valuestring);
        int ok = cJSON_IsObject(parsed) || cJSON_IsBool(parsed);
        cJSON_Delete(parsed);
        if (!ok) return BAD(param, "'%s' must be a JSON schema (an object)", param);
        *out = dup_text(v->valuestring);
    } else if (cJSON_IsObject(v) || cJSON_IsBool(v)) {
        *out = cJSON_PrintUnformatted(v);
    } else {
        return BAD(param, "'%s' must be a JSON schema (an object)", param);
    }
    return *out ? 0 : NO_MEMORY();
}

static int set_kind(serve_structured *s, serve_constraint kind, const char *param,
                    serve_refusal *why) {
    if (s->kind != SERVE_CONSTRAINT_NONE)
        return BAD(param, "'%s' cannot be combined with another output constraint (response_format, "
                          "grammar, json_schema or forced tools: one per request)",
                   param);
    s->kind = kind;
    return 0;
}

static int parse_response_format(const cJSON *rf, serve_structured *s, serve_refusal *why) {
    if (!cJSON_IsObject(rf)) return BAD("response_format", "'response_format' must be an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsString(type))
        return BAD("response_format", "'response_format.type' must be a string");
    const char *t = type->valuestring;
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) {
        if (set_kind(s, SERVE_CONSTRAINT_JSON_SCHEMA, "response_format", why)) return -1;
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(rf, "schema"); /* llama-server */
        return schema ? take_schema(schema, "response_format", &s->source, why) : 0;
    }
    if (!strcmp(t, "json_schema")) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
        if (!cJSON_IsObject(js))
            return BAD("response_format", "'response_format.json_schema' must be an object with "
                                          "a 'schema'");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (!schema)
            return BAD("response_format", "'response_format.json_schema.schema' is missing");
        if (set_kind(s, SERVE_CONSTRAINT_JSON_SCHEMA, "response_format", why)) return -1;
        return take_schema(schema, "response_format", &s->source, why);
    }
    return BAD("response_format", "'response_format.type' must be text, json_object or "
                                  "json_schema, not '%.32s'",
               t);
}

static int parse_tool(const cJSON *item, serve_tool *tool, serve_refusal *why) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type");
    if (!cJSON_IsObject(item) || !cJSON_IsString(type) || strcmp(type->valuestring, "function"))
        return BAD("tools", "each of 'tools' must be {\"type\": \"function\", \"function\": {...}}");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(item, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring[0] ||
        strlen(name->valuestring) > 64)
        return BAD("tools", "a tool's 'function.name' must be a string of 1 to 64 characters");
    for (const char *c = name->valuestring; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-'))
            return BAD("tools", "a tool's name may hold a-z, A-Z, 0-9, _ and - only ('%.64s')",
                       name->valuestring);
    tool->name = dup_text(name->valuestring);
    if (!tool->name) return NO_MEMORY();
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
    if (desc && !cJSON_IsNull(desc)) {
        if (!cJSON_IsString(desc)) return BAD("tools", "a tool's 'description' must be a string");
        tool->description = dup_text(desc->valuestring);
        if (!tool->description) return NO_MEMORY();
    }
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    if (params && !cJSON_IsNull(params)) return take_schema(params, "tools", &tool->parameters, why);
    tool->parameters = dup_text("{\"type\":\"object\"}");
    return tool->parameters ? 0 : NO_MEMORY();
}

static int parse_tool_choice(const cJSON *tc, serve_structured *s, serve_refusal *why) {
    if (cJSON_IsString(tc)) {
        const char *v = tc->valuestring;
        if (!strcmp(v, "none")) s->tool_mode = SERVE_TOOLS_OFF;
        else if (!strcmp(v, "auto")) s->tool_mode = SERVE_TOOLS_AUTO;
        else if (!strcmp(v, "required")) s->tool_mode = SERVE_TOOLS_FORCED;
        else return BAD("tool_choice", "'tool_choice' must be none, auto, required or a function");
        return 0;
    }
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(name))
        return BAD("tool_choice", "'tool_choice' must be none, auto, required or "
                                  "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    for (int i = 0; i < s->n_tools; i++)
        if (!strcmp(s->tools[i].name, name->valuestring)) {
            s->tool_mode = SERVE_TOOLS_FORCED;
            s->forced_tool = i;
            return 0;
        }
    return BAD("tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'",
               name->valuestring);
}

/* {"name": N, "arguments": ARGS} for one tool, as schema text. */
static int append_call_schema(cJSON *any_of, const serve_tool *t) {
    cJSON *o = cJSON_CreateObject(), *props = cJSON_CreateObject(), *name = cJSON_CreateObject();
    cJSON *args = cJSON_Parse(t->parameters), *req = cJSON_CreateArray();
    if (!o || !props || !name || !args || !req) {
        cJSON *parts[] = {o, props, name, args, req};
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) cJSON_Delete(parts[i]);
        return -1;
    }
    cJSON_AddStringToObject(o, "type", "object");
    cJSON_AddStringToObject(name, "const", t->name);
    cJSON_AddItemToObject(props, "name", name);
    cJSON_AddItemToObject(props, "arguments", args);
    cJSON_AddItemToObject(o, "properties", props);
    cJSON_AddItemToArray(req, cJSON_CreateString("name"));
    cJSON_AddItemToArray(req, cJSON_CreateString("arguments"));
    cJSON_AddItemToObject(o, "required", req);
    cJSON_AddFalseToObject(o, "additionalProperties");
    cJSON_AddItemToArray(any_of, o);
    return 0;
}

static int forced_schema(serve_structured *s, serve_refusal *why) {
    cJSON *root = cJSON_CreateObject(), *any_of = cJSON_CreateArray();
    if (!root || !any_of) {
        cJSON_Delete(root);
        cJSON_Delete(any_of);
        return NO_MEMORY();
    }
    cJSON_AddItemToObject(root, "anyOf", any_of);
    for (int i = 0; i < s->n_tools; i++)
        if ((s->forced_tool < 0 || s->forced_tool == i) && append_call_schema(any_of, &s->tools[i])) {
            cJSON_Delete(root);
            return NO_MEMORY();
        }
    s->source = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s->source) return NO_MEMORY();
    s->kind = SERVE_CONSTRAINT_JSON_SCHEMA;
    return 0;
}

static int parse_tools(const cJSON *root, serve_structured *s, serve_refusal *why) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (!tools || cJSON_IsNull(tools)) {
        if (tc && !cJSON_IsNull(tc) && !(cJSON_IsString(tc) && !strcmp(tc->valuestring, "none")))
            return BAD("tool_choice", "'tool_choice' needs 'tools'");
        return 0;
    }
    if (!cJSON_IsArray(tools)) return BAD("tools", "'tools' must be an array");
    int n = cJSON_GetArraySize(tools);
    if (n > SERVE_MAX_TOOLS) return BAD("tools", "at most %d tools", SERVE_MAX_TOOLS);
    const cJSON *item;
    cJSON_ArrayForEach(item, tools) {
        if (parse_tool(item, &s->tools[s->n_tools++], why)) return -1;
        for (int i = 0; i + 1 < s->n_tools; i++)
            if (!strcmp(s->tools[i].name, s->tools[s->n_tools - 1].name))
                return BAD("tools", "two tools are named '%.64s'", s->tools[i].name);
    }
    if (s->n_tools == 0) return 0;
    s->tool_mode = SERVE_TOOLS_AUTO;
    if (tc && !cJSON_IsNull(tc) && parse_tool_choice(tc, s, why)) return -1;
    if (s->tool_mode != SERVE_TOOLS_FORCED) return 0;
    if (s->kind != SERVE_CONSTRAINT_NONE)
        return BAD("tool_choice", "a forced tool call cannot be combined with response_format, "
                                  "grammar or json_schema");
    return forced_schema(s, why);
}

int serve_structured_parse(const cJSON *root, int chat, serve_structured *out, serve_refusal *why) {
    memset(out, 0, sizeof *out);
    out->forced_tool = -1;
    const cJSON *f;
    if (chat && (f = cJSON_GetObjectItemCaseSensitive(root, "response_format")) &&
        !cJSON_IsNull(f) && parse_response_format(f, out, why))
        return -1;
    if ((f = cJSON_GetObjectItemCaseSensitive(root, "grammar")) && !cJSON_IsNull(f)) {
        if (!cJSON_IsString(f) || !f->valuestring[0])
            return BAD("grammar", "'grammar' must be a GBNF grammar (a non-empty string)");
        if (set_kind(out, SERVE_CONSTRAINT_GBNF, "grammar", why)) return -1;
        if (!(out->source = dup_text(f->valuestring))) return NO_MEMORY();
    }
    if ((f = cJSON_GetObjectItemCaseSensitive(root, "json_schema")) && !cJSON_IsNull(f)) {
        if (set_kind(out, SERVE_CONSTRAINT_JSON_SCHEMA, "json_schema", why)) return -1;
        if (take_schema(f, "json_schema", &out->source, why)) return -1;
    }
    if (!chat) {
        if (cJSON_GetObjectItemCaseSensitive(root, "response_format"))
            return BAD("response_format", "'response_format' is a /v1/chat/completions field "
                                          "(here: 'grammar' or 'json_schema')");
        if (cJSON_GetObjectItemCaseSensitive(root, "tools"))
            return BAD("tools", "'tools' is a /v1/chat/completions field");
        return 0;
    }
    return parse_tools(root, out, why);
}

void serve_structured_free(serve_structured *s) {
    if (!s) return;
    free(s->source);
    for (int i = 0; i < s->n_tools; i++) {
        free(s->tools[i].name);
        free(s->tools[i].description);
        free(s->tools[i].parameters);
    }
    memset(s, 0, sizeof *s);
    s->forced_tool = -1;
}

/* A growing text buffer; on allocation failure it stays failed and the caller gets NULL. */
typedef struct text_buf {
    char *p;
    size_t n, cap;
    int failed;
} text_buf;

static void put(text_buf *b, const char *s) {
    size_t k = strlen(s);
    if (b->failed) return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 512) + k;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, k + 1);
    b->n += k;
}

char *serve_structured_tool_prompt(const serve_structured *s) {
    if (s->tool_mode == SERVE_TOOLS_OFF || s->n_tools == 0) return NULL;
    text_buf b = {0};
    put(&b, s->tool_mode == SERVE_TOOLS_FORCED
                ? "Call one of these functions. Reply with only a JSON object of the form "
                  "{\"name\": <function name>, \"arguments\": <its arguments>}.\n"
                : "You may call one of these functions. To call one, reply with only a JSON "
                  "object of the form {\"name\": <function name>, \"arguments\": <its "
                  "arguments>}; otherwise answer normally.\n");
    for (int i = 0; i < s->n_tools; i++) {
        if (s->forced_tool >= 0 && s->forced_tool != i) continue;
        put(&b, "- ");
        put(&b, s->tools[i].name);
        if (s->tools[i].description) {
            put(&b, ": ");
            put(&b, s->tools[i].description);
        }
        put(&b, "\n  arguments schema: ");
        put(&b, s->tools[i].parameters);
        put(&b, "\n");
    }
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

int serve_structured_tool_calls(const serve_structured *s, const char *text, size_t len,
                                unsigned long long id_seed, cJSON **calls) {
    *calls = NULL;
    if (s->tool_mode == SERVE_TOOLS_OFF || s->n_tools == 0) return 0;
    const char *end = NULL;
    cJSON *answer = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!cJSON_IsObject(answer)) {
        cJSON_Delete(answer);
        return 0;
    }
    for (; end && end < text + len; end++) /* trailing whitespace only */
        if (*end != ' ' && *end != '\n' && *end != '\t' && *end != '\r') {
            cJSON_Delete(answer);
            return 0;
        }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(answer, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(answer, "arguments");
    int known = 0;
    for (int i = 0; cJSON_IsString(name) && i < s->n_tools; i++)
        known |= (s->forced_tool < 0 || s->forced_tool == i) &&
                 !strcmp(s->tools[i].name, name->valuestring);
    char *args_text = known && cJSON_IsObject(args) ? cJSON_PrintUnformatted(args) : NULL;
    if (!args_text) {
        cJSON_Delete(answer);
        return 0;
    }
    char id[40];
    snprintf(id, sizeof id, "call_%016llx", id_seed);
    cJSON *arr = cJSON_CreateArray(), *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    if (arr && call && fn) {
        cJSON_AddStringToObject(call, "id", id);
        cJSON_AddStringToObject(call, "type", "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        cJSON_AddStringToObject(fn, "arguments", args_text);
        cJSON_AddItemToObject(call, "function", fn);
        cJSON_AddItemToArray(arr, call);
        fn = call = NULL;
    } else {
        cJSON_Delete(arr);
        arr = NULL;
    }
    cJSON_Delete(call);
    cJSON_Delete(fn);
    cJSON_free(args_text);
    cJSON_Delete(answer);
    *calls = arr;
    return arr != NULL;
}
