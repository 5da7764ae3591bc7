#!/usr/bin/env bash
# specd inspect end to end. Usage: test_inspect.sh SPECD_BINARY SOURCE_DIR text|json|model
#   text   exit codes and messages for bad input, text output for the seed files
#   json   --json output is valid JSON (checked with jq; skipped, exit 77, without it)
#   model  both outputs for the real default model ($SPECD_TEST_MODEL)
set -uo pipefail
specd=$1
seeds=$2/tests/fuzz/corpus/fuzz_gguf
mode=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect_error() { # expect_error WANT_RC STDERR_NEEDLE ARGS...
  local want=$1 needle=$2
  shift 2
  "$specd" inspect "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" -eq "$want" ] || fail "inspect $*: exit $rc, expected $want"
  grep -q -- "$needle" "$tmp/err" || fail "inspect $*: stderr lacks '$needle': $(cat "$tmp/err")"
  [ ! -s "$tmp/out" ] || fail "inspect $*: wrote to stdout on error"
}

case $mode in
text)
  expect_error 1 "cannot open" "$tmp/missing.gguf"
  expect_error 1 "not a regular file" "$tmp"
  : >"$tmp/empty.gguf"
  expect_error 1 "empty file" "$tmp/empty.gguf"
  expect_error 1 "outside the file" "$seeds/trunc_llama_2047.gguf"
  expect_error 1 "bad magic" "$2/README.md"
  expect_error 2 "usage" --json
  expect_error 2 "unknown option" --frobnicate "$seeds/valid_llama.gguf"
  out=$("$specd" inspect "$seeds/valid_llama.gguf") || fail "valid_llama: exit $?"
  for want in "architecture   llama" "block_count" "model          gpt2" "vocab size     6" \
              "merges         1" "bos            0  '<s>'" "eos            1  '</s>'" \
              "chat template  yes (14 bytes)" "blk.0.attn_q.weight" "Q4_1" "32 x 4" "BF16"; do
    grep -qF -- "$want" <<<"$out" || fail "valid_llama text output lacks '$want'"
  done
  ;;
json)
  command -v jq >/dev/null || { echo "jq not installed: JSON output not checked"; exit 77; }
  for f in "$seeds"/valid_*.gguf; do
    "$specd" inspect --json "$f" >"$tmp/out" || fail "$f: exit $?"
    jq -e . "$tmp/out" >/dev/null || fail "$f: --json output is not valid JSON"
  done
  j=$("$specd" inspect --json "$seeds/valid_every_type.gguf")
  [ "$(jq -c '.metadata["t.str"]' <<<"$j")" = '"héllo \"quoted\"\n"' ] || fail "string escaping"
  # jq reads numbers as doubles, so the exact u64 is checked in the text
  grep -qF '"t.u64": 9223372036854775813' <<<"$j" || fail "u64 value"
  [ "$(jq -r '.metadata["t.arr_str"].count' <<<"$j")" = 3 ] || fail "array summary"
  j=$("$specd" inspect --json "$seeds/valid_llama.gguf")
  [ "$(jq -r '.tokenizer.bos_text' <<<"$j")" = "<s>" ] || fail "bos text"
  [ "$(jq -r '.tensors | length' <<<"$j")" = 6 ] || fail "tensor count"
  [ "$(jq -r '.tensors[] | select(.name=="blk.0.attn_q.weight") | .shape[1]' <<<"$j")" = 4 ] || fail "shape"
  ;;
model)
  model=${SPECD_TEST_MODEL:?}
  out=$("$specd" inspect "$model") || fail "model: exit $?"
  for want in "block_count                             30" "pre            smollm" \
              "vocab size     49152" "merges         48900" "bos            1  '<|im_start|>'" \
              "eos            2  '<|im_end|>'" "chat template  yes" "tensors (272)" \
              "token_embd.weight                        Q8_0   576 x 49152"; do
    grep -qF -- "$want" <<<"$out" || fail "model text output lacks '$want'"
  done
  if command -v jq >/dev/null; then
    "$specd" inspect --json "$model" >"$tmp/out" || fail "model --json: exit $?"
    jq -e '.hyperparameters.embedding_length == 576 and .tokenizer.merges == 48900
           and .tokenizer.chat_template == true and (.tensors | length) == 272' "$tmp/out" \
      >/dev/null || fail "model --json content"
  fi
  ;;
*) fail "unknown mode $mode" ;;
esac
echo "ok ($mode)"
