#!/usr/bin/env python3
"""Structured output and penalties through specd serve, end to end on the real model (stdlib
only; each request in the shape its client sends it).

Checks:
- response_format json_schema, exactly as openai's client.beta.chat.completions.parse sends a
  Pydantic model (strict, $defs with an enum, an integer, additionalProperties false): the
  content parses as JSON and validates against the schema (a small validator for the subset),
  whole and streamed; json_object: a JSON object; a GBNF `grammar` on /v1/completions (llama-
  server's field): the answer is one of the grammar's strings and ends with finish_reason stop.
- A schema shared by two requests is compiled once (the grammar cache, on /metrics).
- tools with tool_choice required and named: message content null, tool_calls with one call
  whose arguments are JSON matching the tool's parameters, finish_reason tool_calls; streamed:
  a delta with the call (index 0, id, type, name, arguments), then finish_reason tool_calls.
  The bind_tools round trip: the call and the tool's answer sent back as messages are accepted.
- Lossless: the same constrained request under policies none, ngram, suffix and recycle
  (drafting every step)
  gives the same content (greedy, and T 0.8 with a seed for the schema); plain decoding under a
  grammar drafts the grammar's forced tokens (jump-forward), verified like any draft.
- presence/frequency/repetition penalties change the answer, and give the same answer under
  none and ngram (and suffix); out of range they are refused naming the field.
- Refusals: a bad schema or grammar is a 400 naming the field with the compiler's message; a
  self-speculative policy (isd) with a grammar is a 400 that says why.

usage: test_serve_structured.py BUILD_DIR MODEL [SECTION...]
"""
import http.client
import json
import os
import re
import sys
import threading

from serve_fixture import check, start_serve, stop_serve

BIN, MODEL, ONLY = sys.argv[1], sys.argv[2], sys.argv[3:]
SPECD = os.path.join(BIN, "specd")
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def sanitized():
    """A sanitizer build runs the model several times slower: the lossless check does less there
    (its point is the memory checks; the plain build proves the identity in full)."""
    try:
        with open(os.path.join(BIN, "CMakeCache.txt")) as f:
            return bool(re.search(r"^SPECD_SANITIZE:\w+=\S", f.read(), re.M))
    except OSError:
        return False


SANITIZED = sanitized()

# What openai's client sends for
#   class Role(str, Enum): admin = "admin"; user = "user"; guest = "guest"
#   class Person(BaseModel): name: str; age: int; role: Role
# with client.beta.chat.completions.parse(response_format=Person) (openai.lib._pydantic).
PERSON = {
    "$defs": {"Role": {"enum": ["admin", "user", "guest"], "title": "Role", "type": "string"}},
    "properties": {"name": {"title": "Name", "type": "string"},
                   "age": {"title": "Age", "type": "integer"},
                   "role": {"$ref": "#/$defs/Role"}},
    "required": ["name", "age", "role"], "title": "Person", "type": "object",
    "additionalProperties": False}
PERSON_FORMAT = {"type": "json_schema",
                 "json_schema": {"schema": PERSON, "name": "Person", "strict": True}}
PERSON_MSGS = [{"role": "user", "content": "Alice is a 31 year old admin. Extract her."}]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False}}}
TOOL_MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]


def call(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.status, r.read()
    c.close()
    return out


def post(port, path, body):
    status, data = call(port, path, body)
    check(status == 200, "%s %s -> %d %s" % (path, json.dumps(body)[-160:], status, data[:300]))
    return json.loads(data)


def stream(port, path, body):
    status, data = call(port, path, dict(body, stream=True))
    check(status == 200, "stream %s -> %d %s" % (path, status, data[:300]))
    events = [e for e in data.decode().split("\n\n") if e]
    check(events and events[-1] == "data: [DONE]", "no [DONE]: %r" % events[-1:])
    return [json.loads(e[6:]) for e in events[:-1]]


def refused(port, path, body, param, says=None):
    status, data = call(port, path, body)
    check(status == 400, "%s -> %d (want 400): %s" % (json.dumps(body)[:200], status, data[:300]))
    err = json.loads(data)["error"]
    check(err["param"] == param, "param %r, want %r: %s" % (err["param"], param, err))
    if says:
        check(re.search(says, err["message"]), "message %r lacks %r" % (err["message"], says))


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    check(m, "%s not in /metrics" % name)
    return float(m.group(1))


def validate(value, schema, defs, where="$"):
    """The JSON Schema subset used here: $ref to $defs, type, enum, properties, required,
    additionalProperties false."""
    if "$ref" in schema:
        return validate(value, defs[schema["$ref"].split("/")[-1]], defs, where)
    types = {"object": dict, "string": str, "array": list, "boolean": bool}
    t = schema.get("type")
    if t == "integer":
        check(isinstance(value, int) and not isinstance(value, bool), "%s: %r not an integer"
              % (where, value))
    elif t:
        check(isinstance(value, types[t]), "%s: %r is not %s" % (where, value, t))
    if "enum" in schema:
        check(value in schema["enum"], "%s: %r not in %s" % (where, value, schema["enum"]))
    if t == "object":
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            check(k in value, "%s: required %r missing in %r" % (where, k, value))
        if schema.get("additionalProperties") is False:
            extra = set(value) - set(props)
            check(not extra, "%s: properties %s not allowed" % (where, extra))
        for k, v in value.items():
            if k in props:
                validate(v, props[k], defs, "%s.%s" % (where, k))


def schema_tests(port):
    body = {"messages": PERSON_MSGS, "max_tokens": 96, "temperature": 0,
            "response_format": PERSON_FORMAT}
    before = metric(port, "specd:grammar_compilations_total")
    r = post(port, CHAT, body)
    ch = r["choices"][0]
    check(ch["finish_reason"] == "stop", "json_schema answer ended by %s" % ch["finish_reason"])
    person = json.loads(ch["message"]["content"])
    validate(person, PERSON, PERSON["$defs"])
    # streamed: the same content, and the schema came from the cache
    chunks = stream(port, CHAT, body)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    check(text == ch["message"]["content"], "streamed %r != whole %r" % (text, ch["message"]))
    check(metric(port, "specd:grammar_compilations_total") == before + 1,
          "a schema shared by two requests was compiled twice")
    # json_object: any JSON object, where the free model runs on past one
    r = post(port, CHAT, {"messages": [{"role": "user", "content": "Describe Alice (31, admin) "
                                        "as JSON."}], "max_tokens": 40, "temperature": 0,
                          "response_format": {"type": "json_object"}})
    ch = r["choices"][0]
    if ch["finish_reason"] == "stop":
        check(isinstance(json.loads(ch["message"]["content"]), dict), "json_object: not an object")
    else:  # cut by max_tokens: still the start of an object
        check(ch["message"]["content"].lstrip().startswith("{"), "json_object: %r" % ch)
    # llama-server's GBNF grammar on completions
    for prompt in ["Is the sky blue? Answer:", "Is fire cold? Answer:"]:
        r = post(port, COMP, {"prompt": prompt, "max_tokens": 16, "temperature": 0,
                              "grammar": 'root ::= " yes" | " no"'})
        ch = r["choices"][0]
        check(ch["text"] in (" yes", " no") and ch["finish_reason"] == "stop",
              "grammar yes|no gave %r (%s)" % (ch["text"], ch["finish_reason"]))
    print("ok: json_schema (Pydantic's shape) valid, whole and streamed, compiled once; "
          "json_object; GBNF on completions", flush=True)


def check_call(ch, name, chunks=None):
    """One call to name with arguments matching its tool's parameters."""
    calls = ch["message"]["tool_calls"] if chunks is None else \
        [tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls")
         or []]
    check(len(calls) == 1, "want one call, got %r" % calls)
    tc = calls[0]
    check(tc["type"] == "function" and tc["id"].startswith("call_"), "call %r" % tc)
    check(tc["function"]["name"] == name, "called %r, want %r" % (tc["function"]["name"], name))
    if chunks is not None:
        check(tc["index"] == 0, "a streamed call has index 0: %r" % tc)
    params = (WEATHER if name == "get_weather" else TIME)["function"]["parameters"]
    validate(json.loads(tc["function"]["arguments"]), params, {})
    return tc


def tool_tests(port):
    base = {"messages": TOOL_MSGS, "max_tokens": 96, "temperature": 0, "tools": [WEATHER, TIME]}
    for choice, name in [("required", "get_weather"),
                         ({"type": "function", "function": {"name": "get_time"}}, "get_time")]:
        body = dict(base, tool_choice=choice)
        r = post(port, CHAT, body)
        ch = r["choices"][0]
        check(ch["finish_reason"] == "tool_calls" and ch["message"]["content"] is None,
              "tool_choice %r: %r" % (choice, ch))
        tc = check_call(ch, name)
        chunks = stream(port, CHAT, body)
        ends = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
        check(ends[-1] == "tool_calls", "streamed finish_reason %r" % ends)
        stc = check_call(None, name, chunks)
        check(stc["function"] == tc["function"], "streamed call %r != %r" % (stc, tc))
    # the round trip bind_tools makes: the call and the tool's answer come back as messages
    msgs = TOOL_MSGS + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": tc["id"], "type": "function", "function": tc["function"]}]},
        {"role": "tool", "tool_call_id": tc["id"], "content": "18 degrees celsius, sunny"}]
    r = post(port, CHAT, {"messages": msgs, "max_tokens": 24, "temperature": 0,
                          "tools": [WEATHER, TIME]})
    ch = r["choices"][0]
    check(ch["finish_reason"] in ("stop", "length", "tool_calls"), "round trip: %r" % ch)
    print("ok: tool_choice required and named, whole and streamed; the tool's answer taken back",
          flush=True)


def lossless_tests(port):
    bodies = [{"messages": PERSON_MSGS, "max_tokens": 64, "response_format": PERSON_FORMAT},
              {"messages": TOOL_MSGS, "max_tokens": 64, "tools": [WEATHER],
               "tool_choice": "required"}]
    n_forced = 0
    # adaptive false: every step drafts, so the grammar meets the policies' drafts each time.
    # suffix (after the requests before it, its trees hold their ends: drafts past an
    # end-of-generation token, which the grammar allows nothing after) and recycle draft trees.
    for body in bodies[:1] if SANITIZED else bodies:
        # the call's arguments are free text too: greedy is enough for the second body
        samplings = [{"temperature": 0}] + ([{"temperature": 0.8, "seed": 11}]
                                             if body is bodies[0] and not SANITIZED else [])
        for sampling in samplings:
            answers = {}
            for policy in ["none", "ngram", "suffix", "recycle"]:
                r = post(port, CHAT, dict(body, policy=policy, adaptive=False, **sampling))
                msg = r["choices"][0]["message"]
                answers[policy] = msg["content"] if msg["content"] is not None else \
                    json.dumps(msg["tool_calls"][0]["function"])
                sd = r["metrics"]["speculative_decoding"]
                n_forced += sd["num_draft_tokens"] if policy == "none" else 0
            check(len(set(answers.values())) == 1,
                  "policies disagree under %s: %r" % (sampling, answers))
    # plain decoding drafts only what the grammar forces: its drafts are the jump-forward ones
    check(n_forced > 0, "the grammar proposed no forced tokens")
    print("ok: none == ngram == suffix == recycle under json_schema (greedy and T 0.8) and "
          "forced tools (greedy)",
          flush=True)


def penalty_tests(port):
    base = {"prompt": "List: apple, apple, apple, apple, apple,", "max_tokens": 16,
            "temperature": 0}
    plain = post(port, COMP, base)["choices"][0]["text"]
    for pen in [{"frequency_penalty": 1.5}, {"presence_penalty": 2.0},
                {"repetition_penalty": 1.8}]:
        texts = set()
        for policy in ["none", "ngram"] + (["suffix"] if "frequency_penalty" in pen else []):
            texts.add(post(port, COMP, dict(base, policy=policy, **pen))["choices"][0]["text"])
        check(len(texts) == 1, "%s: policies disagree: %r" % (pen, texts))
        check(texts.pop() != plain, "%s changed nothing: %r" % (pen, plain))
    refused(port, COMP, dict(base, presence_penalty=2.5), "presence_penalty")
    refused(port, COMP, dict(base, repetition_penalty=0), "repetition_penalty")
    print("ok: penalties change the answer, the same under none, ngram and suffix", flush=True)


def refusal_tests(port):
    msgs = [{"role": "user", "content": "x"}]
    refused(port, CHAT, {"messages": msgs, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "frob"}}}},
        "response_format", "frob")
    refused(port, CHAT, {"messages": msgs, "json_schema": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "(("}}}},
        "json_schema", "pattern")
    refused(port, COMP, {"prompt": "x", "grammar": "root ::= undefined_rule"}, "grammar",
            "undefined_rule")
    refused(port, COMP, {"prompt": "x", "grammar": 'root ::= "a"', "json_schema": {}},
            "json_schema")
    status, data = call(port, COMP, {"prompt": "x", "grammar": 'root ::= "a"', "policy": "isd"})
    check(status == 400 and b"isd" in data, "isd with a grammar -> %d %s" % (status, data[:300]))
    print("ok: bad schemas and grammars refused naming the field; isd with a grammar 400",
          flush=True)


def run_together(fns, port):
    """Runs the sections at once (the loop steps their requests in the same forwards); a section
    that fails (check exits) fails the test once all have ended."""
    failed = []

    def one(fn):
        try:
            fn(port)
        except SystemExit:
            failed.append(fn.__name__)

    threads = [threading.Thread(target=one, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not failed, "failed: %s" % failed)


def main():
    # schema first and alone: it counts the grammars compiled, which the others also do
    sections = [("tools", tool_tests), ("lossless", lossless_tests),
                ("penalties", penalty_tests), ("refusals", refusal_tests)]
    srv, port = start_serve(SPECD, MODEL, ["-t", "2", "--policy", "none", "--max-seqs", "8"])
    try:
        if not ONLY or "schema" in ONLY:
            schema_tests(port)
        run_together([fn for name, fn in sections if not ONLY or name in ONLY], port)
    finally:
        stop_serve(srv)
    print("test_serve_structured: all passed")


main()
