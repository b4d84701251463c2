#!/usr/bin/env bash
# Every task's CUDA seed through `python -m kevolve.evaluate` on the bench shapes (run on a GPU host).
#   bash experiments/seeds_bench.sh [OUTDIR] [TASK ...]
out=${1:-experiments/results}; shift || true
tasks=${*:-$(ls tasks)}
mkdir -p "$out"
for t in $tasks; do
  python3 -m kevolve.evaluate task=$t kernel=tasks/$t/seeds/cuda.cu shapes=bench > "$out/seed_$t.txt" 2>&1
  echo "$t exit=$? $(tail -1 "$out/seed_$t.txt" | cut -c1-300)"
done
