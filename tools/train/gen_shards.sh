#!/usr/bin/env bash
# Runs specd-gen-data as a series of shards, each a chunk of at most ~MAX_SECONDS of admission
# under the exclusive CPU lock (a flock file the machine's heavy jobs share), so other work on the
# machine gets the lock between chunks, and logs each shard's command line and result to
# DATA/GEN_LOG.md. Each shard continues at the job where the previous one stopped.
#   usage: gen_shards.sh BUILD DATA PROMPTS FIRST_SHARD N_SHARDS START_JOB [extra gen-data flags]
#   env: SPECD_MODEL (the default model) SPECD_CPU_LOCK (${TMPDIR:-/tmp}/specd-cpu.lock) BATCH (32)
#        THREADS (2) MAX_SECONDS (330) SEED (1) XWAIT (900) STOP_AT (epoch seconds: start no
#        shard after it)
set -euo pipefail
build=$1 data=$2 prompts=$3 first=$4 n=$5 job=$6
shift 6
model=${SPECD_MODEL:-$HOME/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf}
sha=$(sha256sum "$model" | cut -d' ' -f1)
log=$data/GEN_LOG.md
lockf=${SPECD_CPU_LOCK:-${TMPDIR:-/tmp}/specd-cpu.lock}
mkdir -p "$data"
for ((i = first; i < first + n; i++)); do
  if [[ -n ${STOP_AT:-} && $(date +%s) -ge $STOP_AT ]]; then echo "STOP_AT reached"; break; fi
  shard=$(printf 's%03d' "$i")
  cmd=(nice -n 5 "$build/specd-gen-data" -m "$model" --prompts "$prompts" -o "$data/$shard"
       -b "${BATCH:-32}" -t "${THREADS:-2}" --start "$job" --max-seconds "${MAX_SECONDS:-330}"
       --seed "${SEED:-1}" --model-sha256 "$sha" "$@")
  t0=$(date -u +%H:%M:%S)
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  # The exclusive lock first; when long shared holders (training runs) keep it from us for
  # XWAIT seconds, run the chunk under the shared lock instead (still nice 5), so data keeps
  # coming while an exclusive benchmark still waits for at most one chunk.
  lock=-x
  if ! out=$(flock -x -w "${XWAIT:-900}" "$lockf" "${cmd[@]}"); then
    [[ -z $out ]] || { echo "$out"; exit 1; } # the generator itself failed
    lock=-s
    out=$(flock -s -w 900 "$lockf" "${cmd[@]}")
  fi
  echo "$out"
  job=$(sed -n 's/.*next_job \([0-9]*\).*/\1/p' <<<"$out")
  {
    echo "- $shard ($t0 -> $(date -u +%H:%M:%S) UTC, load before $load0, after $(cut -d' ' -f1-3 /proc/loadavg)):"
    echo "  \`flock $lock $lockf ${cmd[*]}\`"
    echo "  -> $out"
  } >>"$log"
done
echo "next job: $job"
