#!/usr/bin/env bash
# Both daemons remote: specd-drafter proposes (policy remote) and specd-verifier decides (the spec's
# verifier endpoint), over real ZeroMQ ipc:// sockets and a shared-memory logits buffer, on the
# real model. specd ab compares with plain in-process decoding: token-identical, and the verifier
# really decided the drafting steps. Then the verifier is killed mid-generation: the rest is
# verified in-process, still identical. Bad setups are refused with a message.
set -euo pipefail
# the daemons compute the fingerprint hosts must match from the model's tokenizer
model=${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf
bin=$1 src=$2
# shellcheck source=remote_util.sh
. "$(dirname "$0")/remote_util.sh"
dir=$(mktemp -d /tmp/specd-rverify.XXXXXX)
chmod 700 "$dir"
dep="ipc://$dir/drafter.sock" vep="ipc://$dir/verifier.sock"
dpid= vpid= gen=
cleanup() {
  [ -n "$gen" ] && kill -CONT "$gen" 2>/dev/null && kill "$gen" 2>/dev/null || true
  [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null || true
  [ -n "$vpid" ] && kill "$vpid" 2>/dev/null && wait "$vpid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
# The daemons bind once they have read the model's tokenizer; a host that starts before that
# decides its first steps in-process, which the count below would take for a failure.
start_daemon dpid "$dir/drafter.log" "$bin/specd-drafter" --endpoint "$dep" --model "$model"
start_daemon vpid "$dir/verifier.log" "$bin/specd-verifier" --endpoint "$vep" --model "$model"
sed -n '7,9p' "$src/examples/prompts.txt" > "$dir/prompts.txt"  # repetitive: drafts get accepted

for mode in "--temp 0" "--temp 0.8 --seed 2"; do
  # shellcheck disable=SC2086
  "$bin/specd" ab --policy remote --policy-opts "endpoint=$dep,timeout_ms=10000" --verifier "$vep" \
    --verifier-timeout-ms 10000 --prompts "$dir/prompts.txt" -n 24 --draft-max 4 --no-adaptive \
    $mode > "$dir/table.txt" 2> "$dir/err.txt" || { cat "$dir/err.txt" "$dir/table.txt"; exit 1; }
  cat "$dir/table.txt"
  grep -q '(overall) *yes' "$dir/table.txt"
  line=$(grep 'remote verifier' "$dir/table.txt")
  there=$(echo "$line" | sed -E 's/.*: ([0-9]+) drafting steps verified there, ([0-9]+) in-process/\1/')
  here=$(echo "$line" | sed -E 's/.*: ([0-9]+) drafting steps verified there, ([0-9]+) in-process/\2/')
  [ "$there" -gt 0 ] && [ "$here" -eq 0 ] || { cat "$dir/err.txt"; echo "verifier did not decide: $line"; exit 1; }
  echo "remote drafter + remote verifier $mode: identical, $there steps verified remotely"
done

# kill -9 the verifier while a generation streams: the rest is verified in-process
"$bin/specd" generate -p "Count from 1 to 60, separated by commas." -n 120 --temp 0.8 --seed 5 \
  --policy ngram --draft-max 4 --no-adaptive --verifier "$vep" --verifier-timeout-ms 300 \
  > "$dir/out.txt" 2> "$dir/gen.txt" &
gen=$!
# after some text is out, so that both the daemon and the fallback decide steps; the host is
# frozen meanwhile, so it has steps left to meet the dead verifier however fast it decodes
bytes_over() { [ "$(wc -c < "$dir/out.txt")" -gt "$1" ]; }
wait_until "60 bytes of output" 300 bytes_over 60
kill -STOP "$gen" # (were the generation over already, the checks below would fail, not pass)
kill -9 "$vpid"; wait "$vpid" 2>/dev/null || true; vpid=
kill -CONT "$gen"
wait "$gen"
gen=
cat "$dir/gen.txt"
grep -q 'verifier unavailable' "$dir/gen.txt"
grep -Eq 'remote verifier .*: [1-9][0-9]* drafting steps verified there, [1-9][0-9]* in-process' \
  "$dir/gen.txt"
grep -q 'output identical to plain decoding: yes' "$dir/gen.txt"

# refused with a message: a malformed endpoint, and a policy that verifies its own steps
set +e
"$bin/specd" generate -p "hi" -n 4 --verifier "foo://nowhere" > /dev/null 2> "$dir/bad.txt"
rc=$?
set -e
[ "$rc" -ne 0 ] && grep -q 'verifier endpoint' "$dir/bad.txt" || { cat "$dir/bad.txt"; exit 1; }
start_daemon vpid "$dir/verifier2.log" "$bin/specd-verifier" --endpoint "$vep" --model "$model"
set +e
"$bin/specd" generate -p "hi" -n 4 --policy isd --verifier "$vep" > /dev/null 2> "$dir/bad.txt"
rc=$?
set -e
[ "$rc" -ne 0 ] && grep -q 'drafter-shaped' "$dir/bad.txt" || { cat "$dir/bad.txt"; exit 1; }
echo "remote verifier: ok"
