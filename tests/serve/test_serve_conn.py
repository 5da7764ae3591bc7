#!/usr/bin/env python3
"""specd serve against hostile and unusual clients, on the real model over real loopback sockets
(Python's stdlib only).

Starts `specd serve --request-timeout 2 --max-conns-per-ip 32` with an API key (from the
environment), then checks:
  - the key: /v1/* without it, or with a wrong one, gets 401 with an OpenAI-style error; with it,
    200; /health and /metrics stay open; HEAD /health answers GET's headers and no body;
  - a client that shuts its sending side after the request (as `nc -N` does) still gets its
    whole answer, streamed and not, the same text as a plain request's, and is not counted as
    an abort;
  - a flood from 127.0.0.2 (connections that trickle a header line every 0.3 s, connections that
    send nothing) does not keep a client on 127.0.0.1 out: /health and a completion are each
    answered within 1 s while it goes on (the completion within 1 s more than it takes without
    the flood, which sanitizers or a loaded machine make longer); at most 32 of the flood's
    connections are held (the others are closed as they come), and
    the server closes every one of them by the request deadline, although they keep sending;
  - a Content-Length over --max-body gets 413 at once; bytes that are not HTTP get a 400 or the
    connection closed, at once when they make a line, by the deadline when they do not.

usage: test_serve_conn.py BUILD_DIR MODEL
"""
import http.client
import json
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time

from serve_fixture import check, fail

BIN, MODEL = sys.argv[1], sys.argv[2]
SPECD = os.path.join(BIN, "specd")
KEY = "sk-specd-test-%d" % os.getpid()
AUTH = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}
REQUEST_TIMEOUT = 2
PER_IP = 32
FLOOD_SLOW, FLOOD_IDLE = 150, 150  # together more than the old fixed limit of 256 connections


def start():
    env = dict(os.environ, SPECD_API_KEY=KEY)
    p = subprocess.Popen([SPECD, "serve", "-m", MODEL, "--port", "0", "-t", "1", "--max-seqs", "4",
                          "--request-timeout", str(REQUEST_TIMEOUT),
                          "--max-conns-per-ip", str(PER_IP)],
                         stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    while True:  # the server prints its port once it listens (or dies: EOF)
        line = p.stderr.readline()
        if not line:
            p.kill()
            fail("specd serve did not start:\n" + "".join(lines))
        lines.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, int(m.group(1))


def request(port, method, path, body=None, headers=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers=headers or {})
    r = c.getresponse()
    out = r.status, r.getheaders(), r.read()
    c.close()
    return out


def timed(fn):
    t0 = time.monotonic()
    out = fn()
    return out, time.monotonic() - t0


def metrics(port):
    status, _, data = request(port, "GET", "/metrics")
    check(status == 200, "/metrics -> %d" % status)
    m = re.search(r'^specd:request_success_total\{finished_reason="abort"\} (\S+)$', data.decode(),
                  re.M)
    check(m, "/metrics has no abort counter")
    return float(m.group(1))


def read_all(sock, seconds):
    """Everything the server sends until it closes (or the deadline passes)."""
    sock.settimeout(seconds)
    out = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return out
            out += chunk
    except OSError as e:
        fail("reading an answer: %r after %r" % (e, out[:200]))


def final_response(raw):
    """Status and body of the final answer, past any interim 1xx answers; a chunked body
    decoded."""
    while True:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        check(sep, "no whole answer head in %r" % raw[:300])
        status = int(head.split(b" ", 2)[1])
        if status >= 200:
            break
        raw = rest
    headers = head.lower()
    if b"transfer-encoding: chunked" in headers:
        body = b""
        while True:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            body, rest = body + rest[:n], rest[n + 2:]
        return status, body
    m = re.search(rb"content-length: (\d+)", headers)
    check(m, "an answer with neither a length nor chunks: %r" % head)
    body = rest[:int(m.group(1))]
    check(len(body) == int(m.group(1)), "the answer was cut: %r" % raw[-200:])
    return status, body


def half_closed(port, body):
    """Sends the request, shuts the sending side, and reads the whole answer."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % (KEY.encode(), len(data)) + data)
    s.shutdown(socket.SHUT_WR)
    raw = read_all(s, 120)
    s.close()
    return final_response(raw)


def auth_tests(port):
    comp = {"prompt": "hi", "max_tokens": 1}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer " + KEY + "x"},
                    {"Authorization": "Basic " + KEY}):
        status, hdrs, data = request(port, "POST", "/v1/completions", comp, headers)
        check(status == 401, "POST /v1/completions with %s -> %d" % (headers, status))
        err = json.loads(data)["error"]
        check(err["message"] and err["type"], "401 without an OpenAI-style error: %s" % data)
        check(dict(hdrs).get("WWW-Authenticate") == "Bearer", "401 without WWW-Authenticate")
    check(request(port, "GET", "/v1/models")[0] == 401, "/v1/models without the key")
    status, _, data = request(port, "GET", "/v1/models", headers=AUTH)
    check(status == 200 and json.loads(data)["data"], "/v1/models with the key -> %d" % status)
    status, _, data = request(port, "POST", "/v1/completions", comp, AUTH)
    check(status == 200, "POST /v1/completions with the key -> %d %s" % (status, data[:200]))
    status, _, got = request(port, "GET", "/health")
    check(status == 200, "/health needs no key: %d" % status)
    metrics(port)  # needs no key either
    # HEAD: GET's status and headers, no body (the connection stays usable after it)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("HEAD", "/health")
    r = c.getresponse()
    check(r.status == 200 and r.read() == b"", "HEAD /health -> %d" % r.status)
    check(int(r.getheader("Content-Length")) == len(got), "HEAD /health's Content-Length")
    c.request("GET", "/health")
    r = c.getresponse()
    check(r.status == 200 and r.read() == got, "GET after HEAD on one connection")
    c.close()
    print("ok: the API key guards /v1/*, /health and /metrics stay open, HEAD answers",
          flush=True)


def half_close_tests(port):
    body = {"prompt": "The capital of France is", "max_tokens": 24, "temperature": 0}
    status, _, data = request(port, "POST", "/v1/completions", body, AUTH)
    check(status == 200, "reference answer -> %d" % status)
    want = json.loads(data)["choices"][0]["text"]
    aborts = metrics(port)
    status, data = half_closed(port, body)
    check(status == 200, "half-closed, whole answer: status %d %r" % (status, data[:200]))
    got = json.loads(data)
    check(got["choices"][0]["text"] == want and got["usage"]["completion_tokens"] == 24,
          "half-closed, whole answer: %r, want %r" % (got["choices"][0]["text"], want))
    status, data = half_closed(port, dict(body, stream=True))
    check(status == 200, "half-closed, streamed: status %d %r" % (status, data[:200]))
    events = [e for e in data.decode().split("\n\n") if e]
    check(events and events[-1] == "data: [DONE]", "half-closed stream cut: %r" % events[-2:])
    text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1])
    check(text == want, "half-closed, streamed: %r, want %r" % (text, want))
    check(metrics(port) == aborts, "a half-closed client was counted as gone")
    print("ok: a half-closed client gets its whole answer, streamed and not", flush=True)


class Flood:
    """Connections from 127.0.0.2: some trickle a header line every 0.3 s, some send nothing.
    Records when the server closed each."""

    def __init__(self, port):
        self.socks, self.slow = [], set()
        self.opened_at, self.closed_at = {}, {}  # monotonic seconds; seconds after opening
        self.t0 = time.monotonic()
        for i in range(FLOOD_SLOW + FLOOD_IDLE):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.settimeout(10)
            s.connect(("127.0.0.1", port))
            self.opened_at[s] = time.monotonic()
            s.setblocking(False)
            if i < FLOOD_SLOW:
                s.send(b"GET /health HTTP/1.1\r\nHost: x\r\n")
                self.slow.add(s)
            self.socks.append(s)
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def open(self):
        return [s for s in self.socks if s not in self.closed_at]

    def note_closed(self, now):
        live = self.open()
        if not live:
            return
        readable, _, _ = select.select(live, [], [], 0)
        for s in readable:
            try:
                gone = s.recv(4096) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                self.closed_at[s] = now - self.opened_at[s]

    def run(self):
        while not self.stop:
            now = time.monotonic()
            self.note_closed(now)
            for s in self.open():
                if s in self.slow:
                    try:
                        s.send(b"X-Slow: 1\r\n")
                    except OSError:
                        self.closed_at[s] = now - self.opened_at[s]
            time.sleep(0.3)  # the trickle's pace, not a verdict

    def close(self):
        self.stop = True
        self.thread.join()
        for s in self.socks:
            s.close()


def flood_tests(port):
    comp = {"prompt": "The capital of France is", "max_tokens": 2, "temperature": 0}
    # The completion's own time on this machine (sanitizers, load) comes on top of the 1 s.
    alone = min(timed(lambda: request(port, "POST", "/v1/completions", comp, AUTH))[1]
                for _ in range(2))
    flood = Flood(port)
    try:
        # while it goes on, a client elsewhere is served at once
        worst = [0.0, 0.0]
        for i in range(3):
            (status, _, _), t = timed(lambda: request(port, "GET", "/health", timeout=5))
            check(status == 200 and t < 1.0, "/health under a flood: %d in %.2f s" % (status, t))
            worst[0] = max(worst[0], t)
            (status, _, data), t = timed(
                lambda: request(port, "POST", "/v1/completions", comp, AUTH, timeout=5))
            check(status == 200 and t < 1.0 + alone, "a completion under a flood: %d in %.2f s "
                  "(%.2f s alone) %s" % (status, t, alone, data[:200]))
            worst[1] = max(worst[1], t)
        # every flood connection is closed, those held by the deadline although they keep
        # sending; those over the per-address limit as they come
        deadline = time.monotonic() + REQUEST_TIMEOUT + 5
        while flood.open() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = flood.open()
        check(not left, "%d flood connections still open %.1f s after the flood began"
              % (len(left), time.monotonic() - flood.t0))
        held = [age for age in flood.closed_at.values() if age >= REQUEST_TIMEOUT / 2]
        check(0 < len(held) <= PER_IP, "%d of the flood's connections held, want 1..%d"
              % (len(held), PER_IP))
        check(min(held) >= REQUEST_TIMEOUT - 0.3, "a held connection closed after %.1f s, before "
              "the %d s deadline" % (min(held), REQUEST_TIMEOUT))
        last = max(held)
        print("ok: a flood of %d connections from one address: %d held, closed %.1f s after "
              "they opened at the latest; meanwhile /health answered in %.3f s at worst, "
              "a 2-token completion in %.3f s (%.3f s without the flood)"
              % (len(flood.socks), len(held), last, worst[0], worst[1], alone), flush=True)
    finally:
        flood.close()


def bad_bytes_tests(port):
    # a Content-Length over --max-body: 413 without waiting for the body
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
              b"Content-Length: 100000000000\r\n\r\n" % KEY.encode())
    raw, t = timed(lambda: read_all(s, 5))
    s.close()
    status, body = final_response(raw)
    check(status == 413 and t < 1.0, "a huge Content-Length: %d in %.2f s" % (status, t))
    check(json.loads(body)["error"]["message"], "413 without an error message")
    # a line that is not HTTP: 400, or the connection closed, at once
    for line, want in ((b"THIS IS NOT HTTP\r\n\r\n", b"HTTP/1.1 400"),
                       (b"SSH-2.0-OpenSSH_9.6\r\n", None)):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(line)
        raw, t = timed(lambda: read_all(s, 5))
        s.close()
        check((raw.startswith(want) if want else raw == b"" or raw[9:10] == b"4") and t < 1.0,
              "%r: %r in %.2f s" % (line, raw[:40], t))
    # no line at all (a TLS hello on a plain port): closed by the deadline
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    raw, t = timed(lambda: read_all(s, REQUEST_TIMEOUT + 5))
    s.close()
    check(t < REQUEST_TIMEOUT + 1.5, "a TLS hello was held %.2f s" % t)
    print("ok: 413 for a huge Content-Length, 400 for a bad line, a TLS hello closed after "
          "%.1f s" % t, flush=True)


srv, port = start()
try:
    auth_tests(port)
    half_close_tests(port)
    flood_tests(port)
    bad_bytes_tests(port)
    # the server is still whole
    status, _, _ = request(port, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2},
                           AUTH)
    check(status == 200, "after all that: %d" % status)
    srv.terminate()
    check(srv.wait(timeout=60) == 0, "specd serve did not exit 0 on SIGTERM")
finally:
    if srv.poll() is None:
        srv.kill()
        srv.wait()
print("test_serve_conn: all passed")
