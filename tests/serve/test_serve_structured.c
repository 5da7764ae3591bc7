/* Structured-output fields of a request (serve/serve_structured.h): response_format's three
 * types, llama-server's grammar and json_schema, tools with each tool_choice, the refusals that
 * name their field, the forced call's schema, the tool prompt, and an answer read back as
 * OpenAI tool_calls. Request shapes are those the openai and langchain clients send. */
#include "test_main.h"

#include "serve/serve_structured.h"

#include <string.h>

static int parse(const char *json, int chat, serve_structured *s, serve_refusal *why) {
    cJSON *root = cJSON_Parse(json);
    assert_non_null(root);
    memset(why, 0, sizeof *why);
    int rc = serve_structured_parse(root, chat, s, why);
    cJSON_Delete(root);
    return rc;
}

static void refused(const char *json, int chat, const char *param, const char *words) {
    serve_structured s;
    serve_refusal why;
    assert_int_equal(parse(json, chat, &s, &why), -1);
    serve_structured_free(&s);
    assert_int_equal(why.status, 400);
    assert_string_equal(why.param, param);
    if (!strstr(why.message, words)) fail_msg("'%s' lacks '%s'", why.message, words);
}

static const char *const weather_tools =
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"description\": \"Weather of a city\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"zone\": {\"type\": \"string\"}}}}}]";

static void test_response_format(void **state) {
    (void)state;
    serve_structured s;
    serve_refusal why;
    assert_int_equal(parse("{\"response_format\": {\"type\": \"text\"}}", 1, &s, &why), 0);
    assert_int_equal(s.kind, SERVE_CONSTRAINT_NONE);
    serve_structured_free(&s);
    assert_int_equal(parse("{\"response_format\": {\"type\": \"json_object\"}}", 1, &s, &why), 0);
    assert_int_equal(s.kind, SERVE_CONSTRAINT_JSON_SCHEMA);
    assert_null(s.source); /* any object */
    serve_structured_free(&s);
    /* the shape openai's client.beta.chat.completions.parse sends for a Pydantic model */
    assert_int_equal(parse("{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                           "{\"name\": \"Person\", \"strict\": true, \"schema\": {\"type\": "
                           "\"object\", \"properties\": {\"age\": {\"type\": \"integer\"}}, "
                           "\"required\": [\"age\"], \"additionalProperties\": false}}}}",
                           1, &s, &why),
                     0);
    assert_int_equal(s.kind, SERVE_CONSTRAINT_JSON_SCHEMA);
    assert_non_null(strstr(s.source, "\"additionalProperties\":false"));
    assert_non_null(strstr(s.source, "\"required\":[\"age\"]"));
    serve_structured_free(&s);
    refused("{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\"}}}",
            1, "response_format", "schema' is missing");
    refused("{\"response_format\": {\"type\": \"yaml\"}}", 1, "response_format", "'yaml'");
    refused("{\"response_format\": \"json\"}", 1, "response_format", "must be an object");
    refused("{\"response_format\": {\"type\": \"json_object\"}}", 0, "response_format",
            "chat/completions field");
}

static void test_grammar_fields(void **state) {
    (void)state;
    serve_structured s;
    serve_refusal why;
    assert_int_equal(parse("{\"grammar\": \"root ::= \\\"yes\\\" | \\\"no\\\"\"}", 0, &s, &why), 0);
    assert_int_equal(s.kind, SERVE_CONSTRAINT_GBNF);
    assert_string_equal(s.source, "root ::= \"yes\" | \"no\"");
    serve_structured_free(&s);
    assert_int_equal(parse("{\"json_schema\": {\"type\": \"array\"}}", 0, &s, &why), 0);
    assert_int_equal(s.kind, SERVE_CONSTRAINT_JSON_SCHEMA);
    assert_string_equal(s.source, "{\"type\":\"array\"}");
    serve_structured_free(&s);
    /* a schema sent as its JSON text */
    assert_int_equal(parse("{\"json_schema\": \"{\\\"type\\\": \\\"object\\\"}\"}", 0, &s, &why), 0);
    assert_string_equal(s.source, "{\"type\": \"object\"}");
    serve_structured_free(&s);
    refused("{\"grammar\": \"\"}", 0, "grammar", "non-empty");
    refused("{\"json_schema\": \"not json\"}", 0, "json_schema", "JSON schema");
    refused("{\"response_format\": {\"type\": \"json_object\"}, \"grammar\": \"root ::= \\\"a\\\"\"}",
            1, "grammar", "one per request");
    assert_true(serve_structured_field("tool_choice"));
    assert_false(serve_structured_field("tools_choice"));
}

static void test_tools(void **state) {
    (void)state;
    serve_structured s;
    serve_refusal why;
    char json[2048];
    /* bind_tools without tool_choice: auto, nothing constrained */
    snprintf(json, sizeof json, "{%s}", weather_tools);
    assert_int_equal(parse(json, 1, &s, &why), 0);
    assert_int_equal(s.n_tools, 2);
    assert_int_equal(s.tool_mode, SERVE_TOOLS_AUTO);
    assert_int_equal(s.kind, SERVE_CONSTRAINT_NONE);
    char *prompt = serve_structured_tool_prompt(&s);
    assert_non_null(strstr(prompt, "get_weather: Weather of a city"));
    assert_non_null(strstr(prompt, "\"city\""));
    assert_non_null(strstr(prompt, "get_time"));
    free(prompt);
    serve_structured_free(&s);
    /* required: every tool's call shape */
    snprintf(json, sizeof json, "{%s, \"tool_choice\": \"required\"}", weather_tools);
    assert_int_equal(parse(json, 1, &s, &why), 0);
    assert_int_equal(s.tool_mode, SERVE_TOOLS_FORCED);
    assert_int_equal(s.kind, SERVE_CONSTRAINT_JSON_SCHEMA);
    assert_non_null(strstr(s.source, "\"anyOf\""));
    assert_non_null(strstr(s.source, "{\"const\":\"get_weather\"}"));
    assert_non_null(strstr(s.source, "{\"const\":\"get_time\"}"));
    serve_structured_free(&s);
    /* named (langchain's with_structured_output(method="function_calling") sends this) */
    snprintf(json, sizeof json,
             "{%s, \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": "
             "\"get_time\"}}}",
             weather_tools);
    assert_int_equal(parse(json, 1, &s, &why), 0);
    assert_int_equal(s.forced_tool, 1);
    assert_null(strstr(s.source, "get_weather"));
    prompt = serve_structured_tool_prompt(&s);
    assert_null(strstr(prompt, "get_weather"));
    free(prompt);
    serve_structured_free(&s);
    snprintf(json, sizeof json, "{%s, \"tool_choice\": \"none\"}", weather_tools);
    assert_int_equal(parse(json, 1, &s, &why), 0);
    assert_int_equal(s.tool_mode, SERVE_TOOLS_OFF);
    assert_null(serve_structured_tool_prompt(&s));
    serve_structured_free(&s);
    snprintf(json, sizeof json,
             "{%s, \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"x\"}}}",
             weather_tools);
    refused(json, 1, "tool_choice", "not in 'tools'");
    refused("{\"tool_choice\": \"required\"}", 1, "tool_choice", "needs 'tools'");
    refused("{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}", 1,
            "tools", "may hold");
    refused("{\"tools\": [{\"type\": \"retrieval\"}]}", 1, "tools", "\"function\"");
    refused("{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}}, {\"type\": "
            "\"function\", \"function\": {\"name\": \"a\"}}]}",
            1, "tools", "two tools");
    snprintf(json, sizeof json,
             "{%s, \"tool_choice\": \"required\", \"response_format\": {\"type\": "
             "\"json_object\"}}",
             weather_tools);
    refused(json, 1, "tool_choice", "cannot be combined");
    refused("{\"tools\": []}", 0, "tools", "chat/completions field");
}

static void test_tool_calls_from_answer(void **state) {
    (void)state;
    serve_structured s;
    serve_refusal why;
    char json[2048];
    snprintf(json, sizeof json, "{%s, \"tool_choice\": \"required\"}", weather_tools);
    assert_int_equal(parse(json, 1, &s, &why), 0);
    const char *answer = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n";
    cJSON *calls = NULL;
    assert_int_equal(serve_structured_tool_calls(&s, answer, strlen(answer), 0xabcULL, &calls), 1);
    assert_int_equal(cJSON_GetArraySize(calls), 1);
    const cJSON *call = cJSON_GetArrayItem(calls, 0);
    assert_string_equal(cJSON_GetObjectItem(call, "id")->valuestring, "call_0000000000000abc");
    assert_string_equal(cJSON_GetObjectItem(call, "type")->valuestring, "function");
    const cJSON *fn = cJSON_GetObjectItem(call, "function");
    assert_string_equal(cJSON_GetObjectItem(fn, "name")->valuestring, "get_weather");
    /* OpenAI's arguments are a JSON string, not an object */
    assert_string_equal(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{\"city\":\"Paris\"}");
    cJSON_Delete(calls);
    const char *not_calls[] = {
        "{\"name\": \"get_mail\", \"arguments\": {}}",           /* no such tool */
        "{\"name\": \"get_weather\", \"arguments\": \"Paris\"}", /* arguments not an object */
        "{\"name\": \"get_weather\", \"arguments\": {}} and more", /* trailing text */
        "The weather is fine.",
    };
    for (size_t i = 0; i < sizeof not_calls / sizeof not_calls[0]; i++) {
        assert_int_equal(
            serve_structured_tool_calls(&s, not_calls[i], strlen(not_calls[i]), 1, &calls), 0);
        assert_null(calls);
    }
    serve_structured_free(&s);
    /* no tools: never a call */
    assert_int_equal(parse("{}", 1, &s, &why), 0);
    assert_int_equal(serve_structured_tool_calls(&s, answer, strlen(answer), 1, &calls), 0);
    serve_structured_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_response_format),
        cmocka_unit_test(test_grammar_fields),
        cmocka_unit_test(test_tools),
        cmocka_unit_test(test_tool_calls_from_answer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
