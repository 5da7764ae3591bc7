#!/usr/bin/env bash
# Penalties on the real model: with --presence/--frequency/--repeat-penalty, speculative decoding
# (ngram and suffix, greedy and coupled sampling at T 0.8) is token-identical to plain decoding
# with the same penalties (specd generate decodes both and compares), drafts are really verified,
# and the penalties change the text (so the identity is not that of a no-op). Paths that cannot
# apply them are refused with a message.
set -euo pipefail
specd=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prompt=$(cat "$src/examples/main-task.txt")
pen=(--presence-penalty 0.4 --frequency-penalty 0.3 --repeat-penalty 1.05)

"$specd" generate -p "$prompt" -n 28 --temp 0 > "$tmp/free.txt" 2> /dev/null
for policy in ngram suffix; do
  for mode in "--temp 0" "--temp 0.8 --seed 5"; do
    # shellcheck disable=SC2086
    "$specd" generate -p "$prompt" -n 28 --policy "$policy" --no-adaptive $mode "${pen[@]}" \
      > "$tmp/out.txt" 2> "$tmp/summary.txt"
    if ! grep -q 'output identical to plain decoding: yes' "$tmp/summary.txt"; then
      echo "$policy $mode with penalties: not identical to plain decoding"; cat "$tmp/summary.txt"; exit 1
    fi
    # drafts reached verification and some were accepted
    grep -Eq 'acceptance rate [0-9.]+ \([1-9][0-9]* of [1-9][0-9]* proposals\)' "$tmp/summary.txt"
    if [ "$mode" = "--temp 0" ] && cmp -s "$tmp/out.txt" "$tmp/free.txt"; then
      echo "$policy: the penalties did not change the greedy text"; exit 1
    fi
    echo "$policy $mode with penalties: identical"
  done
done

# refused where they cannot apply: a self-speculative policy, a bad value
for bad in "--policy isd --repeat-penalty 1.2" "--frequency-penalty 3" "--repeat-penalty 0"; do
  set +e
  # shellcheck disable=SC2086
  "$specd" generate -p "hi" -n 4 $bad > /dev/null 2> "$tmp/err.txt"
  rc=$?
  set -e
  if [ "$rc" -eq 0 ]; then echo "expected a refusal for: $bad"; exit 1; fi
  grep -Eq 'penalt|drafter-shaped' "$tmp/err.txt" || { echo "no reason for: $bad"; cat "$tmp/err.txt"; exit 1; }
done
echo "refusals: ok"
