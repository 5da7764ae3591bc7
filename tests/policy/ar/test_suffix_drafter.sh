#!/usr/bin/env bash
# Policy suffix served by one specd-drafter to two hosts, one after the other: the drafter keeps
# one global cache for the process, so the second host's request, the first's prompt again, draws
# on the first host's finished request and accepts more; both outputs are plain decoding's.
# usage: test_suffix_drafter.sh BIN_DIR
set -euo pipefail
model=${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf
bin=$1
# shellcheck source=../../cli/remote_util.sh
. "$(dirname "$0")/../../cli/remote_util.sh"
dir=$(mktemp -d /tmp/specd-suffix.XXXXXX)
chmod 700 "$dir"
dep="ipc://$dir/drafter.sock"
dpid=
cleanup() {
  [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
start_daemon dpid "$dir/drafter.log" "$bin/specd-drafter" --endpoint "$dep" --model "$model" \
  --policy suffix=suffix
host() { # name: one host process, its own connection to the drafter
  "$bin/specd" generate -p "Name the planets of the solar system in order." -n 32 --temp 0 \
    --policy remote --policy-opts "endpoint=$dep,policy=suffix,timeout_ms=5000" --draft-max 4 \
    --no-adaptive > "$dir/$1.out" 2> "$dir/$1.err" || { cat "$dir/$1.err"; exit 1; }
  grep -q 'output identical to plain decoding: yes' "$dir/$1.err" \
    || { cat "$dir/$1.err"; echo "host $1: output changed"; exit 1; }
  sed -n 's/^acceptance rate .* (\([0-9]*\) of [0-9]* proposals).*/\1/p' "$dir/$1.err"
}
first=$(host a)
first=${first:-0} # no proposals at all: none accepted
second=$(host b)
echo "accepted drafts: first host $first, second host $second"
[ -n "$first" ] && [ -n "$second" ] && [ "$second" -gt "$first" ] \
  || { cat "$dir/a.err" "$dir/b.err" "$dir/drafter.log"; echo "the second host gained nothing"; exit 1; }
echo "one drafter's suffix cache serves both hosts"
