#!/usr/bin/env python3
"""What real clients send to specd serve, end to end on the real model (stdlib only; each request
is in the shape its client sends it).

Checks:
- UTF-8 at the end: a completion cut inside a multi-byte character (max_tokens 1 on a forced byte
  token) has no broken character in its text, whole or streamed, completions and chat; the token
  is named "bytes:\\xNN" in logprobs (chat also gives its bytes); with echo, the tokens' bytes
  make the prompt and every text_offset counts the characters wholly before its token.
- lm-evaluation-harness's local-completions with batch_size > 1: a batch of token-id prompts
  (loglikelihood: echo, logprobs, max_tokens 1) and of strings (generate_until: stop, seed) get
  one choice per prompt, index set, each the answer its prompt gets alone.
- n > 1: n choices, choice i what seed S + i gives alone (so the same again with that seed);
  streamed, the choices' chunks interleave by index and join to the whole answer's texts.
- /tokenize and /detokenize in llama-server's shape (content, add_special, with_pieces) and the
  tokenizer calls of lm-evaluation-harness's tokenizer_backend=remote (GET /tokenizer_info with
  eos_token, POST /tokenize {"prompt", "add_special_tokens"}, POST /detokenize -> "prompt").
- logprobs with stream (chat and completions): the chunks' logprobs join to the whole answer's.
- stream_options.include_usage: without it no usage in the stream; with it "usage": null on every
  chunk and a last chunk with "choices": [] and the usage.
- GET /v1/models/{id} (404 model_not_found for another id), Retry-After on a 503 for a full
  queue, CORS with --cors-origin (preflight 204 with the Access-Control-* headers, the origin on
  every answer) and without it (OPTIONS 405, no CORS header).

usage: test_serve_clients.py BUILD_DIR MODEL [SECTION...]   (sections: the names in main; all
by default; one at a time shows which fails against another build)
"""
import http.client
import json
import os
import re
import sys

from serve_fixture import check, start_serve, stop_serve

BIN, MODEL, ONLY = sys.argv[1], sys.argv[2], sys.argv[3:]
SPECD = os.path.join(BIN, "specd")
ORIGIN = "http://client.example"
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def start(*extra):
    return start_serve(SPECD, MODEL, ["-t", "2", "--policy", "none"] + list(extra))


def call(port, method, path, body=None, headers=None):
    """(status, headers dict (lower-case names), raw body)"""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=None if body is None else json.dumps(body), headers=h)
    r = c.getresponse()
    out = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    c.close()
    return out


def post(port, path, body):
    status, _, data = call(port, "POST", path, body)
    check(status == 200, "%s %s -> %d %s" % (path, json.dumps(body)[:200], status, data[:300]))
    return json.loads(data)


def stream(port, path, body):
    """The chunks of a streamed request (the JSON of every event before [DONE])."""
    status, _, data = call(port, "POST", path, dict(body, stream=True))
    check(status == 200, "stream %s -> %d %s" % (path, status, data[:300]))
    events = [e for e in data.decode().split("\n\n") if e]
    check(events and events[-1] == "data: [DONE]", "no [DONE]: %r" % events[-1:])
    return [json.loads(e[6:]) for e in events[:-1]]


def chunk_text(choice):
    return choice["delta"].get("content") or "" if "delta" in choice else choice["text"]


def token_bytes(name):
    """A logprobs token name's bytes: "bytes:\\xNN..." or its text."""
    if name.startswith("bytes:"):
        return bytes(int(h, 16) for h in re.findall(r"\\x([0-9a-f]{2})", name))
    return name.encode()


# ---- UTF-8 at the end ----------------------------------------------------------------------------

def utf8_tests(port):
    prompt = "Emoji \U0001F642 and \u65e5\u672c, caf\u00e9."
    tok = post(port, "/tokenize", {"content": prompt, "with_pieces": True})["tokens"]
    partial = [t for t in tok if isinstance(t["piece"], list)]
    check(partial, "no token of %r is a piece of a character: %s" % (prompt, tok))
    byte_tok = partial[0]["id"]
    # its whole characters (a space before the cut one, say) are text; the cut one is not
    want = bytes(partial[0]["piece"]).decode("utf-8", errors="ignore")
    # max_tokens 1 on a forced piece of a character: the answer ends inside it
    base = {"prompt": "Say something", "max_tokens": 1, "temperature": 0,
            "logit_bias": {str(byte_tok): 100}}
    whole = post(port, COMP, dict(base, logprobs=0))
    ch = whole["choices"][0]
    check(ch["text"] == want, "a cut character: text %r, want %r" % (ch["text"], want))
    check(ch["logprobs"]["tokens"][0].startswith("bytes:\\x"),
          "a piece of a character is named %r, not bytes:\\xNN" % ch["logprobs"]["tokens"][0])
    check(whole["usage"]["completion_tokens"] == 1, "the cut token is not counted")
    chunks = stream(port, COMP, base)
    text = "".join(chunk_text(c["choices"][0]) for c in chunks if c["choices"])
    check(text == want, "streamed: a cut character: %r, want %r" % (text, want))
    chat = post(port, CHAT, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
                             "temperature": 0, "logit_bias": {str(byte_tok): 100},
                             "logprobs": True})
    c0 = chat["choices"][0]
    check(c0["message"]["content"] == want, "chat: %r" % c0["message"]["content"])
    lp = c0["logprobs"]["content"][0]
    check(lp["token"].startswith("bytes:") and bytes(lp["bytes"]) == token_bytes(lp["token"]) and
          bytes(lp["bytes"]) == bytes(partial[0]["piece"]),
          "chat logprobs of a piece of a character: %s" % lp)
    # echo: the tokens' bytes make the prompt; offsets count whole characters before each token
    echo = post(port, COMP, {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 0})
    lp = echo["choices"][0]["logprobs"]
    check(echo["choices"][0]["text"] == prompt, "echo text %r" % echo["choices"][0]["text"])
    pieces = [token_bytes(t) for t in lp["tokens"]]
    check(b"".join(pieces) == prompt.encode(), "echo tokens %s do not make the prompt"
          % lp["tokens"])
    done = b""
    for i, p in enumerate(pieces):
        want = len(done.decode("utf-8", errors="ignore"))
        check(lp["text_offset"][i] == want, "text_offset[%d] = %d, want %d (%s)"
              % (i, lp["text_offset"][i], want, lp["text_offset"]))
        done += p
    print("ok: UTF-8: a cut character never reaches text; pieces named bytes:, offsets by "
          "whole characters", flush=True)


# ---- batched prompts (lm-evaluation-harness local-completions, batch_size > 1) ----------------

def batch_tests(port, model):
    texts = ["The capital of France is", "One, two, three,", "def add(a, b):"]
    ids = [[t if isinstance(t, int) else t["id"] for t in post(port, "/tokenize", {
        "content": s})["tokens"]] for s in texts]
    # loglikelihood: token ids, echo, logprobs 1, max_tokens 1 (lm-eval's _create_payload)
    ll = {"model": model, "prompt": ids, "temperature": 0, "max_tokens": 1, "logprobs": 1,
          "seed": 1234, "echo": True}
    got = post(port, COMP, ll)
    check([c["index"] for c in got["choices"]] == [0, 1, 2], "indexes %s"
          % [c["index"] for c in got["choices"]])
    for i, one in enumerate(ids):
        alone = post(port, COMP, dict(ll, prompt=one))["choices"][0]
        c = got["choices"][i]
        check(c["text"] == alone["text"] and c["logprobs"] == alone["logprobs"],
              "batch choice %d differs from its prompt alone:\n%s\n%s" % (i, c, alone))
    check(got["usage"]["prompt_tokens"] == sum(len(x) for x in ids), "batch usage %s"
          % got["usage"])
    # generate_until: strings, stop, seed
    gen = {"model": model, "prompt": texts, "max_tokens": 12, "temperature": 0,
           "stop": ["\n\n"], "seed": 1234}
    got = post(port, COMP, gen)
    check(len(got["choices"]) == 3, "%d choices for 3 prompts" % len(got["choices"]))
    for i, t in enumerate(texts):
        alone = post(port, COMP, dict(gen, prompt=t))["choices"][0]
        check(got["choices"][i]["index"] == i and got["choices"][i]["text"] == alone["text"],
              "batch %d: %r, alone %r" % (i, got["choices"][i]["text"], alone["text"]))
    print("ok: batched prompts: one choice per prompt, each its prompt's answer alone", flush=True)


# ---- n > 1 --------------------------------------------------------------------------------------

def n_tests(port):
    body = {"messages": [{"role": "user", "content": "Tell me a short story."}],
            "max_tokens": 6, "temperature": 1.0, "seed": 7, "n": 3}
    got = post(port, CHAT, body)
    check([c["index"] for c in got["choices"]] == [0, 1, 2], "n=3 indexes")
    texts = [c["message"]["content"] for c in got["choices"]]
    for i in range(3):
        alone = post(port, CHAT, dict(body, n=1, seed=7 + i))["choices"][0]["message"]["content"]
        check(texts[i] == alone, "choice %d %r != seed %d alone %r" % (i, texts[i], 7 + i, alone))
    check(len(set(texts)) > 1, "three seeds, one text: %s" % texts)
    # streamed: chunks of both choices interleave, and join to the whole answer's texts
    sb = {"prompt": "Count from 1 to 50: 1, 2, 3,", "max_tokens": 12, "temperature": 0, "n": 2}
    whole = post(port, COMP, sb)
    chunks = stream(port, COMP, sb)
    order = [c["choices"][0]["index"] for c in chunks if c["choices"]]
    check(set(order) == {0, 1}, "indexes streamed: %s" % order)
    check(order.index(1) < len(order) - 1 - order[::-1].index(0),
          "the choices are not interleaved: %s" % order)
    for i in range(2):
        t = "".join(chunk_text(c["choices"][0]) for c in chunks
                    if c["choices"] and c["choices"][0]["index"] == i)
        check(t == whole["choices"][i]["text"], "streamed choice %d %r != %r"
              % (i, t, whole["choices"][i]["text"]))
        ends = [c for c in chunks if c["choices"] and c["choices"][0]["index"] == i and
                c["choices"][0]["finish_reason"]]
        check(len(ends) == 1, "choice %d ends %d times" % (i, len(ends)))
    print("ok: n > 1: choice i is seed S + i alone; streamed choices interleave",
          flush=True)


# ---- tokenizer endpoints ------------------------------------------------------------------------

def tokenizer_tests(port):
    text = "Hello world, caf\u00e9"
    plain = post(port, "/tokenize", {"content": text, "add_special": False})
    ids = plain["tokens"]
    check(ids and all(isinstance(t, int) for t in ids), "tokens %s" % plain)
    pieces = post(port, "/tokenize", {"content": text, "with_pieces": True})["tokens"]
    check([t["id"] for t in pieces] == ids, "with_pieces ids differ")
    joined = b"".join(bytes(t["piece"]) if isinstance(t["piece"], list) else
                      t["piece"].encode() for t in pieces)
    check(joined == text.encode(), "pieces join to %r" % joined)
    back = post(port, "/detokenize", {"tokens": ids})
    check(back["content"] == text, "detokenize: %r" % back)
    # the same tokens as a completion's prompt
    echo = post(port, COMP, {"prompt": text, "max_tokens": 0, "echo": True})
    check(echo["usage"]["prompt_tokens"] == len(ids), "tokenize and the prompt disagree")
    # lm-evaluation-harness's RemoteTokenizer (tokenizer_backend=remote)
    status, _, data = call(port, "GET", "/tokenizer_info")
    check(status == 200, "/tokenizer_info -> %d" % status)
    info = json.loads(data)
    check("eos_token" in info and isinstance(info["eos_token"], str), "tokenizer_info %s" % info)
    r = post(port, "/tokenize", {"prompt": "test", "add_special_tokens": False})
    check(isinstance(r["tokens"], list) and r["tokens"], "vLLM-shape tokenize %s" % r)
    eos = post(port, "/tokenize", {"prompt": info["eos_token"], "add_special_tokens": False})
    check(len(eos["tokens"]) == 1, "the eos_token text is %d tokens" % len(eos["tokens"]))
    r = post(port, "/detokenize", {"tokens": ids})
    check(r["prompt"] == text, "vLLM-shape detokenize %s" % r)
    status, _, data = call(port, "POST", "/tokenize", {"content": 5})
    check(status == 400 and json.loads(data)["error"]["param"] == "content", "bad content")
    status, _, data = call(port, "POST", "/detokenize", {"tokens": [-1]})
    check(status == 400 and json.loads(data)["error"]["param"] == "tokens", "bad token")
    print("ok: /tokenize, /detokenize (llama-server and vLLM shapes), /tokenizer_info", flush=True)


# ---- logprobs while streaming, and usage ----------------------------------------------------------

def stream_logprob_tests(port):
    comp = {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0,
            "logprobs": 2}
    whole = post(port, COMP, comp)["choices"][0]["logprobs"]
    chunks = stream(port, COMP, comp)
    got = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for c in chunks:
        lp = c["choices"][0]["logprobs"] if c["choices"] else None
        for k in got:
            got[k] += lp[k] if lp else []
    check(got == whole, "streamed completions logprobs\n%s\n!= whole\n%s" % (got, whole))
    chat = {"messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 6,
            "temperature": 0, "logprobs": True, "top_logprobs": 2}
    whole = post(port, CHAT, chat)["choices"][0]["logprobs"]["content"]
    content = []
    for c in stream(port, CHAT, chat):
        if c["choices"] and c["choices"][0]["logprobs"]:
            content += c["choices"][0]["logprobs"]["content"]
    check(content == whole, "streamed chat logprobs differ from the whole answer's")
    print("ok: logprobs while streaming: the chunks' join to the whole answer's", flush=True)


def usage_tests(port):
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0}
    whole = post(port, CHAT, body)
    chunks = stream(port, CHAT, body)
    check(all("usage" not in c for c in chunks), "usage sent without include_usage")
    chunks = stream(port, CHAT, dict(body, stream_options={"include_usage": True}))
    check(all("usage" in c and c["usage"] is None for c in chunks[:-1]),
          "a chunk before the last has usage other than null")
    last = chunks[-1]
    check(last["choices"] == [] and last["usage"] == whole["usage"],
          "the usage chunk: %s (whole: %s)" % (last, whole["usage"]))
    print("ok: include_usage: null on every chunk, then choices [] with the usage", flush=True)


# ---- models, CORS, Retry-After ----------------------------------------------------------------------

def model_tests(port, model):
    status, _, data = call(port, "GET", "/v1/models/" + model)
    check(status == 200 and json.loads(data)["id"] == model, "/v1/models/%s -> %d %s"
          % (model, status, data))
    status, _, data = call(port, "GET", "/v1/models/gpt-4")
    err = json.loads(data).get("error", {})
    check(status == 404 and err.get("code") == "model_not_found" and
          err.get("type") == "invalid_request_error", "/v1/models/gpt-4 -> %d %s" % (status, data))
    print("ok: GET /v1/models/{id}", flush=True)


def cors_tests(port):
    status, h, _ = call(port, "OPTIONS", CHAT, headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,x-stainless-os"})
    check(status == 204, "preflight -> %d" % status)
    check(h.get("access-control-allow-origin") == ORIGIN, "preflight origin %s" % h)
    check("POST" in h.get("access-control-allow-methods", ""), "preflight methods %s" % h)
    check("x-stainless-os" in h.get("access-control-allow-headers", ""), "preflight headers %s"
          % h)
    status, h, _ = call(port, "POST", COMP, {"prompt": "Hi", "max_tokens": 1},
                        headers={"Origin": ORIGIN})
    check(status == 200 and h.get("access-control-allow-origin") == ORIGIN, "POST: %s" % h)
    status, h, _ = call(port, "GET", "/v1/models/nope", headers={"Origin": ORIGIN})
    check(status == 404 and h.get("access-control-allow-origin") == ORIGIN, "404: %s" % h)
    print("ok: --cors-origin: preflight 204, the origin on every answer", flush=True)


def small_server_tests():
    """One slot, no queue, no --cors-origin: a second request is told when to come back."""
    srv, port = start("--max-seqs", "1", "--max-queue", "0")
    try:
        status, h, _ = call(port, "OPTIONS", CHAT, headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
        check(status == 405 and "access-control-allow-origin" not in h,
              "OPTIONS without --cors-origin -> %d %s" % (status, h))
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", COMP, json.dumps({"prompt": "Count to 1000: 1, 2,", "max_tokens": 400,
                                            "temperature": 0, "stream": True}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        check(r.status == 200 and r.readline().startswith(b"data: "), "the first request")
        status, h, data = call(port, "POST", COMP, {"prompt": "Hi", "max_tokens": 1})
        check(status == 503 and h.get("retry-after", "").isdigit(),
              "a full queue -> %d %s %s" % (status, h, data[:200]))
        c.close()
    finally:
        stop_serve(srv)
    print("ok: 503 with Retry-After on a full queue; no CORS without --cors-origin", flush=True)


def main():
    sections = [("tokenizer", tokenizer_tests), ("utf8", utf8_tests), ("batch", batch_tests),
                ("n", n_tests), ("stream_logprobs", stream_logprob_tests), ("usage", usage_tests),
                ("models", model_tests), ("cors", cors_tests)]
    srv, port = start("--max-seqs", "4", "--cors-origin", ORIGIN)
    try:
        model = json.loads(call(port, "GET", "/v1/models")[2])["data"][0]["id"]
        for name, fn in sections:
            if not ONLY or name in ONLY:
                fn(port, model) if fn in (batch_tests, model_tests) else fn(port)
    finally:
        stop_serve(srv)
    if not ONLY or "small" in ONLY:
        small_server_tests()
    print("test_serve_clients: all passed")


main()
