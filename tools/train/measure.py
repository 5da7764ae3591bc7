#!/usr/bin/env python3
"""Runs `specd ab` for R-ISD at strides N (default 2, 3, 4) and temperatures (default the CLI's
0.8) with one or more adapters and prints one table: acceptance, per-position acceptance, measured
TPF, the TPF the paper's formula predicts from the measured per-position rates (eq. 5 in the
per-position form of include/specd/isd.h), speedup and whether every output was token-identical
to plain decoding. Several --adapter flags compare adapters on the same prompts and settings
(acceptance and TPF do not depend on the machine's load; speedups do, so compare those only from
runs made back to back)."""
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
ap.add_argument("--adapter", action="append",
                help="adapter directory; repeat to compare; '' for none (default: the shipped one)")
ap.add_argument("--prompts", default="examples/prompts.txt")
ap.add_argument("-n", type=int, default=64)
ap.add_argument("--strides", default="2,3,4")
ap.add_argument("--temps", default="0.8", help="comma-separated temperatures")
ap.add_argument("--extra", default="-t 1", help="more specd ab flags (e.g. '-t 1 --no-adaptive')")
ap.add_argument("--out", default="/tmp/risd_ab")
a = ap.parse_args()
adapters = a.adapter if a.adapter else ["artifacts/adapters/smollm2-135m-risd"]
os.makedirs(a.out, exist_ok=True)
rows = []
for ad in adapters:
    for T in a.temps.split(","):
        for N in [int(v) for v in a.strides.split(",")]:
            opts = (f"adapter={ad}," if ad else "") + f"n={N}"
            tag = (os.path.basename(ad.rstrip("/")) or "none") + f"_T{T}_n{N}"
            js = os.path.join(a.out, f"ab_{tag}.json")
            cmd = [a.specd, "ab", "--policy", "risd", "--policy-opts", opts, "--prompts",
                   a.prompts, "-n", str(a.n), "--temp", T, "--json", js] + a.extra.split()
            print("$", " ".join(cmd), flush=True)
            r = subprocess.run(cmd, capture_output=True, text=True)
            sys.stdout.write(r.stdout)
            if r.returncode not in (0, 1):
                sys.stderr.write(r.stderr)
                sys.exit(r.returncode)
            o = json.load(open(js))["overall"]
            acc = o.get("acceptance_by_position", [])
            rows.append((ad or "none", T, N, o, acc, tpf_formula(acc) if acc else float("nan")))
print("\nadapter                          T    N  identical acceptance  by position             "
      "TPF  TPF(formula)  speedup")
for ad, T, N, o, acc, f in rows:
    print(f"{os.path.basename(ad.rstrip('/')):32} {T:4} {N}  {str(o['identical']):9} "
          f"{o['acceptance_rate']:10.3f}  {' '.join(f'{x:.3f}' for x in acc):24} {o['tpf']:4.2f}  "
          f"{f:12.2f}  {o['speedup']:6.2f}x")
