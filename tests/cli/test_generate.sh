#!/usr/bin/env bash
# specd generate on the real model: plain output is reproducible from the seed, and --policy
# reports output identical to plain decoding with its figures.
set -euo pipefail
specd=$1
a=$("$specd" generate -p "Name three colors." -n 16 --temp 0.9 --seed 11 2>/dev/null)
b=$("$specd" generate -p "Name three colors." -n 16 --temp 0.9 --seed 11 2>/dev/null)
[ "$a" = "$b" ] || { echo "same seed, different text"; exit 1; }
[ -n "$a" ] || { echo "no text"; exit 1; }
"$specd" generate -p "Count from 1 to 10." -n 24 --policy ngram --draft-max 4 2> /tmp/specd_gen_err.$$ > /dev/null
grep -q 'output identical to plain decoding: yes' /tmp/specd_gen_err.$$
grep -q 'tokens per target forward' /tmp/specd_gen_err.$$
grep -q 'decode .* tok/s' /tmp/specd_gen_err.$$
"$specd" generate -p "Count from 1 to 10." -n 16 --policy wedlm --temp 0 2> /tmp/specd_gen_err.$$ > /dev/null
grep -q 'output identical to plain decoding: yes' /tmp/specd_gen_err.$$
grep -q '^p_cache (WeDLM eq. 4) [01]\.[0-9]* (.*), TPF' /tmp/specd_gen_err.$$
# a policy flagged SPECD_POLICY_FIGURE_STRIDED_TPF (isd) gets paper 000's expected TPF; ngram not
"$specd" generate -p "Count from 1 to 10." -n 8 --policy isd --temp 0 2> /tmp/specd_gen_err.$$ > /dev/null
grep -q 'output identical to plain decoding: yes' /tmp/specd_gen_err.$$
grep -q '^paper 000 App. B eq. 5 .*: TPF [0-9]' /tmp/specd_gen_err.$$
"$specd" generate -p "Count from 1 to 10." -n 8 --policy ngram 2> /tmp/specd_gen_err.$$ > /dev/null
if grep -q 'App. B eq. 5\|p_cache' /tmp/specd_gen_err.$$; then echo "ngram reports isd/wedlm figures"; exit 1; fi
rm -f /tmp/specd_gen_err.$$
if "$specd" generate -n 4 2>/dev/null; then echo "missing -p accepted"; exit 1; fi
# every policy refuses an option it does not know, naming it ("none" knows none), before running
for policy in none ngram draft layerskip remote isd risd mrp wedlm sdar simsd; do
  for opts in no_such_key=1 garbage; do
    key=${opts%%=*}
    if "$specd" generate -p "hi" -n 2 --policy "$policy" --policy-opts "$opts" > /dev/null \
      2> /tmp/specd_gen_err.$$; then
      echo "--policy $policy --policy-opts $opts accepted"; exit 1
    fi
    grep -q "policy $policy: .*'$key'" /tmp/specd_gen_err.$$ \
      || { cat /tmp/specd_gen_err.$$; echo "--policy $policy: the message does not name $key"; exit 1; }
  done
done
rm -f /tmp/specd_gen_err.$$
echo "specd generate: ok"
