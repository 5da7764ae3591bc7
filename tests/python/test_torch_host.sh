#!/usr/bin/env bash
# examples/torch_host.py on the CPU, tiny (2 prompts x 16 tokens): transformers runs the default
# GGUF, specd's host API v2 verifies its logits handed over as torch bf16 rows with -inf padding
# columns (a row stride past the vocabulary), with the adaptive guard off so that every step
# drafts. Every mode (ngram and draft, in-process and through a specd-verifier daemon started
# for the run), greedy and at T 0.8 coupled, must be token-identical to plain decoding and must
# have proposed drafts; the daemon must have decided some steps.
# Skips (77) without a Python that has numpy, torch, transformers, gguf and accelerate:
# $SPECD_TORCH_PYTHON, else $SPECD_TRAIN_PYTHON, else SOURCE/.venv-train/bin/python, else python3.
#   usage: test_torch_host.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
model=${SPECD_TEST_MODEL:-${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf}
py=${SPECD_TORCH_PYTHON:-${SPECD_TRAIN_PYTHON:-$src/.venv-train/bin/python}}
[[ -x $py ]] || py=$(command -v python3 || echo python3)
if ! "$py" -c 'import numpy, torch, transformers, gguf, accelerate' 2>/dev/null; then
  echo "SKIP: no Python with numpy, torch, transformers, gguf and accelerate ($py; set" \
       "SPECD_TORCH_PYTHON to one)"
  exit 77
fi
[[ -f $model ]] || { echo "FAIL: no model at $model"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# repetitive prompts, so that ngram finds drafts
cat >"$tmp/prompts.txt" <<'EOF'
Repeat the following list exactly three times: apple, banana, cherry, date, elderberry.
Count from 1 to 30, separated by commas.
EOF
export OMP_WAIT_POLICY=PASSIVE  # a shared machine: no spinning threads
start=$(date +%s)
set +e
SPECD_LIBRARY=$build/libspecd.so "$py" "$src/examples/torch_host.py" --model "$model" \
  --device cpu --threads 1 --prompts "$tmp/prompts.txt" --n 16 --no-adaptive \
  --logits-dtype bfloat16 --pad 128 --verifier auto --verifier-bin "$build/specd-verifier" \
  >"$tmp/out.txt" 2>"$tmp/err.txt"
rc=$?
set -e
cat "$tmp/out.txt"
[[ $rc == 0 ]] || { echo "FAIL: torch_host.py exited $rc"; cat "$tmp/err.txt"; exit 1; }
"$py" - "$tmp/out.txt" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
assert "torch_host: outputs identical to plain decoding: yes" in out, "not identical"
assert re.search(r"logits bfloat16 on cpu, rows 49280 wide \(vocabulary 49152 \+ 128 -inf\)", out), \
    "the block is not bf16 rows with 128 padding columns"
summaries = re.findall(r"^summary: (\S+) (greedy|coupled T 0\.8): (\d+) of (\d+) prompts identical;"
                       r".*\((\d+) of (\d+) proposals\)", out, re.M)
seen = {(name, label) for name, label, *_ in summaries}
want = {(m, t) for m in ("ngram", "draft", "ngram+verifier", "draft+verifier")
        for t in ("greedy", "coupled T 0.8")}
assert seen == want, f"summaries for {sorted(seen)}, want {sorted(want)}"
for name, label, same, n, acc, props in summaries:
    assert same == n == "2", f"{name} {label}: {same} of {n} identical"
    assert int(props) > 0, f"{name} {label}: no proposals (identity proved nothing)"
remote = [int(x) for x in re.findall(r"remote verified (\d+) steps", out)]
assert len(remote) == 8 and sum(remote) > 0, f"the daemon decided no step ({remote})"
print(f"torch_host: {len(summaries)} mode x temperature runs identical to plain decoding, "
      f"{sum(int(s[5]) for s in summaries)} proposals, {sum(int(s[4]) for s in summaries)} accepted, "
      f"{sum(remote)} steps decided by specd-verifier")
PY
echo "test_torch_host: passed in $(($(date +%s) - start)) s"
