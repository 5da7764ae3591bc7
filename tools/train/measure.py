#!/usr/bin/env python3
"""Runs `specd ab` for R-ISD at strides N = 2, 3, 4 with an adapter and prints one table:
acceptance, per-position acceptance, measured TPF, the TPF the paper's formula predicts from the
measured per-position rates (eq. 5 in the per-position form of include/specd/isd.h), speedup and
whether every output was token-identical to plain decoding."""
import argparse, json, os, subprocess, sys


def tpf_formula(acc):
    s, prod = [1.0], 1.0
    for p in acc:
        prod *= p
        s.append(prod)
    S = s[-1]
    return (1 - S + sum(s)) / (2 - S)


ap = argparse.ArgumentParser()
ap.add_argument("--specd", default="build/specd")
ap.add_argument("--adapter", default="models/adapters/smollm2-135m-risd")
ap.add_argument("--prompts", default="examples/prompts.txt")
ap.add_argument("-n", type=int, default=64)
ap.add_argument("--strides", default="2,3,4")
ap.add_argument("--extra", default="-t 1", help="more specd ab flags")
ap.add_argument("--out", default="/tmp/risd_ab")
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)
rows = []
for N in [int(v) for v in a.strides.split(",")]:
    opts = (f"adapter={a.adapter}," if a.adapter else "") + f"n={N}"
    js = os.path.join(a.out, f"ab_n{N}.json")
    cmd = [a.specd, "ab", "--policy", "risd", "--policy-opts", opts, "--prompts", a.prompts,
           "-n", str(a.n), "--json", js] + a.extra.split()
    print("$", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    if r.returncode not in (0, 1):
        sys.stderr.write(r.stderr)
        sys.exit(r.returncode)
    d = json.load(open(js))
    o = d["overall"]
    acc = o.get("acceptance_by_position", [])
    rows.append((N, o, acc, tpf_formula(acc) if acc else float("nan")))
print("\nN  identical acceptance  by position             TPF  TPF(formula)  speedup")
for N, o, acc, f in rows:
    print(f"{N}  {str(o['identical']):9} {o['acceptance_rate']:10.3f}  "
          f"{' '.join(f'{x:.3f}' for x in acc):24} {o['tpf']:4.2f}  {f:12.2f}  {o['speedup']:6.2f}x")
