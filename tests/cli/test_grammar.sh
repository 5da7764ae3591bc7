#!/usr/bin/env bash
# Grammar-constrained decoding on the real model through specd generate and specd ab:
#  - a JSON Schema (--json-schema) on a prompt that does not ask for JSON: the answer is one JSON
#    object with exactly the schema's keys and types, ended by the model's end token; ngram and
#    suffix (greedy) and ngram at T 0.8 with a seed (strings of at most 24 characters: maxLength)
#    emit exactly what plain constrained decoding emits (specd generate decodes both and
#    compares);
#  - a GBNF grammar (--grammar) of two words: the answer is one of them;
#  - tree-drafting policies (suffix, recycle) under a grammar, drafts past its end included;
#  - specd ab over two extraction prompts: identical with grammar drafts on and off, the grammar's
#    forced tokens proposed only when on, the mask's cost printed;
#  - a schema the compiler refuses, and --grammar with --json-schema, exit non-zero naming why.
set -euo pipefail
specd=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
schema=$src/examples/structured/contact.schema.json
# the same keys with strings of at most 24 characters: sampled text ends its strings in time
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
for p in s["properties"].values(): p["maxLength"] = 24
json.dump(s, open(sys.argv[2], "w"))' "$schema" "$tmp/short.schema.json"

check_contact() { # FILE: one JSON object with the schema's five string fields, nothing else
  python3 - "$1" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
keys = ["name", "email", "phone", "company", "role"]
assert isinstance(doc, dict) and sorted(doc) == sorted(keys), doc
assert all(isinstance(doc[k], str) for k in keys), doc
PY
}

for run in "ngram --temp 0" "suffix --temp 0" "ngram --temp 0.8 --seed 3"; do
  policy=${run%% *} mode=${run#* }
  use=$schema
  [[ $mode == *0.8* ]] && use=$tmp/short.schema.json
  # shellcheck disable=SC2086
  "$specd" generate -p "Tell me about the city of Paris." -n 120 --policy "$policy" $mode \
    --json-schema "$use" > "$tmp/out.json" 2> "$tmp/summary.txt"
  grep -q 'output identical to plain decoding: yes' "$tmp/summary.txt" ||
    { echo "$run: not identical"; cat "$tmp/summary.txt"; exit 1; }
  grep -q 'stop reason: stop token' "$tmp/summary.txt" ||
    { echo "$run: the answer did not end at the grammar's end"; cat "$tmp/summary.txt"; exit 1; }
  check_contact "$tmp/out.json" || { echo "$run: not the schema's object:"; cat "$tmp/out.json"; exit 1; }
  echo "$run: identical, $(tr -d '\n' < "$tmp/out.json" | head -c 80)"
done

printf 'root ::= "yes" | "no"\n' > "$tmp/yn.gbnf"
"$specd" generate -p "Is the sky green? Answer in a full sentence." -n 16 --temp 0 \
  --grammar "$tmp/yn.gbnf" > "$tmp/yn.txt" 2> /dev/null
grep -Eqx 'yes|no' "$tmp/yn.txt" || { echo "gbnf: got '$(cat "$tmp/yn.txt")'"; exit 1; }

# tree drafts (suffix) that run past the grammar's end: a draft of the end token with rows after
# it, which the grammar bans whole; the session must not score rows after a stop token (it did,
# and failed "every token is masked" on the second product prompt)
head -n 2 "$src/examples/structured/product.txt" > "$tmp/products.txt"
for policy in suffix recycle; do
  "$specd" ab --policy "$policy" --prompts "$tmp/products.txt" -n 96 --temp 0 --no-quality \
    --json-schema "$src/examples/structured/product.schema.json" > "$tmp/ab.txt" 2> "$tmp/ab.err" ||
    { echo "ab $policy under a grammar failed"; cat "$tmp/ab.err"; exit 1; }
  grep -q '(overall) .* yes ' "$tmp/ab.txt" || { echo "ab $policy: not identical"; cat "$tmp/ab.txt"; exit 1; }
  echo "ab $policy (trees) under a grammar: identical"
done

head -n 2 "$src/examples/structured/contact.txt" > "$tmp/prompts.txt"
for drafts in on off; do
  "$specd" ab --policy ngram --prompts "$tmp/prompts.txt" -n 96 --temp 0 --no-quality \
    --json-schema "$schema" --grammar-drafts "$drafts" > "$tmp/ab.txt" 2> /dev/null
  grep -q '(overall) .* yes ' "$tmp/ab.txt" || { echo "ab drafts $drafts: not identical"; cat "$tmp/ab.txt"; exit 1; }
  line=$(grep '^grammar: ' "$tmp/ab.txt") || { echo "ab: no grammar line"; cat "$tmp/ab.txt"; exit 1; }
  forced=$(sed -E 's/.* ([0-9]+) grammar drafts proposed.*/\1/' <<< "$line")
  if [ "$drafts" = on ] && [ "$forced" -eq 0 ]; then echo "ab: no grammar drafts with on"; exit 1; fi
  if [ "$drafts" = off ] && [ "$forced" -ne 0 ]; then echo "ab: grammar drafts with off"; exit 1; fi
  echo "ab, grammar drafts $drafts: identical; $line"
done

printf '{"type": "object", "properties": {"a": {"type": "frobnicate"}}}' > "$tmp/bad.json"
: > "$tmp/empty.json"
for bad in "--json-schema $tmp/bad.json" "--json-schema $tmp/missing.json" "--json-schema $tmp/empty.json" \
           "--grammar $tmp/yn.gbnf --json-schema $schema"; do
  set +e
  # shellcheck disable=SC2086
  "$specd" generate -p "hi" -n 4 $bad > /dev/null 2> "$tmp/err.txt"
  rc=$?
  set -e
  [ "$rc" -ne 0 ] || { echo "expected a refusal for: $bad"; exit 1; }
  grep -Eq 'json-schema|grammar' "$tmp/err.txt" || { echo "no reason for: $bad"; cat "$tmp/err.txt"; exit 1; }
done
echo "refusals: ok"
