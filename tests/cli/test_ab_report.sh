#!/usr/bin/env bash
# specd ab --report on the real model: the page is valid HTML5 (html5lib, strict) and shows the
# run's own figures, verdicts and divergences (tests/cli/check_ab_report.py), for a lossless run
# whose prompts include markup and bytes that are not valid text, and for a rejection-sampling run
# that diverges. An unwritable report path is an error, not a silent skip.
set -euo pipefail
specd=$1 src=$2
py=/usr/bin/python3  # Debian's python3-html5lib (scripts/setup) lives beside the system python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -n 2 "$src/examples/prompts.txt" > "$tmp/prompts.txt"
printf 'Repeat exactly: <b>"1, 2 & 3"</b> \x01 \xff end\n' >> "$tmp/prompts.txt"

"$specd" ab --policy ngram --prompts "$tmp/prompts.txt" -n 16 --draft-max 4 --accept greedy \
  --json "$tmp/a.json" --report "$tmp/a.html" > /dev/null 2>&1
"$py" "$src/tests/cli/check_ab_report.py" "$tmp/a.html" "$tmp/a.json" "$tmp/prompts.txt" 0

# keyed rejection sampling without the guard is deterministic for a seed, and diverges here
"$specd" ab --policy ngram --prompts "$tmp/prompts.txt" -n 24 --draft-max 4 --accept rs \
  --temp 0.9 --seed 5 --no-adaptive --json "$tmp/b.json" --report "$tmp/b.html" > /dev/null 2>&1
"$py" "$src/tests/cli/check_ab_report.py" "$tmp/b.html" "$tmp/b.json" "$tmp/prompts.txt" 1

if "$specd" ab --policy ngram --prompts "$tmp/prompts.txt" -n 4 --report /nonexistent/dir/r.html \
  > /dev/null 2> "$tmp/err.txt"; then
  echo "an unwritable report path must fail"; exit 1
fi
grep -q -- '--report /nonexistent/dir/r.html: cannot write' "$tmp/err.txt"
echo "specd ab --report: ok"
