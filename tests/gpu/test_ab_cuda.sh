#!/usr/bin/env bash
# specd ab --device cuda on examples/prompts.txt: every lossless policy must be token-identical to
# plain decoding on the GPU (both runs on the device: identity is per backend), under greedy and
# under coupled acceptance at T 0.8. Every policy that makes contexts of its own runs them there
# too (draft's draft model, layerskip's, mrp's head). Prints each run's identity, speedup and
# tokens per target forward (TPF). Skips (exit 77) without a CUDA device or without the model.
# remote (a specd-drafter daemon) is left out: it verifies like ngram and needs the daemons.
set -euo pipefail
specd=$1 src=$2
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "no CUDA device (nvidia-smi lists none): skipped"
  exit 77
fi
model=""
for m in "${SPECD_MODEL:-}" "${SPECD_TEST_MODEL:-}" \
         "${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf"; do
  if [ -n "$m" ] && [ -f "$m" ]; then model=$m; break; fi
done
[ -n "$model" ] || { echo "no default model (SPECD_MODEL, SPECD_TEST_MODEL): skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=${SPECD_AB_CUDA_TOKENS:-16}
art=$src/artifacts
# NAME|OPTIONS: the lossless policies (docs/policies.md), the artifacts named explicitly since -m
# gives none by default
policies=(
  "ngram|"
  "suffix|"
  "recycle|"
  "draft|model=$model"
  "layerskip|"
  "isd|"
  "risd|adapter=$art/adapters/smollm2-135m-risd"
  "mrp|head=$art/mrp/smollm2-135m-mrp.gguf,mode=spec"
  "wedlm|adapter=$art/adapters/smollm2-135m-wedlm,mode=lossless"
  "sdar|adapter=$art/adapters/smollm2-135m-sdar,mode=lossless"
)
modes=("greedy|--accept greedy --temp 0" "coupled T0.8|--accept coupled --temp 0.8 --seed 7")
figure='import json,sys
o=json.load(open(sys.argv[1]))["overall"]
n=len(json.load(open(sys.argv[1]))["prompts"])
ok=sum(p["identical"] for p in json.load(open(sys.argv[1]))["prompts"])
print("identical %d/%d, speedup %.2fx, TPF %.2f, acceptance %.3f, plain %.1f tok/s, spec %.1f tok/s%s"
      % (ok, n, o["speedup"], o["tpf"], o["acceptance_rate"], o["tokens_per_s_plain"],
         o["tokens_per_s_spec"], ", LOSSY" if o["lossy"] else ""))
sys.exit(0 if ok == n and o["identical"] and not o["lossy"] else 1)'
failed=0
# the device memory of the context `specd generate` would make (weights, KV, scratch)
if "$specd" inspect --device cuda --n-ctx 4096 "$model" > "$tmp/inspect.txt" 2> "$tmp/err.txt"; then
  sed -n '/^context on/,$p' "$tmp/inspect.txt"
  grep -Eq '^  device weights +[1-9]' "$tmp/inspect.txt" && grep -Eq '^  device KV +[1-9]' "$tmp/inspect.txt" ||
    { echo "FAIL inspect --device cuda: no device memory for the weights or the KV"; failed=1; }
else
  echo "FAIL inspect --device cuda: $(cat "$tmp/err.txt")"
  failed=1
fi
echo "specd ab --device cuda, $(wc -l < "$src/examples/prompts.txt") prompts, -n $n, $(nvidia-smi -L | head -1)"
for entry in "${policies[@]}"; do
  name=${entry%%|*} opts=${entry#*|}
  for mode in "${modes[@]}"; do
    label=${mode%%|*} flags=${mode#*|}
    args=(ab -m "$model" --device cuda --policy "$name" --prompts "$src/examples/prompts.txt"
          -n "$n" --no-quality --no-adaptive --json "$tmp/ab.json")
    [ -n "$opts" ] && args+=(--policy-opts "$opts")
    # shellcheck disable=SC2206 # the mode's flags are words
    args+=($flags)
    set +e
    "$specd" "${args[@]}" > "$tmp/table.txt" 2> "$tmp/err.txt"
    rc=$?
    set -e
    if [ ! -s "$tmp/ab.json" ]; then
      echo "FAIL $name $label: specd ab exited $rc without figures"
      grep -v '^\[' "$tmp/err.txt" | tail -5
      failed=1
    elif line=$(python3 -c "$figure" "$tmp/ab.json") && [ "$rc" = 0 ]; then
      echo "ok   $name $label: $line"
    else
      echo "FAIL $name $label (exit $rc): $line"
      grep 'DIVERGED' "$tmp/err.txt" | head -3
      failed=1
    fi
    rm -f "$tmp/ab.json"
  done
done
[ "$failed" = 0 ] || { echo "specd ab --device cuda: FAILED (see the FAIL lines)"; exit 1; }
echo "specd ab --device cuda: every lossless policy token-identical to plain decoding"
