#!/usr/bin/env bash
# specd ab's quality block on the real model. A lossless policy (ngram, greedy) gives the same
# tokens, so every quality figure must equal plain's (NLL, repetition, task verdicts) with
# agreement 1; a lossy mode (mrp mode=direct) reports them for each side; --tasks reports pass
# rates that match the per-item verdicts; --calibrate keeps exactly the items at or above the
# keep rate; a malformed task file is refused with its line named.
set -euo pipefail
specd=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -n 4 "$src/bench/tasks/tasks.jsonl" > "$tmp/tasks.jsonl"

# lossless: quality equal to plain's
"$specd" ab --policy ngram --tasks "$tmp/tasks.jsonl" -n 24 --temp 0 --json "$tmp/ab.json" -t 1 \
  --report "$tmp/ab.html" > "$tmp/table.txt"
grep -q '^task pass rate: plain' "$tmp/table.txt"
python3 - "$tmp/ab.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d["quality_definitions"]) >= {"nll", "repeat_4gram", "agreement_prefix"}, d
rows = d["prompts"] + [d["overall"]]
for r in rows:
    q = r["quality"]
    assert r["identical"], r
    assert q["nll_plain"] is not None and q["nll_plain"] > 0, q
    assert q["nll_plain"] == q["nll_spec"], q
    assert q["repeat_4gram_plain"] == q["repeat_4gram_spec"], q
    assert q["agreement_prefix"] == 1 and q["agreement_positions"] == 1, q
    assert q["tasks_passed_plain"] == q["tasks_passed_spec"], q
for r in d["prompts"]:
    assert r["quality"]["tokens_scored_plain"] == r["tokens_plain"], r
passed = sum(r["quality"]["tasks_passed_plain"] for r in d["prompts"])
assert d["overall"]["quality"]["tasks"] == len(d["prompts"]) == 4
assert d["overall"]["quality"]["tasks_passed_plain"] == passed
assert abs(d["overall"]["quality"]["task_pass_rate_plain"] - passed / 4) < 1e-6
print("lossless: quality equal to plain's, pass rate", passed, "/ 4")
PY
# the report's quality table: valid HTML5 (strict), one row per item, the JSON's task verdicts
/usr/bin/python3 - "$tmp/ab.html" "$tmp/ab.json" <<'PY'
import json, sys
import html5lib
doc = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(open(sys.argv[1], "rb").read())
d = json.load(open(sys.argv[2]))
sec = [s for s in doc.iter("section") if s.get("id") == "quality"]
assert len(sec) == 1, "no quality section"
rows = [r for r in sec[0].iter("tr")][1:]
assert len(rows) == len(d["prompts"]) + 1, len(rows)
for r, p in zip(rows, d["prompts"]):
    cells = ["".join(c.itertext()) for c in r]
    want = "pass" if p["quality"]["tasks_passed_plain"] else "fail"
    assert cells[-2] == want and cells[-1] == want, (cells, p["quality"])
PY

# lossy: mrp mode=direct emits its drafts unchecked; quality is reported per side
head -n 2 "$src/examples/prompts.txt" > "$tmp/prompts.txt"
"$specd" ab --policy mrp --policy-opts "head=$src/artifacts/mrp/smollm2-135m-mrp.gguf,mode=direct" \
  --prompts "$tmp/prompts.txt" -n 24 --temp 0 --json "$tmp/lossy.json" -t 1 > "$tmp/lossy.txt"
grep -q 'nll plain' "$tmp/lossy.txt"
python3 - "$tmp/lossy.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["overall"]["lossy"], d["overall"]
for r in d["prompts"]:
    q = r["quality"]
    assert q["tokens_scored_spec"] == r["tokens_spec"] and q["nll_spec"] > 0, r
    assert 0 <= q["agreement_prefix"] <= 1 and 0 <= q["agreement_positions"] <= 1, q
    if not r["identical"]:
        assert q["agreement_positions"] < 1, q
    assert "task_pass_rate_spec" not in q, q  # no --tasks
print("lossy: nll plain %.3f spec %.3f" % (d["overall"]["quality"]["nll_plain"],
                                           d["overall"]["quality"]["nll_spec"]))
PY

# --no-quality: NLL not scored (null), the rest still there; agreement null away from T 0
"$specd" ab --policy ngram --prompts "$tmp/prompts.txt" -n 8 --temp 0.8 --seed 2 --no-quality \
  --json "$tmp/nq.json" -t 1 > /dev/null
python3 -c "
import json,sys; q=json.load(open(sys.argv[1]))['overall']['quality']
assert q['nll_plain'] is None and q['agreement_prefix'] is None and q['windows_4gram_plain'] > 0, q" "$tmp/nq.json"

# --calibrate: keeps exactly the items at or above the keep rate, verbatim
# one item any output passes, one none does, one real one between them
{ echo '{"id": "any", "prompt": "Say something.", "rule": "max_words", "n": 1000}'
  echo '{"id": "never", "prompt": "Say hi.", "rule": "contains", "contains": ["zq-never-zq"]}'
  grep '"id": "count-1-5"' "$src/bench/tasks/candidates.jsonl"; } > "$tmp/cand.jsonl"
"$specd" ab --tasks "$tmp/cand.jsonl" --calibrate 2 --keep-rate 0.5 --temp 0.8 --seed 1 -n 16 \
  -t 1 --select-out "$tmp/kept.jsonl" --json "$tmp/cal.json" > "$tmp/cal.txt"
grep -q '^kept [0-9]* of 3 items' "$tmp/cal.txt"
python3 - "$tmp/cal.json" "$tmp/cand.jsonl" "$tmp/kept.jsonl" <<'PY'
import json, sys
cal = json.load(open(sys.argv[1]))
cand = [l.rstrip("\n") for l in open(sys.argv[2])]
kept = [l.rstrip("\n") for l in open(sys.argv[3])]
assert cal["runs"] == 2 and cal["items_total"] == 3 and "--calibrate 2" in cal["command"], cal
want = [c for c, it in zip(cand, cal["items"]) if it["passed"] / 2 >= 0.5]
assert [it["kept"] for it in cal["items"]] == [it["passed"] / 2 >= 0.5 for it in cal["items"]]
assert kept == want, (kept, want)
assert cand[0] in kept and cand[1] not in kept, kept
assert cal["items_kept"] == len(kept)
print("calibrate: kept", len(kept), "of 3")
PY

# malformed task files: a clear refusal naming the line, exit 2, before the model loads
printf '%s\n' '{"id": "a", "prompt": "Count to 3.", "rule": "count", "from": 1, "to": 3}' \
  '{"id": "b", "prompt": "x", "rule": "count", "from": 1}' > "$tmp/bad1.jsonl"
printf '%s\n' '{"id": "a", "prompt": "x", "rule": "caps"' > "$tmp/bad2.jsonl"
printf '%s\n' '{"id": "a", "prompt": "x", "rule": "shout"}' > "$tmp/bad3.jsonl"
: > "$tmp/empty.jsonl"
for f in bad1:2:'needs field "to"' bad2:1:'not valid JSON' bad3:1:'unknown rule "shout"' \
         empty:0:'has no task items'; do
  name=${f%%:*} rest=${f#*:} line=${rest%%:*} says=${rest#*:}
  set +e
  "$specd" ab --policy ngram --tasks "$tmp/$name.jsonl" -m /nonexistent.gguf -n 4 \
    > /dev/null 2> "$tmp/err.txt"
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "$name: expected exit 2, got $rc"; cat "$tmp/err.txt"; exit 1; }
  grep -qF "$says" "$tmp/err.txt" || { echo "$name: no '$says'"; cat "$tmp/err.txt"; exit 1; }
  if [ "$line" != 0 ]; then grep -qF "$name.jsonl:$line:" "$tmp/err.txt"; fi
done
for bad in "--tasks $tmp/tasks.jsonl --prompts $tmp/prompts.txt" "--calibrate 2 --prompts $tmp/prompts.txt" \
           "--tasks $tmp/tasks.jsonl --calibrate 0" "--tasks $tmp/tasks.jsonl --calibrate 2 --keep-rate 2" \
           "--prompts $tmp/prompts.txt --select-out $tmp/x.jsonl" \
           "--prompts $tmp/prompts.txt --keep-rate 0.5"; do
  set +e
  # shellcheck disable=SC2086
  "$specd" ab --policy ngram $bad -n 4 > /dev/null 2> "$tmp/err.txt"
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "expected a refusal for: $bad (rc $rc)"; cat "$tmp/err.txt"; exit 1; }
done
echo "specd ab quality: ok"
