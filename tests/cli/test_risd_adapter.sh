#!/usr/bin/env bash
# R-ISD with the shipped trained adapter (picked by default for the default model) is
# token-identical to plain decoding under greedy and coupled sampling.
set -euo pipefail
specd=$1 src=$2
adapter="$src/artifacts/adapters/smollm2-135m-risd"
[ -f "$adapter/adapter_config.json" ] || { echo "no shipped adapter at $adapter"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$specd" generate -p "Name the four seasons." -n 24 --temp 0 --policy risd --policy-opts n=3 \
  2> "$tmp/err.txt" > /dev/null
grep -q "policy options: n=3,adapter=.*smollm2-135m-risd" "$tmp/err.txt"
grep -q 'output identical to plain decoding: yes' "$tmp/err.txt"
head -n 2 "$src/examples/prompts.txt" > "$tmp/prompts.txt"
for mode in "--accept greedy" "--accept coupled --temp 0.8 --seed 9"; do
  # shellcheck disable=SC2086
  "$specd" ab --policy risd --policy-opts n=3 --prompts "$tmp/prompts.txt" -n 16 --no-adaptive \
    $mode --json "$tmp/ab.json" > /dev/null
  grep -q '"overall": {"identical": true' "$tmp/ab.json"
done
echo "risd with the shipped adapter: identical"
