#!/usr/bin/env bash
# --policy remote with the adaptive guard on (the default): steps the guard decodes plainly never
# reach the drafter, which then catches up on the gap by a commit. Such runs used to abort with
# "policy remote: N tokens since the last step". Also with the drafter killed (-9) and restarted
# twice mid-generation. Every run is identical to plain decoding.
# usage: test_remote_gap.sh BIN_DIR
set -euo pipefail
# the daemons compute the fingerprint hosts must match from the model's tokenizer
model=${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf
bin=$1
dir=$(mktemp -d /tmp/specd-gap.XXXXXX)
chmod 700 "$dir"
ep="ipc://$dir/drafter.sock"
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
start_drafter() {
  "$bin/specd-drafter" --endpoint "$ep" --model "$model" 2>>"$dir/drafter.log" & pid=$!
  for _ in $(seq 1 100); do [ -S "$dir/drafter.sock" ] && break; sleep 0.05; done
}
start_drafter
gen() { # seed
  "$bin/specd" generate -p "Explain what a hash table is and give a small example in JavaScript." \
    -n 96 --temp 0.8 --seed "$1" --policy remote --policy-opts "endpoint=$ep,timeout_ms=2000" \
    > "$dir/out.txt" 2> "$dir/err.txt"
}
for seed in 1 3; do
  gen "$seed" || { cat "$dir/err.txt"; exit 1; }
  grep -q 'output identical to plain decoding: yes' "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
done
# kill -9 the drafter twice while a generation streams
gen 3 & g=$!
for round in 1 2; do
  for _ in $(seq 1 400); do [ "$(wc -c < "$dir/out.txt")" -gt $((round * 60)) ] && break; sleep 0.05; done
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true
  sleep 0.3
  start_drafter
done
wait "$g" || { cat "$dir/err.txt"; exit 1; }
grep -q 'output identical to plain decoding: yes' "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
echo "remote policy with the adaptive guard: no lost tokens"
