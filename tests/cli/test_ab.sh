#!/usr/bin/env bash
# specd ab on the real model, small: every lossless mode must report token-identical output
# (exit 0 and "identical": true overall in the JSON); bad flags must be refused with exit 2.
set -euo pipefail
specd=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -n 3 "$src/examples/prompts.txt" > "$tmp/prompts.txt"

for mode in "--accept greedy" "--accept coupled --temp 0.8 --seed 7" "--temp 1.1 --top-k 40 --top-p 0.9 --seed 3"; do
  # shellcheck disable=SC2086
  "$specd" ab --policy ngram --prompts "$tmp/prompts.txt" -n 20 --draft-max 4 --no-adaptive $mode \
    --json "$tmp/ab.json" --metrics "$tmp/ab.prom" > "$tmp/table.txt"
  grep -q '"overall": {"identical": true' "$tmp/ab.json"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert all(p['identical'] for p in d['prompts'])" "$tmp/ab.json"
  grep -q '^specd_num_draft_tokens_total{policy="ngram"}' "$tmp/ab.prom"
  # p_cache (WeDLM eq. 4) beside tpf, per prompt and overall: a share of the rows run
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert all(0 <= r['p_cache'] <= 1 for r in d['prompts'] + [d['overall']])" "$tmp/ab.json"
  echo "ab $mode: identical"
done

# wedlm (lossless mode, no adapter: mask rows of the base model) is identical under greedy and
# reports p_cache in its summary and JSON
"$specd" ab --policy wedlm --prompts "$tmp/prompts.txt" -n 16 --accept greedy --json "$tmp/wedlm.json" \
  > "$tmp/wedlm.txt"
grep -q '^p_cache (WeDLM eq. 4: tokens emitted / token rows run) [01]\.[0-9]*, TPF' "$tmp/wedlm.txt"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); rows = d['prompts'] + [d['overall']]; assert all(r['identical'] and 0 < r['p_cache'] <= 1 for r in rows), rows" "$tmp/wedlm.json"

# simsd (SimSD over the sdar block model, self-draft) runs from specd ab, is reported LOSSY, not as
# a divergence, and shows its drafts' acceptance
"$specd" ab --policy simsd --policy-opts "adapter=$src/artifacts/adapters/smollm2-135m-sdar,drafter=self" \
  --no-adaptive --prompts "$tmp/prompts.txt" -n 8 --accept greedy --json "$tmp/simsd.json" > "$tmp/simsd.txt"
grep -q 'policy simsd flagged its steps LOSSY' "$tmp/simsd.txt"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); o=d['overall']; assert o['lossy'] and o['acceptance_rate'] > 0, o" "$tmp/simsd.json"

# rejection sampling is lossless in distribution only: it reports, and exits 0
"$specd" ab --policy ngram --prompts "$tmp/prompts.txt" -n 12 --accept rs --temp 0.9 > "$tmp/rs.txt"
grep -q 'lossless in distribution only' "$tmp/rs.txt"

# bad input: a clear refusal, never a crash
for bad in "--policy nosuch --prompts $tmp/prompts.txt" "--policy ngram --prompts /nonexistent" \
           "--policy ngram --prompts $tmp/prompts.txt --temp -1" "--policy ngram" \
           "--policy ngram --prompts $tmp/prompts.txt --policy-opts k=0"; do
  set +e
  # shellcheck disable=SC2086
  "$specd" ab $bad -n 4 > /dev/null 2> "$tmp/err.txt"
  rc=$?
  set -e
  if [ "$rc" -eq 0 ] || [ "$rc" -gt 2 ]; then echo "expected a refusal for: $bad (rc $rc)"; cat "$tmp/err.txt"; exit 1; fi
  grep -q 'specd' "$tmp/err.txt"
done
# an output that cannot be written is refused before the run (no banner, no table), naming it
for out in "--json $tmp/no/such/dir/ab.json" "--report $tmp/no/such/dir/ab.html" \
           "--metrics $tmp/no/such/dir/ab.prom" "--json $tmp"; do
  set +e
  # shellcheck disable=SC2086
  "$specd" ab --policy ngram --prompts "$tmp/prompts.txt" -n 4 $out > "$tmp/out.txt" 2> "$tmp/err.txt"
  rc=$?
  set -e
  path=${out#* }
  if [ "$rc" -eq 0 ] || [ "$rc" -gt 2 ] || ! grep -qF -- "${out%% *} $path: cannot write" "$tmp/err.txt" \
     || grep -q 'specd ab: policy ngram' "$tmp/err.txt" || [ -s "$tmp/out.txt" ]; then
    echo "expected a refusal before the run for $out (rc $rc)"; cat "$tmp/err.txt"; exit 1
  fi
done
# the check leaves nothing behind when the run then fails, and an existing file untouched
echo keep > "$tmp/old.json"
"$specd" ab --policy ngram --prompts "$tmp/prompts.txt" -n 4 --policy-opts k=0 --json "$tmp/new.json" \
  --report "$tmp/old.json" > /dev/null 2>&1 && exit 1
[ ! -e "$tmp/new.json" ] && [ "$(cat "$tmp/old.json")" = keep ] || { echo "the check changed files"; exit 1; }
"$specd" ab --policy ngram --prompts "$tmp/prompts.txt" -m /nonexistent.gguf > /dev/null 2> "$tmp/err.txt" && exit 1
grep -q 'cannot load model' "$tmp/err.txt"
echo "specd ab: ok"
