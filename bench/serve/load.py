#!/usr/bin/env python3
"""Load test of a running `specd serve` (loopback): streamed chat requests from a real client (the
`openai` package; Python's http.client when it is missing) at each concurrency, per policy.

First a reference: each prompt once, alone, plainly (policy none) at temperature 0. Then, per
policy and concurrency C: N requests (the prompts in turn) with at most C in flight; each
response must equal its prompt's reference text (greedy decoding: speculation and batching must
change nothing). Prints one table row per (policy, C): completion tokens/s over the level's wall
time, latency p50/p99, time to first token p50/p99, acceptance, and the ratio of its throughput
to policy none's at the same C (measured in this run).

usage: load.py PORT PROMPTS_FILE --policies none,ngram --levels 1,4,16,64 --requests N
               --max-tokens M [--deadline SECONDS]
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import sys
import time

try:
    import openai  # the real client when it is installed (bench/serve/run makes a venv)
except ImportError:
    openai = None


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, int(round(q / 100.0 * len(xs) + 0.5)) - 1))
    return xs[i]


class Client:
    def __init__(self, port, model):
        self.port, self.model = port, model
        self.oa = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key="none",
                                max_retries=0, timeout=600) if openai else None

    def chat(self, prompt, policy, max_tokens, stream=True):
        """One request: (text, seconds to the first text, seconds in all, usage, speculation)."""
        body = dict(policy=policy, seed=1, draft_max=8)
        msgs = [{"role": "user", "content": prompt}]
        t0 = time.perf_counter()
        ttft, text, usage, spec = None, "", None, None
        if self.oa:
            s = self.oa.chat.completions.create(model=self.model, messages=msgs,
                                                max_tokens=max_tokens, temperature=0,
                                                stream=True, extra_body=body,
                                                stream_options={"include_usage": True})
            for chunk in s:
                if chunk.choices and chunk.choices[0].delta.content:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    text += chunk.choices[0].delta.content
                if chunk.usage:
                    usage = chunk.usage.completion_tokens
                extra = chunk.model_extra or {}
                if extra.get("metrics"):
                    spec = extra["metrics"]["speculative_decoding"]
        else:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
            c.request("POST", "/v1/chat/completions", json.dumps(dict(
                body, model=self.model, messages=msgs, max_tokens=max_tokens, temperature=0,
                stream=True, stream_options={"include_usage": True})),
                {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                raise RuntimeError("status %d: %s" % (r.status, r.read()[:200]))
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ch = json.loads(line[6:])
                d = ch["choices"][0]["delta"].get("content", "") if ch["choices"] else ""
                if d and ttft is None:
                    ttft = time.perf_counter() - t0
                text += d
                if "usage" in ch:
                    usage = ch["usage"]["completion_tokens"]
                    spec = ch["metrics"]["speculative_decoding"]
            c.close()
        return text, ttft if ttft is not None else time.perf_counter() - t0, \
            time.perf_counter() - t0, usage or 0, spec or {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("prompts")
    ap.add_argument("--model", default="SmolLM2-135M-Instruct.Q4_1")
    ap.add_argument("--policies", default="none,ngram")
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--requests", type=int, default=16, help="per level (at least C)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--deadline", type=float, default=800, help="seconds for the whole run")
    a = ap.parse_args()
    prompts = [l.strip() for l in open(a.prompts) if l.strip()]
    cl = Client(a.port, a.model)
    start = time.time()
    print("client: %s" % ("openai %s" % openai.__version__ if openai else "http.client"))
    ref = {}
    for p in prompts:  # the plain reference, one request at a time
        ref[p] = cl.chat(p, "none", a.max_tokens)[0]
    print("reference: %d prompts, plain, alone, T 0, max_tokens %d" % (len(prompts), a.max_tokens))
    hdr = ("policy", "conc", "reqs", "tok/s", "x none", "lat p50", "lat p99", "ttft p50",
           "ttft p99", "accept", "TPF", "identical")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "|".join("---" for _ in hdr) + "|")
    base, bad = {}, 0
    for c in [int(x) for x in a.levels.split(",")]:
        for pol in a.policies.split(","):
            if time.time() - start > a.deadline:
                print("deadline reached: stopping")
                return 1
            n = max(a.requests, c)
            jobs = [prompts[i % len(prompts)] for i in range(n)]
            t0 = time.perf_counter()
            with cf.ThreadPoolExecutor(max_workers=c) as ex:
                res = list(ex.map(lambda p: (p, cl.chat(p, pol, a.max_tokens)), jobs))
            wall = time.perf_counter() - t0
            toks = sum(r[3] for _, r in res)
            same = sum(1 for p, r in res if r[0] == ref[p])
            bad += n - same
            drafted = sum(r[4].get("num_draft_tokens", 0) for _, r in res)
            acc = sum(r[4].get("num_accepted_tokens", 0) for _, r in res)
            fwd = sum(r[4].get("num_target_forwards", 0) for _, r in res)
            tps = toks / wall
            if pol == "none":
                base[c] = tps
            ratio = "%.2fx" % (tps / base[c]) if c in base else "-"
            lat, ttft = [r[2] for _, r in res], [r[1] for _, r in res]
            print("| %s | %d | %d | %.1f | %s | %.2f | %.2f | %.3f | %.3f | %s | %.2f | %d/%d |" % (
                pol, c, n, tps, ratio, pct(lat, 50), pct(lat, 99), pct(ttft, 50), pct(ttft, 99),
                "%.2f" % (acc / drafted) if drafted else "-", toks / fwd if fwd else 0, same, n),
                flush=True)
    if bad:
        print("FAIL: %d responses differ from their plain reference" % bad)
        return 1
    print("every response identical to its plain run (T 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
