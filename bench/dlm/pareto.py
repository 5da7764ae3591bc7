#!/usr/bin/env python3
"""Quality-vs-TPF sweep of the wedlm policy (diffusion-LM issue): runs `specd ab --policy wedlm
--json` over a grid of (tau, lambda, W) for streaming decoding (mode=stream; --grid full adds
block-wise decoding at the same points, the dInfer decoders and iteration smoothing), on each
regime (a --tasks suite and/or --prompts files), and writes

  OUT/points/<config>__<regime>.json   each point's `specd ab --json` (kept: a rerun skips them)
  OUT/pareto.json                      per point: TPF, p_cache, acceptance, quality (NLL spec vs
                                       plain, rep-4, agreement at T 0, task pass rate), regime,
                                       Pareto flag; plain decoding's figures per regime; the
                                       streaming/block-wise comparisons; the setup and timings
  OUT/pareto.svg                       quality vs TPF per regime, Pareto front marked

Every point runs greedy (--temp 0, so agreement with plain decoding is defined), with the adaptive
guard off (its plain steps would cut block-wise blocks short and are not the decoder's), on
--threads threads (default 1). Python 3 standard library only.

  bench/dlm/pareto.py --adapter artifacts/adapters/smollm2-135m-wedlm --shift 0 \\
      --tasks bench/tasks/tasks.jsonl --out bench/dlm/out
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pareto_lib  # noqa: E402


def regime_name(path):
    base = os.path.basename(path)
    for ext in (".jsonl", ".txt"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return base


def run_point(args, cfg, regime, kind, path, points_dir):
    """Runs (or reuses) one point; returns (point dict, reused). The run's wall and CPU seconds
    are kept beside its JSON (<point>.json.time), so a rerun that reuses it still reports them."""
    pid = pareto_lib.config_id(cfg)
    out = os.path.join(points_dir, "%s__%s.json" % (pid, regime))
    reused = os.path.exists(out) and not args.force
    t0 = time.time()
    cpu = None
    if not reused:
        opts = "adapter=%s,shift=%d,%s" % (args.adapter, args.shift, pareto_lib.config_opts(cfg))
        cmd = [args.specd, "ab", "--policy", "wedlm", "--policy-opts", opts,
               "--tasks" if kind == "tasks" else "--prompts", path, "-n", str(args.n),
               "--temp", "0", "--seed", str(args.seed), "-t", str(args.threads),
               "--no-adaptive", "--json", out + ".part"]
        if args.model:
            cmd += ["-m", args.model]
        # the child's own CPU time (wait4's rusage), right with --jobs > 1 as well
        with open(out + ".log", "w", encoding="utf-8") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            _, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        cpu = ru.ru_utime + ru.ru_stime
        if proc.returncode != 0:
            with open(out + ".log", encoding="utf-8", errors="replace") as log:
                tail = log.read()[-2000:]
            raise RuntimeError("%s failed (exit %d):\n%s" % (" ".join(cmd), proc.returncode,
                                                            tail))
        with open(out + ".time", "w", encoding="utf-8") as f:
            json.dump({"seconds": round(time.time() - t0, 1), "cpu_seconds": round(cpu, 1),
                       "load_average": round(os.getloadavg()[0], 2)}, f)
        os.replace(out + ".part", out)
    with open(out, encoding="utf-8") as f:
        ab = json.load(f)
    p = pareto_lib.point_from_ab(cfg, regime, ab)
    timing = {}
    if os.path.exists(out + ".time"):
        with open(out + ".time", encoding="utf-8") as f:
            timing = json.load(f)
    p["seconds"] = timing.get("seconds")
    p["cpu_seconds"] = timing.get("cpu_seconds")
    p["load_average"] = timing.get("load_average")
    p["ab_json"] = os.path.relpath(out, args.out)
    return p, reused


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specd", default="build/specd", help="the specd binary (build/specd)")
    ap.add_argument("--adapter", default="artifacts/adapters/smollm2-135m-risd2",
                    help="the mask-row adapter directory (default: the R-ISD stand-in)")
    ap.add_argument("--shift", type=int, choices=(0, 1), default=None,
                    help="wedlm shift= (0: a WeDLM adapter, a mask row predicts its own "
                         "position; 1: the shifted R-ISD stand-in). Default: 1 for an adapter "
                         "whose name has 'risd', else 0")
    ap.add_argument("--tasks", default=None,
                    help="rule-checked task suite (JSONL) as a regime: quality = pass rate")
    ap.add_argument("--prompts", nargs="*", default=[],
                    help="prompt files, each a regime: quality = NLL under the base model")
    ap.add_argument("-n", type=int, default=48, help="tokens per output (default 48)")
    ap.add_argument("--threads", type=int, default=1, help="specd ab -t (default 1)")
    ap.add_argument("--jobs", type=int, default=1, help="points run at once (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-m", "--model", default=None, help="GGUF model (default: specd's)")
    ap.add_argument("--grid", choices=sorted(pareto_lib.GRIDS), default="default",
                    help="quick: 3 points; default: 12 streaming points (tau x lambda x W); "
                         "full: default + block-wise twins, dInfer decoders, IterSmooth")
    ap.add_argument("--quick", action="store_const", const="quick", dest="grid",
                    help="same as --grid quick")
    ap.add_argument("--out", default="bench/dlm/out", help="output directory")
    ap.add_argument("--force", action="store_true", help="rerun points whose JSON exists")
    args = ap.parse_args()
    if args.shift is None:
        args.shift = 1 if "risd" in os.path.basename(os.path.normpath(args.adapter)) else 0
    regimes = []
    if args.tasks:
        regimes.append((regime_name(args.tasks), "tasks", args.tasks))
    for p in args.prompts:
        regimes.append((regime_name(p), "prompts", p))
    if not regimes:
        regimes.append(("tasks", "tasks", "bench/tasks/tasks.jsonl"))
    if len({r[0] for r in regimes}) != len(regimes):
        ap.error("two regimes share a file name")
    if not os.access(args.specd, os.X_OK):
        ap.error("%s is not an executable (build specd first: bash scripts/build)" % args.specd)
    points_dir = os.path.join(args.out, "points")
    os.makedirs(points_dir, exist_ok=True)

    cfgs = pareto_lib.grid_configs(args.grid)
    jobs = [(c, r) for r in regimes for c in cfgs]
    print("sweep: %d configurations x %d regimes = %d points (grid %s, -n %d, %d thread(s), "
          "%d job(s))" % (len(cfgs), len(regimes), len(jobs), args.grid, args.n, args.threads,
                          args.jobs), file=sys.stderr)
    t_start = time.time()
    load = os.getloadavg()[0]
    points = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        futs = {ex.submit(run_point, args, c, r[0], r[1], r[2], points_dir): (c, r)
                for c, r in jobs}
        for k, fut in enumerate(concurrent.futures.as_completed(futs)):
            p, reused = fut.result()
            points.append(p)
            q, _, qlab = pareto_lib.quality_of(p)
            print("[%d/%d] %-13s %-45s TPF %.2f p_cache %.3f %s %s%s"
                  % (k + 1, len(jobs), p["regime"], p["options"], p["tpf"] or 0,
                     p["p_cache"] or 0, qlab, "%.3f" % q if q is not None else "-",
                     " (reused)" if reused else " (%.0f s, %.0f s CPU)"
                     % (p["seconds"], p["cpu_seconds"])),
                  file=sys.stderr)
    order = {(pareto_lib.config_id(c), r[0]): i for i, (c, r) in enumerate(jobs)}
    points.sort(key=lambda p: order[(p["id"], p["regime"])])
    pareto_lib.mark_fronts(points)

    plain = {}
    for p in points:
        ref = plain.setdefault(p["regime"], {})
        for k in ("nll_plain", "repeat_4gram_plain", "task_pass_rate_plain", "tasks_passed_plain",
                  "tokens_plain"):
            if p.get(k) is not None:
                ref.setdefault(k, p[k])
    plain_q = {r: v.get("task_pass_rate_plain", v.get("nll_plain")) for r, v in plain.items()}
    ran = [p for p in points if p["cpu_seconds"] is not None]
    doc = {
        "what": "wedlm quality vs TPF sweep (bench/dlm/pareto.py)",
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "setup": {"specd": args.specd, "adapter": args.adapter, "shift": args.shift,
                  "grid": args.grid, "n": args.n, "temperature": 0, "seed": args.seed,
                  "threads": args.threads, "jobs": args.jobs, "adaptive_guard": False,
                  "regimes": {r[0]: {"kind": r[1], "file": r[2]} for r in regimes},
                  "load_average_at_start": round(load, 2),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start))},
        "wall_seconds_this_invocation": round(time.time() - t_start, 1),
        # each point's own run (kept across reruns that reuse it)
        "cpu_seconds_total": round(sum(p["cpu_seconds"] for p in ran), 1) if ran else None,
        "cpu_seconds_per_point": round(sum(p["cpu_seconds"] for p in ran) / len(ran), 1)
        if ran else None,
        "quality_axis": {r: pareto_lib.quality_of([p for p in points if p["regime"] == r][0])[2]
                         for r in plain},
        "plain": plain,
        "points": points,
        "pareto": {r: [p["id"] for p in points if p["regime"] == r and p["pareto"]]
                   for r in plain},
        "stream_vs_block": pareto_lib.comparisons(points),
        "smoothing_gain": pareto_lib.smoothing_gain(points),
        "matched_quality": pareto_lib.matched_quality(points, plain_q),
    }
    json_path = os.path.join(args.out, "pareto.json")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    svg_path = os.path.join(args.out, "pareto.svg")
    pareto_lib.write_svg(svg_path, points, plain_q,
                         "wedlm: quality vs tokens per forward (%s, shift=%d, -n %d, T 0)"
                         % (os.path.basename(os.path.normpath(args.adapter)), args.shift, args.n))
    for r in plain:
        front = sorted((p for p in points if p["regime"] == r and p["pareto"]),
                       key=lambda p: p["tpf"])
        print("%s: Pareto front %s" % (r, ", ".join("%s (TPF %.2f, %.3f)" % (
            p["options"], p["tpf"], pareto_lib.quality_of(p)[0]) for p in front)))
    for c in doc["stream_vs_block"]:
        print("%s tau %g lambda %g W %d: streaming TPF %.2f vs block-wise %.2f (%.2fx)"
              % (c["regime"], c["tau"], c["lambda"], c["w"], c["tpf_stream"], c["tpf_block"],
                 c["tpf_ratio_stream_over_block"]))
    for c in doc["smoothing_gain"]:
        print("%s tau %g W %d: IterSmooth %g TPF %.2f vs %.2f off (%.2fx), quality %.3f vs %.3f"
              % (c["regime"], c["tau"], c["w"], c["smooth"], c["tpf_on"], c["tpf_off"],
                 c["tpf_gain"], c["quality_on"], c["quality_off"]))
    for m in doc["matched_quality"]:
        if m["level"] == pareto_lib.MATCH_LEVELS[1] and m["tpf"] is not None:
            print("%s, quality >= %g of plain's: %-28s best TPF %.2f (%s)"
                  % (m["regime"], m["level"], m["series"], m["tpf"], m["options"]))
    print("wrote %s and %s (%.0f s)" % (json_path, svg_path, time.time() - t_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
