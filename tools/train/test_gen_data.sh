#!/usr/bin/env bash
# specd-gen-data on the real model: well-formed shards, tokens that `specd generate` reproduces with
# the same prompt, seed and sampling, and rows that do not depend on which sequences share a step.
#   usage: test_gen_data.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
model=${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# a code, a list and a math prompt from the training set
grep -m1 '^Write a Rust function' "$src/tools/train/prompts.txt" >"$tmp/prompts.txt"
grep -m1 '^Count from' "$src/tools/train/prompts.txt" >>"$tmp/prompts.txt"
grep -m1 '^What is .* times' "$src/tools/train/prompts.txt" >>"$tmp/prompts.txt"
[[ $(wc -l <"$tmp/prompts.txt") == 3 ]] || { echo "FAIL: test prompts not found"; exit 1; }

gen=("$build/specd-gen-data" -m "$model" --prompts "$tmp/prompts.txt" -n 20 -t 2 --count 5
     --greedy-every 2 --seed 7 --text)
# 5 jobs over 3 prompts: slot refills, greedy and sampled jobs, a prompt run twice
"${gen[@]}" -b 2 -o "$tmp/b2"
"${gen[@]}" -b 1 -o "$tmp/b1"
if "${gen[@]}" -b 1 -o "$tmp/b1" 2>"$tmp/err"; then
  echo "FAIL: overwrote a finished shard"; exit 1
fi
grep -q 'DONE exists' "$tmp/err"

python3 - "$tmp" <<'PY'
import json, math, struct, sys
tmp = sys.argv[1]
def load(d):
    assert open(f"{d}/DONE").read().strip(), "empty DONE"
    m = json.load(open(f"{d}/seqs.json"))
    n, e = m["n_tokens"], m["n_embd"]
    tok = open(f"{d}/tokens.i32", "rb").read()
    hid = open(f"{d}/hidden.f16", "rb").read()
    assert e == 576, e
    assert len(tok) == 4 * n, (len(tok), n)
    assert len(hid) == 2 * e * n, (len(hid), n)
    ids = struct.unpack(f"<{n}i", tok)
    assert all(0 <= t < 49152 for t in ids)
    h = struct.unpack(f"<{n * e}e", hid)
    assert all(math.isfinite(x) for x in h), "non-finite hidden value"
    off, by_job = 0, {}
    for s in m["sequences"]:
        assert s["offset"] == off and s["n_tokens"] > s["n_prompt"] > 0, s
        o, k = s["offset"], s["n_tokens"]
        rows = hid[2 * e * o: 2 * e * (o + k)]
        # distinct rows: the hidden states are real, not one repeated vector
        assert len({rows[2 * e * i: 2 * e * (i + 1)] for i in range(k)}) == k, "repeated rows"
        by_job[s["job"]] = (s, ids[o:o + k], rows)
        off += k
    assert off == n
    assert sorted(by_job) == list(range(5)), sorted(by_job)
    assert m["recipe"]["next_job"] == 5
    return by_job
b1, b2 = load(f"{tmp}/b1"), load(f"{tmp}/b2")
for j in range(5):
    s1, t1, h1 = b1[j]
    s2, t2, h2 = b2[j]
    assert t1 == t2, f"job {j}: tokens differ between batch 1 and batch 2"
    assert h1 == h2, f"job {j}: hidden rows differ between batch 1 and batch 2"
    assert s1["temp"] == (0 if j in (0, 2) else 0.8), s1
    assert s1["seed"] == 7 + j and s1["prompt_id"] == j % 3, s1
# the same prompt sampled twice with different seeds continues differently
assert b1[0][1][:b1[0][0]["n_prompt"]] == b1[3][1][:b1[3][0]["n_prompt"]]
with open(f"{tmp}/jobs.tsv", "w") as f:
    for j in range(5):
        s = b1[j][0]
        f.write(f"{s['prompt_id']}\t{s['seed']}\t{s['temp']}\n")
        open(f"{tmp}/text{j}", "w").write(s["text"])
print("gen-data shards well formed; batch 1 and batch 2 agree bit for bit")
PY

# each continuation is what `specd generate` prints for its prompt with the same seed and sampling
j=0
while IFS=$'\t' read -r pid seed temp; do
  prompt=$(sed -n "$((pid + 1))p" "$tmp/prompts.txt")
  SPECD_MODEL_DIR=$(dirname "$model") "$build/specd" generate -p "$prompt" --seed "$seed" \
    --temp "$temp" -n 20 -t 2 >"$tmp/gen$j" 2>/dev/null
  printf '%s' "$(cat "$tmp/text$j")" >"$tmp/want$j"  # both through $(...): trailing newlines alike
  printf '%s' "$(cat "$tmp/gen$j")" >"$tmp/got$j"
  if ! cmp -s "$tmp/want$j" "$tmp/got$j"; then
    echo "FAIL: job $j (prompt $pid, seed $seed, temp $temp) differs from specd generate"
    echo "gen-data: $(cat "$tmp/want$j")"; echo "generate: $(cat "$tmp/got$j")"; exit 1
  fi
  j=$((j + 1))
done <"$tmp/jobs.tsv"
[[ $j == 5 ]]
echo "PASS: 5 continuations equal specd generate's"
