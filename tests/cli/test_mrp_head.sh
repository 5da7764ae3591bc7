#!/usr/bin/env bash
# `--policy mrp` without options on the default model finds the shipped trained head (as risd finds
# its adapter) and is token-identical to plain decoding under greedy and coupled sampling; a head
# that is not there is refused with a message naming the option.
set -euo pipefail
specd=$1 src=$2
head="$src/artifacts/mrp/smollm2-135m-mrp.gguf"
[ -f "$head" ] || { echo "no shipped head at $head"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for mode in "--temp 0" "--temp 0.8 --seed 9"; do
  # shellcheck disable=SC2086
  "$specd" generate -p "Name the four seasons." -n 24 $mode --policy mrp \
    2> "$tmp/err.txt" > /dev/null || { cat "$tmp/err.txt"; exit 1; }
  grep -q "policy options: head=.*smollm2-135m-mrp.gguf" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
  grep -q 'output identical to plain decoding: yes' "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
done
# SPECD_MRP_HEAD names the head; one that is not there leaves mrp without one: a clear refusal
rc=0
SPECD_MRP_HEAD="$tmp/none.gguf" "$specd" generate -p "Hi." -n 4 --policy mrp \
  2> "$tmp/err.txt" > /dev/null || rc=$?
[ "$rc" -ne 0 ] || { echo "mrp without a head was not refused"; exit 1; }
grep -q "needs head=PATH" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
echo "mrp with the shipped head by default: identical"
