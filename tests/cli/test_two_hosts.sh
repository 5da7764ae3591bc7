#!/usr/bin/env bash
# Two hosts at once through one specd-verifier (and one specd-drafter), both numbering their
# sequence 0: each host's sequence is its own on the daemons (owned by its connection), so both
# outputs are identical to their plain runs and the verifier really decided their steps.
# usage: test_two_hosts.sh BIN_DIR
set -euo pipefail
# the daemons compute the fingerprint hosts must match from the model's tokenizer
model=${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf
bin=$1
# shellcheck source=remote_util.sh
. "$(dirname "$0")/remote_util.sh"
dir=$(mktemp -d /tmp/specd-two.XXXXXX)
chmod 700 "$dir"
dep="ipc://$dir/drafter.sock" vep="ipc://$dir/verifier.sock"
dpid= vpid=
cleanup() {
  [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null || true
  [ -n "$vpid" ] && kill "$vpid" 2>/dev/null && wait "$vpid" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
start_daemon dpid "$dir/drafter.log" "$bin/specd-drafter" --endpoint "$dep" --model "$model"
start_daemon vpid "$dir/verifier.log" "$bin/specd-verifier" --endpoint "$vep" --model "$model"

run() { # name seed prompt
  "$bin/specd" generate -p "$3" -n 48 --temp 0.8 --seed "$2" --policy remote \
    --policy-opts "endpoint=$dep,timeout_ms=5000" --verifier "$vep" --verifier-timeout-ms 5000 \
    --draft-max 4 --no-adaptive > "$dir/$1.out" 2> "$dir/$1.err"
}
run a 11 "Repeat the following list exactly three times: apple, banana, cherry, date, elderberry." & a=$!
run b 22 "Copy this sentence twice: The quick brown fox jumps over the lazy dog near the quiet river bank." & b=$!
rc=0
wait "$a" || rc=1
wait "$b" || rc=1
for h in a b; do
  cat "$dir/$h.err"
  grep -q 'output identical to plain decoding: yes' "$dir/$h.err" || { echo "host $h: output changed"; rc=1; }
  grep -Eq 'remote verifier .*: [1-9][0-9]* drafting steps verified there' "$dir/$h.err" \
    || { echo "host $h: the verifier decided nothing"; rc=1; }
done
[ "$rc" -eq 0 ] || exit 1
# a verifier for another tokenizer (here: a typed hash) refuses the host, which says why and
# verifies in-process: the same output
kill "$vpid"; wait "$vpid" 2>/dev/null || true
start_daemon vpid "$dir/verifier2.log" "$bin/specd-verifier" --endpoint "$vep" --tokenizer-hash 1234
"$bin/specd" generate -p "hi" -n 4 --policy ngram --verifier "$vep" > /dev/null 2> "$dir/bad.txt" \
  || { cat "$dir/bad.txt"; exit 1; }
grep -q 'verifier unavailable (verifier refused: tokenizer hash' "$dir/bad.txt" \
  && grep -q 'output identical to plain decoding: yes' "$dir/bad.txt" || { cat "$dir/bad.txt"; exit 1; }
echo "two hosts through one verifier: both identical to plain"
