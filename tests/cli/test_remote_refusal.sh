#!/usr/bin/env bash
# A drafter or verifier for another model (its fingerprint refuses this host's Hello) is a dead
# peer, never a failed generation: the host warns with the reason, decodes plainly / verifies
# in-process, and drafts again once a matching daemon takes its place. Real daemons on the real
# model; the output is identical to plain decoding throughout (specd generate compares).
# The mid-run part freezes the host (SIGSTOP) while daemons are swapped, so what the host meets
# is decided by events, not by how fast it decodes.
# usage: test_remote_refusal.sh BIN_DIR
set -euo pipefail
model=${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf
bin=$1
# shellcheck source=remote_util.sh
. "$(dirname "$0")/remote_util.sh"
dir=$(mktemp -d /tmp/specd-refusal.XXXXXX)
chmod 700 "$dir"
dep="ipc://$dir/drafter.sock" vep="ipc://$dir/verifier.sock"
dpid= vpid= g=
cleanup() {
  [ -n "$g" ] && kill -CONT "$g" 2>/dev/null && kill "$g" 2>/dev/null || true
  [ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null || true
  [ -n "$vpid" ] && kill -9 "$vpid" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
stop() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null || true; }

# At start: both daemons serve another tokenizer (a typed hash) and refuse the host.
start_daemon dpid "$dir/d1.log" "$bin/specd-drafter" --endpoint "$dep" --tokenizer-hash 1234
start_daemon vpid "$dir/v1.log" "$bin/specd-verifier" --endpoint "$vep" --tokenizer-hash 1234
"$bin/specd" generate -p "Count from 1 to 20, separated by commas." -n 24 --temp 0.8 --seed 3 \
  --policy remote --policy-opts "endpoint=$dep,timeout_ms=2000" --verifier "$vep" \
  --verifier-timeout-ms 2000 --draft-max 4 --no-adaptive > "$dir/out1.txt" 2> "$dir/err1.txt" \
  || { cat "$dir/err1.txt"; echo "the host failed against refusing daemons"; exit 1; }
cat "$dir/err1.txt"
grep -q 'drafter unavailable (drafter refused: tokenizer hash' "$dir/err1.txt"
grep -q 'verifier unavailable (verifier refused: tokenizer hash' "$dir/err1.txt"
grep -q 'output identical to plain decoding: yes' "$dir/err1.txt"
[ -s "$dir/out1.txt" ]
stop "$dpid"; stop "$vpid"; dpid= vpid=

# Mid-run: a matching drafter, replaced by a refusing one (the host meets its refusal), replaced
# by a matching one again (the host reconnects and drafts).
start_daemon dpid "$dir/d2.log" "$bin/specd-drafter" --endpoint "$dep" --model "$model"
"$bin/specd" generate -p "Count from 1 to 60, separated by commas." -n 160 --temp 0.8 --seed 5 \
  --policy remote --policy-opts "endpoint=$dep,timeout_ms=2000" --draft-max 6 --no-adaptive \
  > "$dir/out2.txt" 2> "$dir/err2.txt" &
g=$!
wait_until "the first tokens" 300 test -s "$dir/out2.txt"
kill -STOP "$g"
kill -9 "$dpid"; wait "$dpid" 2>/dev/null || true
start_daemon dpid "$dir/d3.log" "$bin/specd-drafter" --endpoint "$dep" --tokenizer-hash 1234 --verbose
kill -CONT "$g"
# its next steps reach the refusing daemon (a reconnect, refused at Hello)
wait_until "the host to meet the refusal" 300 grep -q 'refused: tokenizer hash' "$dir/d3.log"
kill -STOP "$g"
stopped=$(date +%s%N)
grep -q 'drafter unavailable' "$dir/err2.txt"
stop "$dpid"
start_daemon dpid "$dir/d4.log" "$bin/specd-drafter" --endpoint "$dep" --model "$model"
wait_until "the host's reconnect back-off (200 ms) to pass" 60 at_least_ms "$stopped" 500
kill -CONT "$g"
wait "$g" || { cat "$dir/err2.txt"; exit 1; }
g=
cat "$dir/err2.txt"
grep -q 'drafter is back' "$dir/err2.txt"
grep -q 'output identical to plain decoding: yes' "$dir/err2.txt"
echo "refusing daemons are dead peers: ok"
