#!/usr/bin/env bash
# --policy remote with the adaptive guard on (the default): steps the guard decodes plainly never
# reach the drafter, which then catches up on the gap by a commit. Such runs used to abort with
# "policy remote: N tokens since the last step". Also with the drafter killed (-9) and restarted
# twice mid-generation (the host frozen with SIGSTOP around each kill and restart, so both happen
# while it generates, however fast it decodes). Every run is identical to plain decoding.
# usage: test_remote_gap.sh BIN_DIR
set -euo pipefail
# the daemons compute the fingerprint hosts must match from the model's tokenizer
model=${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf
bin=$1
# shellcheck source=remote_util.sh
. "$(dirname "$0")/remote_util.sh"
dir=$(mktemp -d /tmp/specd-gap.XXXXXX)
chmod 700 "$dir"
ep="ipc://$dir/drafter.sock"
pid= g=
cleanup() {
  [ -n "$g" ] && kill -CONT "$g" 2>/dev/null && kill "$g" 2>/dev/null || true
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
instance=0
start_drafter() {
  instance=$((instance + 1))
  start_daemon pid "$dir/drafter.$instance.log" "$bin/specd-drafter" --endpoint "$ep" --model "$model"
}
start_drafter
bytes_over() { [ "$(wc -c < "$dir/out.txt")" -gt "$1" ]; }
gen() { # seed
  "$bin/specd" generate -p "Explain what a hash table is and give a small example in JavaScript." \
    -n 96 --temp 0.8 --seed "$1" --policy remote --policy-opts "endpoint=$ep,timeout_ms=2000" \
    > "$dir/out.txt" 2> "$dir/err.txt"
}
for seed in 1 3; do
  gen "$seed" || { cat "$dir/err.txt"; exit 1; }
  grep -q 'output identical to plain decoding: yes' "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
done
# kill -9 the drafter twice while a generation streams; the host decodes on without it for a
# while (its output grows), then a new drafter is up before it goes on
gen 3 & g=$!
for round in 1 2; do
  wait_until "output past $((round * 80)) bytes" 300 bytes_over $((round * 80))
  kill -STOP "$g"
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true
  at=$(wc -c < "$dir/out.txt")
  kill -CONT "$g"
  wait_until "output past $((at + 20)) bytes without a drafter" 300 bytes_over $((at + 20))
  kill -STOP "$g"
  start_drafter
  kill -CONT "$g"
done
wait "$g" || { cat "$dir/err.txt"; exit 1; }
g=
grep -q 'output identical to plain decoding: yes' "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
echo "remote policy with the adaptive guard: no lost tokens"
