#!/usr/bin/env bash
# Every task's CUDA seed through `python -m kevolve.evaluate` on the bench shapes (run on a GPU host).
#   [SEEDS='cuda.cu cuda_split.cu'] bash experiments/seeds_bench.sh [OUTDIR] [TASK ...]   (prints each judgement's seconds)
out=${1:-experiments/results}; shift || true
tasks=${*:-$(ls tasks)}
mkdir -p "$out"
for t in $tasks; do
  for k in ${SEEDS:-cuda.cu}; do
    [ -f tasks/$t/seeds/$k ] || continue
    start=$(date +%s)
    python3 -m kevolve.evaluate task=$t kernel=tasks/$t/seeds/$k shapes=bench > "$out/seed_${t}_${k%.*}.txt" 2>&1
    echo "$t/$k exit=$? $(( $(date +%s) - start ))s $(tail -1 "$out/seed_${t}_${k%.*}.txt" | cut -c1-300)"
  done
done
