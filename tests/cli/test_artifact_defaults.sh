#!/usr/bin/env bash
# A policy run with no options on the default model named by a path of its own (-m, a link in a
# temporary directory) gets the shipped artifact trained over that model, matched by the model's
# fingerprint, not its path (policy/artifacts.h), and reaches that artifact's acceptance: each
# bound is one the untrained path does not reach on the same prompt (measured with -m before the
# artifacts were matched: risd 0.033, sdar 0.27 acceptance, simsd 0 of 36 drafts accepted, wedlm
# TPF 1.00 with no proposal; mrp had no head at all and refused). `other` runs a different
# target (the default model with one norm weight changed, as a finetune would) and requires a
# refusal naming the option for every policy that needs an artifact, and a run when the option
# is given.
#   test_artifact_defaults.sh SPECD SRC POLICY|other
set -euo pipefail
specd=$1 src=$2 what=$3
model="${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$model" ] || { echo "no default model at $model"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count="Count from 1 to 20."
code="Write a Python function that returns the squares of a list of numbers."

# figure NAME: the summary's acceptance rate or tokens per target forward
figure() {
  case $1 in
    acceptance) sed -n 's/^acceptance rate \([0-9.]*\) .*/\1/p' "$tmp/err" ;;
    tpf) sed -n 's/^tokens per target forward \([0-9.]*\)$/\1/p' "$tmp/err" ;;
  esac
}

if [ "$what" = other ]; then
  # the same tokenizer and shape, one norm weight scaled: another target
  python3 "$src/tests/make_other_target.py" "$specd" "$model" "$tmp/other.gguf"
  a=$("$specd" inspect --json "$model" | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_fingerprint"])')
  b=$("$specd" inspect --json "$tmp/other.gguf" | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_fingerprint"])')
  [ "$a" != "$b" ] || { echo "a changed norm weight kept the fingerprint $a"; exit 1; }
  for pk in mrp:head risd:adapter wedlm:adapter sdar:adapter simsd:adapter; do
    policy=${pk%%:*} key=${pk#*:} rc=0
    "$specd" generate -m "$tmp/other.gguf" -p "Hi." -n 4 --policy "$policy" > /dev/null \
      2> "$tmp/err" || rc=$?
    [ "$rc" -ne 0 ] || { echo "$policy ran on another target without its $key"; exit 1; }
    grep -q "policy $policy needs $key=PATH: no $key trained over this target" "$tmp/err" ||
      { cat "$tmp/err"; echo "$policy: the refusal does not name $key"; exit 1; }
  done
  # named by the caller, the artifact is the caller's choice: it runs
  "$specd" generate -m "$tmp/other.gguf" -p "Hi." -n 4 --temp 0 --policy mrp \
    --policy-opts "head=$src/artifacts/mrp/smollm2-135m-mrp.gguf" > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err"; exit 1; }
  grep -q 'output identical to plain decoding: yes' "$tmp/err"
  echo "another target: refused without an artifact, runs with one named"
  exit 0
fi

case $what in
  mrp) prompt=$count fig=acceptance min=0.5 key=head art=mrp/smollm2-135m-mrp.gguf ;;
  risd) prompt=$code fig=acceptance min=0.15 key=adapter art=adapters/smollm2-135m-risd ;;
  wedlm) prompt=$count fig=tpf min=1.1 key=adapter art=adapters/smollm2-135m-wedlm ;;
  sdar) prompt=$code fig=acceptance min=0.5 key=adapter art=adapters/smollm2-135m-sdar ;;
  simsd) prompt=$code fig=acceptance min=0.07 key=drafter_adapter art=adapters/smollm2-135m-simsd-drafter ;;
  *) echo "unknown case $what"; exit 2 ;;
esac
ln -s "$model" "$tmp/model.gguf"
"$specd" generate -m "$tmp/model.gguf" -p "$prompt" -n 32 --temp 0 --no-adaptive --policy "$what" \
  > /dev/null 2> "$tmp/err" || { cat "$tmp/err"; exit 1; }
grep -q "^policy options: .*$key=[^,]*$art" "$tmp/err" ||
  { cat "$tmp/err"; echo "$what: the shipped $art was not chosen"; exit 1; }
if [ "$what" != simsd ]; then # simsd is lossy
  grep -q 'output identical to plain decoding: yes' "$tmp/err" || { cat "$tmp/err"; exit 1; }
fi
got=$(figure "$fig")
[ -n "$got" ] || { cat "$tmp/err"; echo "$what: no $fig in the summary"; exit 1; }
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)" "$got" "$min" ||
  { cat "$tmp/err"; echo "$what: $fig $got, not above the untrained path's bound $min"; exit 1; }
echo "$what with no options on the default model by path: $art, $fig $got (> $min)"
