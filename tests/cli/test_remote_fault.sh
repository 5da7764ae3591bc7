#!/usr/bin/env bash
# kill -9 the drafter daemon in the middle of a speculative generation on the real model: the
# host keeps generating plainly, drafts again once a new drafter is up, and the text is identical
# to plain decoding (specd generate runs both and compares). The host is frozen (SIGSTOP) while
# the drafter is killed and while the new one starts, so it meets the dead drafter and then the
# new one before its generation can end, however fast it decodes.
set -euo pipefail
# the daemons compute the fingerprint hosts must match from the model's tokenizer
model=${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf
bin=$1
# shellcheck source=remote_util.sh
. "$(dirname "$0")/remote_util.sh"
dir=$(mktemp -d /tmp/specd-fault.XXXXXX)
chmod 700 "$dir"
ep="ipc://$dir/drafter.sock"
pid= gen=
cleanup() {
  [ -n "$gen" ] && kill -CONT "$gen" 2>/dev/null && kill "$gen" 2>/dev/null || true
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

start_daemon pid "$dir/drafter1.log" "$bin/specd-drafter" --endpoint "$ep" --model "$model"
"$bin/specd" generate -p "Count from 1 to 60, separated by commas." -n 160 --temp 0.8 --seed 5 \
  --policy remote --policy-opts "endpoint=$ep,timeout_ms=150" --draft-max 6 --no-adaptive \
  > "$dir/out.txt" 2> "$dir/err.txt" &
gen=$!
# the speculative run streams its text; kill the drafter once the first tokens are out
wait_until "the first tokens" 300 test -s "$dir/out.txt"
kill -STOP "$gen"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid=
kill -CONT "$gen"
wait_until "the host to find the drafter gone" 300 grep -q 'drafter unavailable' "$dir/err.txt"
kill -STOP "$gen"
stopped=$(date +%s%N)
start_daemon pid "$dir/drafter2.log" "$bin/specd-drafter" --endpoint "$ep" --model "$model"
wait_until "the host's reconnect back-off (200 ms) to pass" 60 at_least_ms "$stopped" 500
kill -CONT "$gen"
wait "$gen" || { cat "$dir/err.txt"; exit 1; }
gen=
cat "$dir/err.txt"
grep -q 'drafter unavailable' "$dir/err.txt"          # the fault hit the speculative run
grep -q 'drafter is back' "$dir/err.txt"               # and it reconnected
grep -q 'output identical to plain decoding: yes' "$dir/err.txt"
echo "remote drafter fault: ok"
