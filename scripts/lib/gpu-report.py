"""gpu-report: report.md and report.json of scripts/gpu-check from its work folder, and the
results table it prints last on stdout.

    python3 scripts/lib/gpu-report.py WORK OUT DEVICE COMMIT MODE STARTED FINISHED BUILD_S MODEL
        LLAMA_NOTE LOAD LIBS_NOTE

WORK holds results.tsv and bench.tsv (name, result, seconds) and logs/NAME.log; OUT receives
report.md and report.json. SPECD_GPU_CHECK_ROOT names the repository root, written "." in the
committed report (as the home folder is written "~").
"""
import json, os, re, sys
work, out, device, commit, mode, started, finished, build_s, model, llama_note, load, libs = sys.argv[1:13]
def read(p, tail=None):
    try:
        with open(p, errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    text = text[-tail:] if tail else text
    # the report is committed: paths of the machine it ran on become relative ones
    text = text.replace(os.environ["SPECD_GPU_CHECK_ROOT"], ".")
    return text.replace(os.path.expanduser("~"), "~")
tests = []
for line in read(os.path.join(work, "results.tsv")).splitlines():
    name, result, secs = line.split("\t")
    tests.append({"name": name, "result": result, "seconds": float(secs),
                  "output": read(os.path.join(work, "logs", name + ".log"), 20000)})
benches = []
for line in read(os.path.join(work, "bench.tsv")).splitlines():
    name, result, secs = line.split("\t")
    benches.append({"name": name, "result": result, "seconds": float(secs),
                    "output": read(os.path.join(work, "logs", name + ".log"), 20000)})
logs = {b["name"]: b["output"] for b in benches}

# bench_decode's "FIGURE name value" lines
specd = {}
for m in re.finditer(r"^FIGURE (\S+) (\S+)$", logs.get("bench_decode", ""), re.M):
    specd[m.group(1)] = float(m.group(2))

def llama_json(name):
    try:
        with open(os.path.join(work, "logs", name + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return []
llama = {}
for r in llama_json("llama_bench_decode"):
    if r.get("n_gen") and not r.get("n_prompt"):
        llama["decode_tok_s"] = r["avg_ts"]
        llama["decode_tok_s_stddev"] = r.get("stddev_ts")
        llama["gpu_info"] = r.get("gpu_info")
for r in llama_json("llama_bench_extend"):
    k = r.get("n_prompt")
    if k and not r.get("n_gen") and r.get("avg_ts"):
        llama[f"extend_ms_k{k}"] = 1e3 * k / r["avg_ts"]
if "extend_ms_k1" in llama:
    for k in range(1, 17):
        if f"extend_ms_k{k}" in llama:
            llama[f"extend_ratio_k{k}"] = llama[f"extend_ms_k{k}"] / llama["extend_ms_k1"]
# llama-batched-bench's table: |PP|TG|B|N_KV|T_PP|S_PP|T_TG|S_TG|T|S|
for m in re.finditer(r"^\|\s*(\d+) \|\s*(\d+) \|\s*(\d+) \|\s*\d+ \|\s*[\d.]+ \|\s*[\d.]+ \|"
                     r"\s*[\d.]+ \|\s*([\d.]+) \|", logs.get("llama_batched_bench", ""), re.M):
    llama[f"batch{m.group(3)}_tok_s"] = float(m.group(4))
ratios = {}
for key in ["decode_tok_s", "batch1_tok_s", "batch8_tok_s", "batch64_tok_s"]:
    if key in specd and llama.get(key):
        ratios[key] = specd[key] / llama[key]
anchor = {"llama_cpp": llama_note, "specd": specd, "llama": llama,
          "ratio_specd_over_llama": ratios, "decode_target": 1.5,
          "decode_target_met": (ratios["decode_tok_s"] >= 1.5) if "decode_tok_s" in ratios
          else None}
report = {"device": device, "commit": commit, "mode": mode, "started": started,
          "finished": finished, "build_seconds": int(build_s), "model": model, "libraries": libs,
          "host_load": load.strip(),
          "build_log_tail": read(os.path.join(work, "logs", "build.log"), 4000), "tests": tests,
          "benchmarks": benches, "figures": anchor}
with open(os.path.join(out, "report.json"), "w") as f:
    json.dump(report, f, indent=2)
md = ["# specd gpu-check", "", f"- device: {device}", f"- commit: {commit}",
      f"- build: {mode} ({build_s} s)", f"- from {started} to {finished}", f"- model: {model}",
      f"- host load at the end: {load.strip()}", f"- llama.cpp anchor: {llama_note}",
      f"- libraries: {libs}", "",
      "| test | result | seconds |", "|---|---|---|"]
md += [f"| {t['name']} | {t['result']} | {t['seconds']:.2f} |" for t in tests]
if mode == "none":
    md += ["", "Nothing was built. The build log's end:", "", "```", report["build_log_tail"], "```"]
def fmt(d, k, f="{:.1f}"):
    return f.format(d[k]) if k in d else "-"
md += ["", "## Benchmarks", "", "| benchmark | result | seconds |", "|---|---|---|"]
md += [f"| {b['name']} | {b['result']} | {b['seconds']:.2f} |" for b in benches]
if specd or llama:
    md += ["", "Same card, same GGUF; specd = bench_decode (CUDA backend), llama.cpp = llama-bench"
           " / llama-batched-bench (-ngl 99). Decode target: specd >= 1.5x llama.cpp.", "",
           "| figure | specd | llama.cpp | specd / llama.cpp |", "|---|---|---|---|"]
    for key, label in [("decode_tok_s", "decode tok/s, 1 sequence (16-token prompt, 128 tokens)"),
                       ("batch1_tok_s", "batched decode tok/s, 1 sequence"),
                       ("batch8_tok_s", "batched decode tok/s, 8 sequences"),
                       ("batch64_tok_s", "batched decode tok/s, 64 sequences")]:
        md.append(f"| {label} | {fmt(specd, key)} | {fmt(llama, key)} | "
                  f"{fmt(ratios, key, '{:.2f}x')} |")
    md += ["", "Extend of k rows after a 64-token prefix (a verify step): ms, and time over k = 1",
           "", "| k | specd ms | specd ratio | llama.cpp ms | llama.cpp ratio |",
           "|---|---|---|---|---|"]
    for k in range(1, 17):
        if f"extend_ms_k{k}" in specd or f"extend_ms_k{k}" in llama:
            md.append(f"| {k} | {fmt(specd, f'extend_ms_k{k}', '{:.3f}')} | "
                      f"{fmt(specd, f'extend_ratio_k{k}', '{:.2f}')} | "
                      f"{fmt(llama, f'extend_ms_k{k}', '{:.3f}')} | "
                      f"{fmt(llama, f'extend_ratio_k{k}', '{:.2f}')} |")
    if "device_weights_mib" in specd:
        md += ["", f"specd device memory: weights {specd['device_weights_mib']:.1f} MiB, KV "
               f"{specd['device_kv_mib']:.1f} MiB, scratch {specd['device_scratch_mib']:.1f} MiB "
               "(bench_decode's context: 64 sequences)"]
    if "decode_tok_s_graphs_off" in specd:
        md += ["", f"CUDA graphs (enabled {int(specd.get('graphs_enabled', 0))}): decode "
               f"{specd['decode_tok_s']:.1f} tok/s with graphs, {specd['decode_tok_s_graphs_off']:.1f} "
               f"with SPECD_CUDA_GRAPHS=0 ({specd['decode_graphs_speedup']:.2f}x); host launch calls "
               f"per decode step {int(specd.get('host_launches_per_step_graphs', 0))} with graphs, "
               f"{int(specd.get('host_launches_per_step_no_graphs', 0))} without"]
for t in tests:
    md += ["", f"## {t['name']}: {t['result']}", "", "```", t["output"].rstrip(), "```"]
for b in benches:
    md += ["", f"## {b['name']}: {b['result']}", "", "```", b["output"].rstrip(), "```"]
with open(os.path.join(out, "report.md"), "w") as f:
    f.write("\n".join(md) + "\n")

# the table gpu-check prints last: every test and benchmark, then the figures with their goals
rows = [(t["name"], t["result"], t["seconds"]) for t in tests]
rows += [(b["name"], b["result"], b["seconds"]) for b in benches]
width = max([len(r[0]) for r in rows] + [10])
print(f"specd gpu-check: {device}; commit {commit[:12]}; build {mode} {build_s} s")
for name, result, secs in rows:
    print(f"  {name:<{width}}  {result:<24} {secs:7.1f} s")
if "decode_tok_s" in specd:
    print(f"  decode tok/s: specd {specd['decode_tok_s']:.1f}, llama.cpp {fmt(llama, 'decode_tok_s')}"
          f" (goal specd >= 1.5x: {fmt(ratios, 'decode_tok_s', '{:.2f}x')})")
if "extend_ratio_k8" in specd:
    print(f"  extend(8)/extend(1): specd {specd['extend_ratio_k8']:.2f} (goal <= 1.2)")
