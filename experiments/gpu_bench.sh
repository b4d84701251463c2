#!/usr/bin/env bash
# The numbers README reports, on this GPU host: every task's plain CUDA seed through `python -m kevolve.evaluate`
# on the bench shapes (the honest clock), then the three clocks side by side for the split seeds of layernorm.
# Logs under $OUT (one tarball); a short table last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-/tmp/kevolve-out}; res=$(mktemp -d); mkdir -p "$out"
timeout ${SEEDS_S:-330} bash experiments/seeds_bench.sh "$res" ${TASKS:-} | tee "$res/seeds_summary.txt"
timeout ${BENCH_S:-200} python3 experiments/bench_clock.py --task ${CLOCK_TASKS:-layernorm_fwd layernorm_bwd} \
  --kernel 'tasks/{task}/seeds/cuda_split.cu' --shapes bench --out "$res/bench_clock.txt" > "$res/bench_clock.log" 2>&1
tar -C "$res" -czf "$out/gpu_bench.tgz" .
grep -h "geomean" "$res/bench_clock.log"
for f in "$res"/seed_*.txt; do echo "== $(basename $f)"; grep -E "speedup|REJECTED" "$f" | tail -2 | cut -c1-220; done
