#!/usr/bin/env bash
# --device on specd generate, ab, serve, inspect and specd-drafter, on the real model (CPU):
#  - an unknown name is a usage error (exit 2) naming the accepted values;
#  - an unparsable SPECD_DEVICE is one too, unless --device overrides it;
#  - CUDA where this library cannot run it (no device, or no CUDA backend) exits 1 with the
#    runtime's own message (the part skips itself where CUDA does run);
#  - --device cpu reaches every context of a run: with SPECD_DEVICE=cuda in the environment, a
#    run on --device cpu whose policy makes contexts of its own (draft, mrp's head, layerskip,
#    serve's scoring context, the drafter daemon's draft model) still succeeds;
#  - --device cpu gives byte for byte what no flag gives.
set -euo pipefail
bin=$1 src=$2
specd=$bin/specd
unset SPECD_DEVICE
model=${SPECD_MODEL_DIR:-$HOME/.cache/specd/models}/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$model" ] || { echo "no model at $model: skipped"; exit 77; }
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
head -n 1 "$src/examples/prompts.txt" > "$tmp/prompts.txt"
gen=(generate -p "Count from 1 to 5." -n 6)
ab=(ab --policy ngram --prompts "$tmp/prompts.txt" -n 4 --no-quality)

# expect RC WHAT PATTERN COMMAND...: COMMAND exits RC and its stderr has PATTERN (fixed string)
expect() {
  local want=$1 what=$2 pattern=$3
  shift 3
  set +e
  "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  set -e
  if [ "$rc" != "$want" ] || ! grep -qF -- "$pattern" "$tmp/err"; then
    echo "$what: expected exit $want and '$pattern' on stderr, got exit $rc:"
    cat "$tmp/err"
    exit 1
  fi
}

# 1. unknown names, and an unparsable SPECD_DEVICE: usage errors naming cpu, cuda, cuda:N
for name in tpu cuda:x cuda:-1 CPU ""; do
  expect 2 "generate --device '$name'" "cpu, cuda, cuda:N" "$specd" "${gen[@]}" --device "$name"
done
expect 2 "ab --device tpu" "cpu, cuda, cuda:N" "$specd" "${ab[@]}" --device tpu
expect 2 "serve --device tpu" "cpu, cuda, cuda:N" "$specd" serve --port 0 --device tpu
expect 2 "inspect --device tpu" "cpu, cuda, cuda:N" "$specd" inspect --device tpu "$model"
expect 2 "drafter --device tpu" "cpu, cuda, cuda:N" "$bin/specd-drafter" --model "$model" \
  --device tpu
expect 2 "verifier --device tpu" "cpu, cuda, cuda:N" "$bin/specd-verifier" --model "$model" \
  --device tpu
# the verifier's device path cannot start on a device that is not there: exit 1, saying so
expect 1 "verifier --device cuda:1000" "--device cuda:1000" "$bin/specd-verifier" --model "$model" \
  --device cuda:1000
expect 2 "--device without a value" "needs a value" "$specd" "${gen[@]}" --device
SPECD_DEVICE=tpu expect 2 "SPECD_DEVICE=tpu generate" "SPECD_DEVICE" "$specd" "${gen[@]}"
SPECD_DEVICE=tpu expect 2 "SPECD_DEVICE=tpu ab" "SPECD_DEVICE" "$specd" "${ab[@]}"
SPECD_DEVICE=tpu expect 2 "SPECD_DEVICE=tpu serve" "SPECD_DEVICE" "$specd" serve --port 0
SPECD_DEVICE=tpu expect 2 "SPECD_DEVICE=tpu specd-drafter" "SPECD_DEVICE" \
  "$bin/specd-drafter" --model "$model"
SPECD_DEVICE=tpu "$specd" "${gen[@]}" --device cpu > /dev/null 2>&1 ||
  { echo "--device cpu did not override an unparsable SPECD_DEVICE"; exit 1; }
echo "unknown devices: refused (exit 2)"

# 2. CUDA where it cannot run: exit 1 with the runtime's message, whatever the command
cuda_runs=0
if "$specd" inspect --device cuda "$model" > /dev/null 2> "$tmp/inspect.err"; then
  cuda_runs=1
  echo "CUDA runs here: the refusal of CUDA is not checked on this machine"
else
  # the runtime's own words, after inspect's "cannot make a context on cuda:0: "
  why=$(sed -n 's/^specd inspect: cannot make a context on cuda:0: //p' "$tmp/inspect.err")
  [ -n "$why" ] || { echo "inspect --device cuda:"; cat "$tmp/inspect.err"; exit 1; }
  expect 1 "generate --device cuda" "$why" "$specd" "${gen[@]}" --device cuda
  SPECD_DEVICE=cuda expect 1 "SPECD_DEVICE=cuda generate" "$why" "$specd" "${gen[@]}"
  expect 1 "ab --device cuda:0" "$why" "$specd" "${ab[@]}" --device cuda:0
  expect 1 "serve --device cuda" "$why" "$specd" serve --port 0 --device cuda
  expect 1 "drafter --device cuda with a draft model" "$why" "$bin/specd-drafter" \
    --model "$model" --device cuda --policy "d=draft:model=$model" --endpoint "ipc://$tmp/d0"
  [ ! -s "$tmp/out" ] || { echo "a refused run printed output"; exit 1; }
  echo "CUDA refused with the runtime's message (exit 1): $why"
fi

# 3. --device reaches the policies' own contexts, and cpu is what no flag gives, byte for byte.
# With SPECD_DEVICE=cuda (where CUDA cannot run), a context left on the environment's default
# would fail the run.
env_cuda=()
[ "$cuda_runs" = 1 ] || env_cuda=(env SPECD_DEVICE=cuda)
for policy in "draft:model=$model" "mrp:"; do
  name=${policy%%:*} opts=${policy#*:}
  args=("${gen[@]}" --temp 0.8 --seed 5 --policy "$name" --draft-max 4)
  [ -n "$opts" ] && args+=(--policy-opts "$opts")
  "$specd" "${args[@]}" > "$tmp/plain.txt" 2> "$tmp/plain.err"
  "${env_cuda[@]}" "$specd" "${args[@]}" --device cpu > "$tmp/cpu.txt" 2> "$tmp/cpu.err" ||
    { echo "--device cpu with policy $name:"; cat "$tmp/cpu.err"; exit 1; }
  cmp "$tmp/plain.txt" "$tmp/cpu.txt" || { echo "$name: --device cpu differs from no flag"; exit 1; }
  grep -q 'output identical to plain decoding: yes' "$tmp/cpu.err"
done
strip='import json,sys
d=json.load(open(sys.argv[1]))
for r in d["prompts"] + [d["overall"]]:
    for k in ("tokens_per_s_plain", "tokens_per_s_spec", "speedup"): r.pop(k)
print(json.dumps(d, sort_keys=True))'
"$specd" "${ab[@]}" --policy "draft" --policy-opts "model=$model" --json "$tmp/a.json" > /dev/null 2>&1
"${env_cuda[@]}" "$specd" "${ab[@]}" --policy draft --policy-opts "model=$model" --device cpu \
  --json "$tmp/b.json" > /dev/null 2> "$tmp/ab.err" || { cat "$tmp/ab.err"; exit 1; }
grep -q 'device cpu' "$tmp/ab.err"
[ "$(python3 -c "$strip" "$tmp/a.json")" = "$(python3 -c "$strip" "$tmp/b.json")" ] ||
  { echo "ab: --device cpu differs from no flag"; exit 1; }
echo "generate and ab: --device cpu reaches the policies' contexts, output as without the flag"

# serve: the loop's context, layerskip's and the scoring context (logprobs) on --device cpu
serve_once() { # OUT LOG ARGS...: starts `ARGS serve ...`, writes one completion with its
  local out=$1 log=$2  # logprobs to OUT, stops the server
  shift 2
  "$@" --port 0 --max-seqs 2 --n-ctx 256 --policy layerskip:layers=8 2> "$log" &
  local pid=$!
  pids+=("$pid")
  local port="" i
  for i in $(seq 600); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "serve exited"; exit 1; }
    sleep 0.1
  done
  [ -n "$port" ] || { echo "serve did not listen"; exit 1; }
  curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Count from 1 to 5.", "max_tokens": 6, "temperature": 0.8, "seed": 5,
         "logprobs": 2}' > "$out"
  kill "$pid"
  wait "$pid" || true
}
serve_once "$tmp/a.serve" "$tmp/serve_a.log" "$specd" serve
serve_once "$tmp/b.serve" "$tmp/serve_b.log" "${env_cuda[@]}" "$specd" serve --device cpu
grep -q 'device cpu' "$tmp/serve_b.log"
pick='import json,sys; c=json.load(open(sys.argv[1]))["choices"][0]; print(json.dumps([c["text"], c["logprobs"]]))'
a=$(python3 -c "$pick" "$tmp/a.serve") b=$(python3 -c "$pick" "$tmp/b.serve")
[ "$a" = "$b" ] || { echo "serve: --device cpu differs from no flag: $a / $b"; exit 1; }
echo "serve: --device cpu reaches the scoring context, output as without the flag"

# the drafter makes one instance of each served policy at start: its draft model on --device cpu
"${env_cuda[@]}" "$bin/specd-drafter" --model "$model" --device cpu \
  --policy "d=draft:model=$model" --endpoint "ipc://$tmp/d1" 2> "$tmp/drafter.log" &
dpid=$!
pids+=("$dpid")
for _ in $(seq 600); do
  grep -q 'listening on' "$tmp/drafter.log" && break
  kill -0 "$dpid" 2>/dev/null || { cat "$tmp/drafter.log"; echo "drafter exited"; exit 1; }
  sleep 0.1
done
grep -q 'serving policy d = draft.*(device cpu)' "$tmp/drafter.log" ||
  { cat "$tmp/drafter.log"; exit 1; }
kill "$dpid"
wait "$dpid" || true
echo "specd-drafter: --device cpu reaches the draft model"
echo "--device: ok"
