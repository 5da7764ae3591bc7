#!/usr/bin/env bash
# gpu-train on the CPU, tiny: its parts against the code they stand in for (test_gpu_train.py),
# prompts.chatml.json up to date with specd's tokenizer, then the whole command (a few hundred
# tokens, 3 steps) and the head it writes loaded by `specd generate --policy mrp`: it drafts and
# the output is plain decoding's (greedy and sampled). Skips (77) without a Python that has torch,
# numpy and gguf: $SPECD_TRAIN_PYTHON, else SOURCE/.venv-train (tools/train/README.md).
#   usage: test_gpu_train.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
model=${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf
py=${SPECD_TRAIN_PYTHON:-$src/.venv-train/bin/python}
if [[ ! -x $py ]] || ! "$py" -c 'import torch, numpy, gguf' 2>/dev/null; then
  echo "SKIP: no training Python with torch, numpy and gguf ($py; set SPECD_TRAIN_PYTHON or make" \
       "$src/.venv-train as tools/train/README.md says)"
  exit 77
fi
[[ -f $model ]] || { echo "FAIL: no model at $model"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=PASSIVE
start=$(date +%s)

SPECD_LIBRARY=$build/libspecd.so "$py" "$src/tools/train/chat_ids.py" check --model "$model"
"$py" "$src/tools/train/test_gpu_train.py" "$model"

SPECD_TRAIN_PYTHON=$py "$src/tools/train/gpu-train" --model "$model" --out "$tmp/out" --device cpu \
  --tokens 200 --gen-batch 4 --max-new 16 --steps 3 --budget-s 600 --eval-every-s 1000
n_files=$(find "$tmp/out" -type f | wc -l)
[[ $n_files -le 8 ]] || { echo "FAIL: $n_files files in the output folder (at most 8)"; exit 1; }
"$py" - "$tmp/out" <<'PY'
import json, os, sys
out = sys.argv[1]
r = json.load(open(os.path.join(out, "gpu-train.json")))
assert not r["errors"], r["errors"]
assert r["data"]["tokens"] >= 200 and r["data"]["heldout_sequences"] >= 1, r["data"]
assert r["training"]["steps"] == 3 and r["training"]["stopped_by"] == "--steps 3", r["training"]
assert len(r["loss_curve"]) == 3 and all(c["loss"] is not None for c in r["loss_curve"]), r["loss_curve"]
fda = r["first_draft_agreement"]
assert set(fda) >= {"before", "after", "no_head"}, fda
for f in ("mrp-head.q8_0.gguf", "mrp-head.f16.gguf", "gpu-train.log", "loss.tsv"):
    p = os.path.join(out, f)
    assert os.path.getsize(p) > 0 and os.path.getsize(p) <= 16 << 20, (f, os.path.getsize(p))
print(f"gpu-train: {r['data']['tokens']} tokens, {r['training']['steps']} steps, first-draft agreement "
      f"{fda['before']:.3f} -> {fda['after']:.3f} (no head {fda['no_head']:.3f}), {r['wall_s']} s")
PY

# the head loads in specd and drafts (min_conf=0: it drafts k every step even untrained; no
# adaptive guard), and mrp stays lossless
for head in "$tmp/out/mrp-head.q8_0.gguf" "$tmp/out/mrp-head.f16.gguf"; do
  for mode in "--temp 0" "--temp 0.8 --seed 5"; do
    # shellcheck disable=SC2086
    "$build/specd" generate -p "Name the four seasons." -n 16 $mode --no-adaptive --policy mrp \
      --policy-opts "head=$head,min_conf=0" 2>"$tmp/err.txt" >/dev/null || { cat "$tmp/err.txt"; exit 1; }
    grep -q 'output identical to plain decoding: yes' "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
    props=$(sed -n 's/.*acceptance rate .* (\([0-9]*\) of \([0-9]*\) proposals).*/\2/p' "$tmp/err.txt")
    [[ ${props:-0} -gt 0 ]] || { echo "FAIL: no drafts with $head"; cat "$tmp/err.txt"; exit 1; }
    echo "specd generate $mode with $(basename "$head"): $props proposals, identical to plain decoding"
  done
done
echo "test_gpu_train: passed in $(($(date +%s) - start)) s"
