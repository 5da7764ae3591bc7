#!/usr/bin/env python3
"""Checks MRP data shards written by specd-gen-data (format: tools/train/gen_shard.h).

Per shard: DONE exists; tokens.i32 and hidden.f16 sizes match seqs.json's n_tokens and n_embd;
sequences tile [0, n_tokens) in order; token ids < n_vocab; every hidden value finite.

With --model: the stored hidden rows against the model's tied head E (token_embd.weight,
dequantized with the `gguf` package). For a greedy sequence (temp 0) the token at j+1 IS the
argmax of the logits the runtime returned for row j, so argmax(E . h_j) must equal x_{j+1} for
every generated position; the runtime's quantized dot products and the F16 storage of h may flip
near-ties, so the agreement rate is reported and the check fails below --min-agree. For sampled
sequences it reports how often x_{j+1} is E . h_j's top-1 and its mean log-probability (a sanity
figure: sampled text at T 0.8 should mostly follow the model).

usage: check_data.py SHARD_DIR... [--model GGUF] [--min-agree 0.99] [--max-rows N]
"""
import argparse, json, os, sys

import numpy as np


def load_embd(path):
    import gguf
    r = gguf.GGUFReader(path)
    for t in r.tensors:
        if t.name == "token_embd.weight":
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            shape = [int(x) for x in reversed(t.shape.tolist())]
            return np.asarray(a, dtype=np.float32).reshape(shape)
    raise SystemExit("no token_embd.weight in " + path)


def check_shard(d, E, args):
    bad = []
    if not os.path.exists(os.path.join(d, "DONE")):
        return [f"{d}: no DONE"]
    meta = json.load(open(os.path.join(d, "seqs.json")))
    n, e = meta["n_tokens"], meta["n_embd"]
    tok = np.fromfile(os.path.join(d, "tokens.i32"), dtype="<i4")
    hid = np.fromfile(os.path.join(d, "hidden.f16"), dtype="<f2")
    if tok.size != n:
        bad.append(f"{d}: tokens.i32 holds {tok.size} ids, seqs.json says {n}")
    if hid.size != n * e:
        bad.append(f"{d}: hidden.f16 holds {hid.size} halves, expected {n} x {e}")
    if bad:
        return bad
    hid = hid.reshape(n, e)
    off = 0
    for i, s in enumerate(meta["sequences"]):
        if s["offset"] != off or s["n_tokens"] <= s["n_prompt"] or s["n_prompt"] < 1:
            bad.append(f"{d}: sequence {i} offset {s['offset']} (expected {off}), "
                       f"n_prompt {s['n_prompt']}, n_tokens {s['n_tokens']}")
        off += s["n_tokens"]
    if off != n:
        bad.append(f"{d}: sequences cover {off} tokens, n_tokens is {n}")
    if tok.min() < 0 or (E is not None and tok.max() >= E.shape[0]):
        bad.append(f"{d}: token id out of range ({tok.min()}..{tok.max()})")
    if not np.isfinite(hid).all():
        bad.append(f"{d}: {int((~np.isfinite(hid)).sum())} hidden values are not finite")
    temps = [s["temp"] for s in meta["sequences"]]
    print(f"{d}: {n} tokens, {len(meta['sequences'])} sequences "
          f"({sum(t == 0 for t in temps)} greedy), mean length {n / max(1, len(temps)):.1f}, "
          f"stops {sum(s['stop'] == 'eog' for s in meta['sequences'])} eog")
    if E is None or bad:
        return bad
    g_rows, s_rows = [], []
    for s in meta["sequences"]:
        o, p, m = s["offset"], s["n_prompt"], s["n_tokens"]
        rows = list(range(o + p - 1, o + m - 1))  # rows whose next token was generated
        (g_rows if s["temp"] == 0 else s_rows).extend(rows)
    for name, rows in (("greedy", g_rows), ("sampled", s_rows)):
        rows = np.array(rows[: args.max_rows], dtype=np.int64)
        if rows.size == 0:
            continue
        agree, lp = 0, 0.0
        for c in range(0, rows.size, 2048):
            r = rows[c: c + 2048]
            z = hid[r].astype(np.float32) @ E.T
            nxt = tok[r + 1]
            agree += int((z.argmax(1) == nxt).sum())
            zm = z.max(1, keepdims=True)
            lse = (zm[:, 0] + np.log(np.exp(z - zm).sum(1)))
            lp += float((z[np.arange(r.size), nxt] - lse).sum())
        rate = agree / rows.size
        print(f"  {name}: argmax(E . h_j) == x_(j+1) on {agree} of {rows.size} rows ({rate:.4f}), "
              f"mean log p(x_(j+1)) {lp / rows.size:.3f}")
        if name == "greedy" and rate < args.min_agree:
            bad.append(f"{d}: greedy rows agree {rate:.4f} < {args.min_agree}")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shards", nargs="+")
    ap.add_argument("--model")
    ap.add_argument("--min-agree", type=float, default=0.99)
    ap.add_argument("--max-rows", type=int, default=20000)
    args = ap.parse_args()
    E = load_embd(args.model) if args.model else None
    bad = []
    for d in args.shards:
        bad += check_shard(d, E, args)
    for b in bad:
        print("FAIL", b, file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
