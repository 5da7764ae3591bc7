#!/usr/bin/env python3
"""specd serve end to end, on the real model over real loopback HTTP (Python's stdlib only).

Starts `specd serve --port 0` (it prints the port it got), then: /health; completions and chat,
whole and streamed, several at once; streamed text == whole text for the same seed, and equal to
`specd generate` with the same sampling and seed; ngram == none (lossless); a client that leaves
mid-stream is cancelled (its slot is freed: the running gauge returns to 0, the abort counter
counts it, it generated far fewer tokens than asked) and the server goes on serving; malformed
requests get 4xx with an OpenAI-style error; /metrics parses as Prometheus text. Then both
daemons with --metrics-port: a remote-drafted, remotely verified generation, then their /metrics.

usage: test_serve.py BUILD_DIR MODEL
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from serve_fixture import check, fail, start

BIN, MODEL = sys.argv[1], sys.argv[2]
SPECD = os.path.join(BIN, "specd")
# The "ngram speculates" check leans on llama.cpp's greedy answer to the repetitive prompt below,
# which repeats the list; the default fast numerics answers it without a repeat. The server and
# every `specd generate` run here read SPECD_NUMERICS.
os.environ["SPECD_NUMERICS"] = "llama"
# llama.cpp's (and specd generate's) sampling defaults, so the two can be compared
SAMPLING = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}


def request(port, method, path, body=None, raw=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    c.request(method, path, body=data, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.status, r.getheader("Content-Type"), r.read()
    c.close()
    return out


def post(port, path, body):
    status, ctype, data = request(port, "POST", path, body)
    check(status == 200, "%s -> %d %s" % (path, status, data[:300]))
    check(ctype.startswith("application/json"), "content type %s" % ctype)
    return json.loads(data)


def stream(port, path, body):
    """A streamed request: the joined deltas, the chunks, and the last chunk's extras."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", path, body=json.dumps(dict(body, stream=True)),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        fail("stream %s -> %d %s" % (path, r.status, r.read()[:300]))
    check(r.getheader("Content-Type").startswith("text/event-stream"), "stream content type")
    raw = r.read().decode()
    c.close()
    events = [e for e in raw.split("\n\n") if e]
    check(all(e.startswith("data: ") for e in events), "an event is not 'data: ...': %r" % raw)
    check(events[-1] == "data: [DONE]", "stream does not end with [DONE]: %r" % events[-1:])
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    text = ""
    for ch in chunks:
        choice = ch["choices"][0]
        text += choice["delta"].get("content", "") if "delta" in choice else choice["text"]
    check(chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length"), "no finish_reason")
    return text, chunks


def answer_text(resp):
    choice = resp["choices"][0]
    return choice["message"]["content"] if "message" in choice else choice["text"]


PROM_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
                         r'(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*)?\})? (\S+)$')


def prom(port):
    """GET /metrics, parsed line by line as Prometheus text format 0.0.4:
    {name: {labels: value}}; every sample's family has HELP and TYPE before it."""
    status, ctype, data = request(port, "GET", "/metrics")
    check(status == 200, "/metrics -> %d" % status)
    check(ctype.startswith("text/plain") and "0.0.4" in ctype, "/metrics content type %s" % ctype)
    text = data.decode()
    check(text.endswith("\n"), "/metrics does not end with a newline")
    helped, typed, out = set(), {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            check(name not in helped, "HELP twice for %s" % name)
            helped.add(name)
        elif line.startswith("# TYPE "):
            parts = line.split(" ")
            check(len(parts) == 4 and parts[3] in ("counter", "gauge", "histogram"),
                  "bad TYPE: %s" % line)
            typed[parts[2]] = parts[3]
        else:
            m = PROM_SAMPLE.match(line)
            check(m, "not a Prometheus sample line: %r" % line)
            name, labels, value = m.group(1), m.group(3) or "", m.group(5)
            family = re.sub(r"_(bucket|sum|count)$", "", name)
            if typed.get(family) != "histogram":
                family = name
            check(family in typed and family in helped, "%s has no HELP/TYPE before it" % name)
            v = float(value)
            if typed[family] == "counter":
                check(v >= 0 and name.endswith("_total"), "bad counter %s %s" % (name, value))
            out.setdefault(name, {})[labels] = v
    for family, kind in typed.items():  # buckets cumulative, +Inf == count
        if kind == "histogram":
            b = out[family + "_bucket"]
            les = sorted(b, key=lambda l: float(l[4:-1].replace("+Inf", "inf")))
            counts = [b[l] for l in les]
            check(counts == sorted(counts) and les[-1] == 'le="+Inf"' and
                  counts[-1] == out[family + "_count"][""], "bad histogram %s" % family)
    return out


def wait_for(cond, what, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    fail("timed out waiting for " + what)


def generate_cli(prompt, n, seed):
    out = subprocess.run([SPECD, "generate", "-m", MODEL, "-p", prompt, "-n", str(n), "--seed",
                          str(seed), "-t", "1"], capture_output=True, check=True).stdout
    return out.decode("utf-8", "ignore").rstrip("\n")


def serve_tests():
    srv, port = start([SPECD, "serve", "-m", MODEL, "--port", "0", "--max-seqs", "4", "-t", "2",
                       "--max-tokens-cap", "1000", "--policy", "ngram", "--grace-ms", "300000"],
                      r"listening on http://127\.0\.0\.1:(\d+)")
    try:
        status, _, data = request(port, "GET", "/health")
        check(status == 200 and json.loads(data)["status"] == "ok", "/health: %d %s" % (status, data))
        models = json.loads(request(port, "GET", "/v1/models")[2])
        model_id = models["data"][0]["id"]
        check(model_id == "SmolLM2-135M-Instruct.Q4_1", "model id %s" % model_id)

        comp = dict(SAMPLING, model=model_id, prompt="The capital of France is", max_tokens=16,
                    seed=7)
        chat = dict(SAMPLING, model=model_id, max_tokens=12, seed=3,
                    messages=[{"role": "user", "content": "Say hi"}])
        # alone first: the reference answers
        ref_comp = post(port, "/v1/completions", comp)
        ref_chat = post(port, "/v1/chat/completions", chat)
        check(ref_comp["object"] == "text_completion" and ref_chat["object"] == "chat.completion",
              "objects")
        check(ref_comp["usage"]["completion_tokens"] >= 1, "no tokens")
        sd = ref_comp["metrics"]["speculative_decoding"]
        check(sd["policy"] == "ngram" and sd["num_target_forwards"] >= 1, "spec fields %s" % sd)
        check(ref_chat["choices"][0]["message"]["role"] == "assistant", "chat role")

        # the same as specd generate (chat template, same sampling and seed): the stream key is
        # the seed's alone, as documented
        gen = generate_cli("Say hi", 12, 3)
        got = answer_text(ref_chat).replace("\ufffd", "").rstrip("\n")
        check(got == gen, "serve chat %r != specd generate %r" % (got, gen))

        # four at once: streamed and whole, completions and chat, one with plain decoding
        results = {}

        def run(key, fn):
            try:
                results[key] = fn()
            except BaseException as e:  # reported below
                results[key] = e

        jobs = {
            "stream_comp": lambda: stream(port, "/v1/completions", comp),
            "stream_chat": lambda: stream(port, "/v1/chat/completions", chat),
            "whole_comp": lambda: post(port, "/v1/completions", comp),
            "plain_chat": lambda: post(port, "/v1/chat/completions", dict(chat, policy="none")),
        }
        threads = [threading.Thread(target=run, args=(k, f)) for k, f in jobs.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for k, v in results.items():
            check(not isinstance(v, BaseException), "%s raised %r" % (k, v))
        check(results["stream_comp"][0] == answer_text(ref_comp),
              "streamed %r != whole %r" % (results["stream_comp"][0], answer_text(ref_comp)))
        check(results["stream_chat"][0] == answer_text(ref_chat),
              "streamed chat %r != whole %r" % (results["stream_chat"][0], answer_text(ref_chat)))
        check(answer_text(results["whole_comp"]) == answer_text(ref_comp),
              "a request's text changed when others ran beside it")
        check(answer_text(results["plain_chat"]) == answer_text(ref_chat),
              "ngram and plain decoding differ under coupled sampling")
        last = results["stream_chat"][1][-1]
        check("usage" not in last and "speculative_decoding" in last["metrics"],
              "the last chunk has usage unasked, or no speculation figures")
        check(results["stream_chat"][1][0]["choices"][0]["delta"].get("role") == "assistant",
              "the first chat chunk names no role")
        # a stop string ends the answer before it, in both forms
        text = answer_text(ref_comp)
        if len(text) > 4:
            stop = text[2:5]
            cut = text[:text.index(stop)]
            s1 = post(port, "/v1/completions", dict(comp, stop=[stop]))
            s2 = stream(port, "/v1/completions", dict(comp, stop=stop))
            check(answer_text(s1) == cut and s2[0] == cut,
                  "stop %r: %r / %r, want %r" % (stop, answer_text(s1), s2[0], cut))
            check(s1["choices"][0]["finish_reason"] == "stop", "finish_reason with a stop string")
        print("ok: completions and chat, streamed == whole == alone == specd generate", flush=True)

        # speculation that pays (repetitive text, greedy, drafting every step: the guard's
        # choices depend on measured times): drafts accepted, text unchanged
        rep = dict(model=model_id, max_tokens=40, temperature=0, draft_max=4, adaptive=False,
                   messages=[
            {"role": "user", "content": "Repeat the following list exactly three times: apple, "
                                        "banana, cherry, date, elderberry."}])
        spec = post(port, "/v1/chat/completions", dict(rep, policy="ngram"))
        plain = post(port, "/v1/chat/completions", dict(rep, policy="none"))
        check(answer_text(spec) == answer_text(plain), "ngram %r != plain %r"
              % (answer_text(spec), answer_text(plain)))
        sd = spec["metrics"]["speculative_decoding"]
        check(sd["num_drafts"] > 0 and sd["num_accepted_tokens"] > 0 and
              sd["tokens_per_forward"] > 1 and len(sd["num_accepted_tokens_per_pos"]) <= 4,
              "ngram did not speculate: %s" % sd)
        check(plain["metrics"]["speculative_decoding"]["num_drafts"] == 0, "plain drafted")
        print("ok: ngram == plain, %d of %d proposals accepted, TPF %.2f"
              % (sd["num_accepted_tokens"], sd["num_draft_tokens"], sd["tokens_per_forward"]),
              flush=True)

        # a client that leaves mid-stream: its request is cancelled and its slot freed
        before = prom(port)
        aborts0 = before["specd:request_success_total"]['finished_reason="abort"']
        gen0 = before["specd:generation_tokens_total"][""]
        body = json.dumps(dict(model=model_id, prompt="Count from 1 to 1000, separated by commas.",
                               max_tokens=1000, temperature=0, stream=True)).encode()
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while b"data: " not in got:
            chunk = s.recv(4096)
            check(chunk, "the stream closed before its first event")
            got += chunk
        check(b" 200 " in got.split(b"\r\n")[0], "stream status: %r" % got[:80])
        s.close()
        def freed():
            m = prom(port)
            return (m["specd:request_success_total"]['finished_reason="abort"'] == aborts0 + 1
                    and m["specd:num_requests_running"][""] == 0)
        wait_for(freed, "the abort to be counted and its slot freed")
        after = prom(port)
        check(after["specd:num_requests_running"][""] == 0, "a slot is still running")
        check(after["specd:num_requests_waiting"][""] == 0, "a request is still waiting")
        made = after["specd:generation_tokens_total"][""] - gen0
        check(made < 1000, "the cancelled request generated all its %d tokens" % made)
        # the same for a whole (non-streamed) answer: the client leaves while it is generated
        aborts1 = after["specd:request_success_total"]['finished_reason="abort"']
        body = json.dumps(json.loads(body.decode()) | {"stream": False}).encode()
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        wait_for(lambda: prom(port)["specd:num_requests_running"][""] == 1, "it to run")
        s.close()
        def freed_whole():
            m = prom(port)
            return (m["specd:request_success_total"]['finished_reason="abort"'] == aborts1 + 1
                    and m["specd:num_requests_running"][""] == 0)
        wait_for(freed_whole, "the whole answer's abort to be counted and its slot freed")
        made = prom(port)["specd:generation_tokens_total"][""] - gen0
        check(made < 2000, "the cancelled requests generated all their tokens")
        again = post(port, "/v1/completions", comp)
        check(answer_text(again) == answer_text(ref_comp), "the server changed after a disconnect")
        print("ok: a disconnect cancels its request, streamed or not (%d of 2 x 1000 tokens made), "
              "the slot is free" % made, flush=True)

        # malformed requests: 4xx with an OpenAI-style error naming the problem
        def refused(path, want, body=None, raw=None, param=None, method="POST"):
            status, ctype, data = request(port, method, path, body=body, raw=raw)
            check(status == want, "%s %s: status %d, want %d (%s)" % (path, raw or body, status,
                                                                       want, data[:200]))
            err = json.loads(data)["error"]
            check(err["message"] and err["type"], "error without message: %s" % data)
            if param:
                check(err["param"] == param, "error param %s, want %s" % (err["param"], param))
            return err["message"]
        refused("/v1/completions", 400, raw=b'{"prompt": "hi", ')
        refused("/v1/completions", 400, raw=b'[1, 2]')
        refused("/v1/completions", 400, body={"prompt": 5}, param="prompt")
        refused("/v1/completions", 400, body={"prompt": "hi", "temperature": "hot"},
                param="temperature")
        refused("/v1/completions", 400, body={"prompt": "hi", "max_tokens": 5000},
                param="max_tokens")
        refused("/v1/completions", 400, body={"prompt": "hi", "max_tokens": 1.5},
                param="max_tokens")
        refused("/v1/completions", 400, body={"prompt": "hi", "top_p": 0}, param="top_p")
        refused("/v1/completions", 400, body={"prompt": "hi", "policy": "nosuch"}, param="policy")
        refused("/v1/completions", 400,
                body={"prompt": "hi", "policy": "draft", "policy_options": "model=/etc/passwd"},
                param="policy_options")
        refused("/v1/completions", 400, body={"prompt": "hi", "stream": "yes"}, param="stream")
        refused("/v1/chat/completions", 400, body={"messages": "hi"}, param="messages")
        refused("/v1/chat/completions", 400, body={"messages": [{"role": "robot", "content": "x"}]},
                param="messages")
        refused("/v1/completions", 404, body={"prompt": "hi", "model": "gpt-4"}, param="model")
        refused("/v1/completions", 413, raw=b'{"prompt": "' + b"a" * (1 << 20) + b'"}')
        refused("/v1/nothing", 404, body={})
        refused("/v1/completions", 405, method="GET")
        m = prom(port)
        check(m["specd:request_rejected_total"][""] >= 16, "rejections not counted")
        print("ok: malformed requests get 4xx with a message", flush=True)

        # /metrics: vLLM's spec-decode counters, and they add up
        for name in ("specd:spec_decode_num_drafts_total", "specd:spec_decode_num_draft_tokens_total",
                     "specd:spec_decode_num_accepted_tokens_total",
                     "specd:spec_decode_num_accepted_tokens_per_pos_total",
                     "specd:prompt_tokens_total", "specd:generation_tokens_total"):
            check(name in m, "%s missing from /metrics" % name)
        answered = sum(v for k, v in m["specd:request_success_total"].items() if "abort" not in k)
        check(m["specd:e2e_request_latency_seconds_count"][""] == answered and
              m["specd:time_to_first_token_seconds_count"][""] >= answered,
              "latency histograms do not count every answered request")
        acc = m["specd:spec_decode_num_accepted_tokens_total"][""]
        drafted = m["specd:spec_decode_num_draft_tokens_total"][""]
        per_pos = sum(m["specd:spec_decode_num_accepted_tokens_per_pos_total"].values())
        check(0 < acc <= drafted and per_pos == acc, "accepted %s, drafted %s, by position %s"
              % (acc, drafted, per_pos))
        print("ok: /metrics parses (%d families); accepted %d of %d proposals"
              % (len(m), acc, drafted), flush=True)

        # graceful stop: a request in flight when SIGTERM comes still ends whole (--grace-ms is
        # long: the machine may be slow), new ones and
        # /health are told 503 meanwhile
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", "/v1/completions", json.dumps(dict(
            model=model_id, prompt="Count from 1 to 1000, separated by commas.", max_tokens=48,
            temperature=0, stream=True, stream_options={"include_usage": True})),
            {"Content-Type": "application/json"})
        r = c.getresponse()
        first = r.readline()
        check(first.startswith(b"data: "), "no first event: %r" % first)
        # a request whose body is still arriving keeps the server draining until we finish it,
        # so the checks below cannot race the server's exit
        late = socket.create_connection(("127.0.0.1", port))
        late.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n\r\n"
                     b'{"prompt"')
        srv.send_signal(signal.SIGTERM)
        wait_for(lambda: request(port, "GET", "/health")[0] == 503, "/health to say draining")
        check(request(port, "POST", "/v1/completions", {"prompt": "hi"})[0] == 503,
              "a new request while draining was not refused")
        rest = (first + r.read()).decode()
        c.close()
        events = [json.loads(e[6:]) for e in rest.split("\n\n") if e.startswith("data: {")]
        check(rest.rstrip().endswith("data: [DONE]") and
              events[-2]["choices"][0]["finish_reason"] == "length" and
              events[-1]["usage"]["completion_tokens"] == 48, "the request in flight was cut")
        late.sendall(b': "hi"}')
        reply = late.recv(4096)
        late.close()
        check(reply.startswith(b"HTTP/1.1 503"), "a late request was not refused: %r" % reply[:80])
        check(srv.wait(timeout=60) == 0, "specd serve did not exit 0 on SIGTERM")
        print("ok: SIGTERM drains: the request in flight ended whole, new ones got 503",
              flush=True)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()


def daemon_tests():
    d = tempfile.mkdtemp(prefix="specd-serve-test.")
    os.chmod(d, 0o700)
    dep, vep = "ipc://%s/drafter.sock" % d, "ipc://%s/verifier.sock" % d
    pat = r"metrics on http://127\.0\.0\.1:(\d+)/metrics"
    dr, dport = start([os.path.join(BIN, "specd-drafter"), "--endpoint", dep, "--model", MODEL,
                       "--metrics-port", "0"], pat)
    vr, vport = start([os.path.join(BIN, "specd-verifier"), "--endpoint", vep, "--model", MODEL,
                       "--metrics-port=0"], pat)
    try:
        for port in (dport, vport):
            status, _, data = request(port, "GET", "/health")
            check(status == 200, "daemon /health %d" % status)
            m = prom(port)
            check(m["specd:spec_decode_num_drafts_total"][""] == 0, "a fresh daemon counted drafts")
        subprocess.run([SPECD, "generate", "-m", MODEL, "-p",
                        "Repeat the following list exactly three times: apple, banana, cherry, date, "
                        "elderberry.", "-n", "40", "--temp", "0",
                        "--policy", "remote", "--policy-opts", "endpoint=%s,timeout_ms=2000" % dep,
                        "--verifier", vep, "--verifier-timeout-ms", "2000", "--draft-max", "4",
                        "--no-adaptive", "-t", "1"], check=True, capture_output=True)
        dm, vm = prom(dport), prom(vport)
        check(dm["specd:daemon_sequences_opened_total"][""] >= 1, "drafter opened no sequence")
        check(dm["specd:spec_decode_num_draft_tokens_total"][""] > 0, "drafter proposed nothing")
        check(vm["specd:spec_decode_num_drafts_total"][""] > 0, "verifier verified nothing")
        acc = vm["specd:spec_decode_num_accepted_tokens_total"][""]
        check(acc > 0 and sum(vm["specd:spec_decode_num_accepted_tokens_per_pos_total"].values())
              == acc, "verifier acceptance by position does not add up: %s" % vm)
        check(dm["specd:daemon_sequences_open"][""] == 0, "the drafter kept a closed sequence")
        print("ok: daemons' /metrics: drafter proposed %d, verifier accepted %d of %d"
              % (dm["specd:spec_decode_num_draft_tokens_total"][""], acc,
                 vm["specd:spec_decode_num_draft_tokens_total"][""]), flush=True)
        status, _, _ = request(dport, "GET", "/nothing")
        check(status == 404, "daemon unknown route %d" % status)
    finally:
        for p in (dr, vr):
            p.send_signal(signal.SIGTERM)
        for p in (dr, vr):
            try:
                check(p.wait(timeout=30) == 0, "a daemon did not exit 0 on SIGTERM")
            except subprocess.TimeoutExpired:
                p.kill()
                fail("a daemon did not stop on SIGTERM")
        subprocess.run(["rm", "-rf", d])


serve_tests()
daemon_tests()
print("test_serve: all passed")
