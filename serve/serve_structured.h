/* Structured output in an OpenAI-style request: what constrains the answer, and what turns an
 * answer into tool calls. Read from the request's JSON:
 *  - response_format: {type: text} (nothing), {type: json_object} (any JSON object; llama-server's
 *    optional `schema` inside it is honoured), {type: json_schema, json_schema: {name, schema,
 *    strict, description}};
 *  - grammar (llama-server's field): a GBNF grammar; json_schema (llama-server's field): a schema;
 *  - tools: [{type: function, function: {name, description, parameters}}] with tool_choice none,
 *    auto (the default when tools are given), required, or {type: function, function: {name}}.
 *    required and a named function constrain the answer to {"name": N, "arguments": {...}} with
 *    the arguments' schema; auto leaves the answer free and an answer of that shape becomes a
 *    tool call (a small model rarely chooses one by itself: a client that needs the call asks
 *    for it with required or a name).
 * At most one constraint per request: two are refused with the field named. The grammar itself
 * is compiled later (grammar/, against the model's vocabulary); this file only reads and
 * composes text. */
#ifndef SPECD_SERVE_STRUCTURED_H
#define SPECD_SERVE_STRUCTURED_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "serve/serve_request.h"

#define SERVE_MAX_TOOLS 64

typedef enum serve_constraint {
    SERVE_CONSTRAINT_NONE = 0,
    SERVE_CONSTRAINT_GBNF,        /* source is a GBNF grammar */
    SERVE_CONSTRAINT_JSON_SCHEMA  /* source is a JSON schema; NULL: any JSON object */
} serve_constraint;

typedef enum serve_tool_mode {
    SERVE_TOOLS_OFF = 0, /* no tools, or tool_choice none */
    SERVE_TOOLS_AUTO,    /* free answer; one of the call's shape becomes a call */
    SERVE_TOOLS_FORCED   /* required or named: the answer is a call */
} serve_tool_mode;

typedef struct serve_tool {
    char *name;        /* malloc'd */
    char *description; /* malloc'd, may be NULL */
    char *parameters;  /* the arguments' JSON schema as text (malloc'd): {"type":"object"} if none */
} serve_tool;

typedef struct serve_structured {
    serve_constraint kind;
    char *source; /* malloc'd, may be NULL (see kind) */
    serve_tool tools[SERVE_MAX_TOOLS];
    int n_tools;
    serve_tool_mode tool_mode;
    int forced_tool; /* the named tool's index, or -1 */
} serve_structured;

/* The request's structured-output fields (absent: kind NONE, tools OFF). chat: tools and
 * response_format are chat fields (grammar and json_schema are accepted on both endpoints, as
 * llama-server does). 0, or -1 with *why filled (400 naming the field). Release with
 * serve_structured_free, also after a failure. */
int serve_structured_parse(const cJSON *root, int chat, serve_structured *out, serve_refusal *why);
void serve_structured_free(serve_structured *s);

/* Whether name is one of the fields serve_structured_parse reads. */
int serve_structured_field(const char *name);

/* The system text that tells the model its tools (name, description, arguments' schema) and
 * the reply shape of a call; malloc'd, NULL when tools are off. */
char *serve_structured_tool_prompt(const serve_structured *s);

/* An answer as tool calls: when text is one JSON object {"name": a tool's name, "arguments":
 * {...}}, *calls gets OpenAI's tool_calls array (one call, id "call_" + id_seed in hex, arguments
 * as a JSON string) and 1 is returned; else 0 and *calls NULL. The caller owns *calls. */
int serve_structured_tool_calls(const serve_structured *s, const char *text, size_t len,
                                unsigned long long id_seed, cJSON **calls);

#endif
