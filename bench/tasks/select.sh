#!/usr/bin/env bash
# Selects the task suite: runs every candidate item R times through plain decoding of the base
# model at T 0.8 (seeds 1..R, llama.cpp's default filters) and keeps the items it passes at least
# 30% of the time, so that a lossy policy's pass rate on tasks.jsonl measures what the policy
# loses rather than what the model never could. Writes tasks.jsonl (the kept items, verbatim) and
# calibration.json (each item's pass rate, the command, R); prints the per-item table.
#
#   bench/tasks/select.sh [SPECD] [R] [N]     (defaults: build/specd, 5, 48)
#
# Small on purpose (about 50 items x 5 runs x <= 48 tokens, one thread, nice 10): a few minutes
# of one core.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
specd=$(realpath "${1:-$root/build/specd}")
cd "$root" # the paths recorded in calibration.json are the repository's
runs=${2:-5}
n=${3:-48}
nice -n 10 "$specd" ab --tasks bench/tasks/candidates.jsonl --calibrate "$runs" --keep-rate 0.3 \
  --temp 0.8 --seed 1 -n "$n" -t 1 --select-out bench/tasks/tasks.jsonl --json bench/tasks/calibration.json
