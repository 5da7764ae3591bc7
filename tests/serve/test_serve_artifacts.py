#!/usr/bin/env python3
"""specd serve matches the shipped artifacts to its model by fingerprint, as the CLI does
(policy/artifacts.h): started with -m naming the default model by a path of its own, a request
for mrp (or risd) with no options runs with the shipped head (adapter) instead of being refused
for want of one, and is token-identical to plain decoding (greedy); a server whose default policy
needs an artifact and whose model has none refuses to start, naming the option.

usage: test_serve_artifacts.py BUILD_DIR MODEL
"""
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

BIN, MODEL = sys.argv[1], sys.argv[2]
SPECD = os.path.join(BIN, "specd")


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def start(cmd):
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    lines, deadline = [], time.time() + 120
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, int(m.group(1))
    p.kill()
    fail("specd serve did not start:\n" + "".join(lines))


def complete(port, policy):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "Count from 1 to 20:", "max_tokens": 16, "temperature": 0, "seed": 1,
         "policy": policy, "adaptive": False}).encode(),
        headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        fail("policy %s: %d %s" % (policy, r.status, data[:300]))
    return json.loads(data)


with tempfile.TemporaryDirectory() as tmp:
    link = os.path.join(tmp, "served.gguf")
    os.symlink(os.path.abspath(MODEL), link)
    srv, port = start([SPECD, "serve", "-m", link, "--port", "0", "-t", "2", "--max-seqs", "2",
                       "--policy", "mrp"])
    try:
        plain = complete(port, "none")["choices"][0]["text"]
        for policy in ("mrp", "risd"):
            r = complete(port, policy)
            sd = r["metrics"]["speculative_decoding"]
            if sd["policy"] != policy or r["choices"][0]["text"] != plain:
                fail("%s: %s, text %r != plain %r" % (policy, sd, r["choices"][0]["text"], plain))
            print("ok: %s with no options on the served model: %s" % (policy, sd), flush=True)
    finally:
        srv.terminate()
        srv.wait(timeout=60)

    # another target: the default model with one norm weight changed
    other = os.path.join(tmp, "other.gguf")
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                 "make_other_target.py"), SPECD, MODEL, other],
                   check=True)
    p = subprocess.run([SPECD, "serve", "-m", other, "--port", "0", "--policy", "mrp"],
                       capture_output=True, text=True, timeout=120)
    if p.returncode == 0 or "needs head=PATH" not in p.stderr:
        fail("serve on another target with --policy mrp: rc %d, %s" % (p.returncode, p.stderr))
    print("ok: another target's server refuses mrp without a head", flush=True)
