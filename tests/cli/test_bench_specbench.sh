#!/usr/bin/env bash
# specd bench spec-bench on the real model, small: a question file in Spec-Bench's format (made
# here: the project ships none of its data) with a two-turn MT-bench item and single-turn items of
# other groups; the leaderboard names each group, every turn is token-identical to plain decoding,
# the second turn's prompt carries the first answer (it is longer than the first turn's), and a
# malformed line, an unknown category and a missing file are refused naming what is wrong.
# Also specd ab --repeat: rounds alternate, the median run counts, output stays identical.
set -euo pipefail
specd=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/q.jsonl" <<'Q'
{"question_id": 1, "category": "writing", "turns": ["Write two sentences about the sea.", "Now repeat them, word for word."]}
{"question_id": 2, "category": "qa", "turns": ["What is the capital of France?"]}

{"question_id": 3, "category": "summarization", "turns": ["Summarize: The cat sat on the mat. The cat sat on the mat again. Then the cat slept on the mat."]}
{"question_id": 4, "category": "qa", "turns": ["Name a prime number."]}
Q

"$specd" bench spec-bench "$tmp/q.jsonl" --policy ngram --policy suffix --limit 1 -n 16 --temp 0 \
  --repeat 2 --json "$tmp/sb.json" --report "$tmp/sb.html" > "$tmp/table.txt"
cat "$tmp/table.txt"
grep -q '^ngram ' "$tmp/table.txt"
grep -q 'MT(1)' "$tmp/table.txt"
grep -q 'QA(1)' "$tmp/table.txt"   # --limit 1 keeps one of the two QA items
python3 - "$tmp/sb.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["benchmark"] == "spec-bench" and d["repeat"] == 2 and d["numerics"] == "fast", d
assert d["questions_per_group"] == {"MT": 1, "Trans": 0, "Sum": 1, "QA": 1, "Math": 0, "RAG": 0}, d
assert [q["question_id"] for q in d["questions"]] == [1, 2, 3], d["questions"]
for p in d["policies"]:
    o = p["groups"]["overall"]
    # each round has its own spec: suffix's cache of finished requests never holds the same
    # question's answer from an earlier round, so a single-turn item's answer is not replayed
    if p["policy"] == "suffix":
        qa = d["questions"][1]["turns"][0]
        assert qa[2]["forwards"] >= qa[2]["tokens"] / 2, qa   # a replay: 9 tokens a forward
    assert o["turns"] == 4 and o["identical_turns"] == 4, p   # the MT item's two turns count
    assert o["tokens"] > 0 and o["forwards"] > 0 and o["speedup"] > 0, p
mt = d["questions"][0]["turns"]
assert len(mt) == 2 and all(len(turn) == 3 for turn in mt), mt   # plain + two policies per turn
assert all(side["identical"] for turn in mt for side in turn), mt
# the second turn's prompt holds the first turn's prompt and answer
assert mt[1][0]["prompt_tokens"] > mt[0][0]["prompt_tokens"] + mt[0][0]["tokens"] - 1, mt
PY
# Debian's python3-html5lib (scripts/setup) lives beside the system python
/usr/bin/python3 -c "import html5lib,sys; html5lib.HTMLParser(strict=True).parse(open(sys.argv[1], 'rb'))" "$tmp/sb.html"
grep -q 'Leaderboard' "$tmp/sb.html"


# bad input: refused with exit 2, naming the file and line or the group
printf '%s\n' '{"question_id": 1, "category": "writing", "turns": ["a"]}' '{"question_id": 2, "turns": ["b"]}' > "$tmp/bad1.jsonl"
printf '%s\n' '{"question_id": 1, "category": "poetry", "turns": ["a"]}' > "$tmp/bad2.jsonl"
printf '%s\n' '{"question_id": 1, "category": "qa", "turns": []}' > "$tmp/bad3.jsonl"
printf '%s\n' '{"question_id": 1, "category": "qa", "turns": ["a"]}' '{"question_id": 1, "category": "qa", "turns": ["b"]}' > "$tmp/bad4.jsonl"
check_refusal() {
  local want=$1; shift
  set +e
  "$specd" bench spec-bench "$@" -n 4 > /dev/null 2> "$tmp/err.txt"
  local rc=$?
  set -e
  if [ "$rc" -ne 2 ]; then echo "expected exit 2 for: $* (rc $rc)"; cat "$tmp/err.txt"; exit 1; fi
  grep -q -- "$want" "$tmp/err.txt" || { echo "no '$want' in:"; cat "$tmp/err.txt"; exit 1; }
}
check_refusal 'bad1.jsonl:2: "category"' "$tmp/bad1.jsonl" --policy ngram
check_refusal 'bad2.jsonl:1: unknown category "poetry"' "$tmp/bad2.jsonl" --policy ngram
check_refusal 'bad3.jsonl:1: "turns" must hold' "$tmp/bad3.jsonl" --policy ngram
check_refusal 'bad4.jsonl:2: question_id 1 already on line 1' "$tmp/bad4.jsonl" --policy ngram
check_refusal "cannot open $tmp/none.jsonl" "$tmp/none.jsonl" --policy ngram
check_refusal "unknown group 'Poems'" "$tmp/q.jsonl" --policy ngram --groups Poems
check_refusal "names no group" "$tmp/q.jsonl" --policy ngram --groups ,
check_refusal "unknown policy 'nosuch'" "$tmp/q.jsonl" --policy nosuch
check_refusal "at least one --policy" "$tmp/q.jsonl"
check_refusal "no question of the chosen groups" "$tmp/q.jsonl" --policy ngram --groups RAG

# specd ab --repeat 3: identical, and the JSON records the rounds
head -n 2 "$src/examples/prompts.txt" > "$tmp/prompts.txt"
"$specd" ab --policy ngram --prompts "$tmp/prompts.txt" -n 12 --temp 0 --repeat 3 --no-quality \
  --json "$tmp/ab.json" > /dev/null
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['repeat'] == 3 and d['overall']['identical'], d['overall']" "$tmp/ab.json"
set +e
"$specd" ab --policy ngram --prompts "$tmp/prompts.txt" --repeat 0 > /dev/null 2> "$tmp/err.txt"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q -- '--repeat expects' "$tmp/err.txt"
echo "bench spec-bench: ok"
