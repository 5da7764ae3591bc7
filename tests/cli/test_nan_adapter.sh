#!/usr/bin/env bash
# An R-ISD adapter whose LoRA yields NaN (one lora_B tensor of the shipped adapter set to NaN)
# poisons only the LoRA-gated mask rows: their proposals are dropped with one warning, the base
# rows decide each step, and the output stays identical to plain decoding. It used to end the
# generation ("spec: sequence 0, logits row 1 token 0: nan").
set -euo pipefail
specd=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$src/artifacts/adapters/smollm2-135m-risd/adapter_config.json" "$tmp/"
python3 - "$src/artifacts/adapters/smollm2-135m-risd/adapter_model.safetensors" \
  "$tmp/adapter_model.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
header = json.loads(b[8:8 + n])
name = "base_model.model.model.layers.29.mlp.down_proj.lora_B.weight"
assert header[name]["dtype"] == "F16", header[name]
s, e = header[name]["data_offsets"]
b[8 + n + s:8 + n + e] = b"\x00\x7e" * ((e - s) // 2)  # f16 quiet NaN
open(sys.argv[2], "wb").write(b)
PY
head -n 2 "$src/examples/prompts.txt" > "$tmp/prompts.txt"
"$specd" ab --policy risd --policy-opts "adapter=$tmp" --prompts "$tmp/prompts.txt" -n 16 \
  --no-adaptive --json "$tmp/ab.json" > "$tmp/out.txt" 2> "$tmp/err.txt" || {
  cat "$tmp/err.txt"; echo "a NaN adapter must not end the generation"; exit 1; }
grep -q '"overall": {"identical": true' "$tmp/ab.json"
grep -q "adapter gave NaN/inf logits on .* LoRA-gated mask row" "$tmp/err.txt"
echo "NaN adapter: degraded to the base rows, output identical"
