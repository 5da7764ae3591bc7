#!/usr/bin/env bash
# kill -9 the drafter daemon in the middle of a speculative generation on the real model: the
# host keeps generating plainly, drafts again once a new drafter is up, and the text is identical
# to plain decoding (specd generate runs both and compares).
set -euo pipefail
# the daemons compute the fingerprint hosts must match from the model's tokenizer
model=${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf
bin=$1
dir=$(mktemp -d /tmp/specd-fault.XXXXXX)
chmod 700 "$dir"
ep="ipc://$dir/drafter.sock"
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
start_drafter() { "$bin/specd-drafter" --endpoint "$ep" --model "$model" 2>>"$dir/drafter.log" & pid=$!; }

start_drafter
"$bin/specd" generate -p "Count from 1 to 60, separated by commas." -n 160 --temp 0.8 --seed 5 \
  --policy remote --policy-opts "endpoint=$ep,timeout_ms=150" --draft-max 6 --no-adaptive \
  > "$dir/out.txt" 2> "$dir/err.txt" &
gen=$!
# the speculative run streams its text; kill the drafter once the first tokens are out
for _ in $(seq 1 600); do [ -s "$dir/out.txt" ] && break; sleep 0.05; done
[ -s "$dir/out.txt" ] || { echo "no output"; cat "$dir/err.txt"; exit 1; }
kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid=
sleep 1
start_drafter
wait "$gen"
cat "$dir/err.txt"
grep -q 'drafter unavailable' "$dir/err.txt"          # the fault hit the speculative run
grep -q 'drafter is back' "$dir/err.txt"               # and it reconnected
grep -q 'output identical to plain decoding: yes' "$dir/err.txt"
echo "remote drafter fault: ok"
