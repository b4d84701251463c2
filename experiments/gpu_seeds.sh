#!/usr/bin/env bash
# Every CUDA seed of each task judged on the bench shapes by `python -m kevolve.evaluate` (the harness's own
# clock: CUDA-graph replay, L2 flushed), then one compact table: seed, configuration, kernel / compile / eager
# µs, memory-floor µs, fraction of the floor, speedups. Run on the GPU host from the repository root:
#   bash experiments/gpu_seeds.sh                                   # all six tasks, every cuda seed
#   TASKS="layernorm_fwd layernorm_bwd" SEEDS="cuda_split.cu cuda_fast.cu" bash experiments/gpu_seeds.sh
# One evaluation takes ~1 min; at ~20 evaluations for all six tasks, split the tasks over calls of at most
# 10 min. EVAL_S caps one evaluation (default 240 s). Logs (one per task and seed) and the table under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out/seeds"
tasks=${TASKS:-layernorm_fwd layernorm_bwd rmsnorm_fwd rmsnorm_bwd cross_entropy_fwd cross_entropy_bwd}
for t in $tasks; do
  seeds=$(python3 -c "from kevolve.task import load_task; print(' '.join(p.name for p in load_task('$t').seed_paths('cuda')))")
  for s in $seeds; do
    if [ -n "${SEEDS:-}" ] && ! [[ " $SEEDS " == *" $s "* ]]; then continue; fi
    log="$out/seeds/${t}__${s%.cu}.txt"
    timeout ${EVAL_S:-240} python3 -m kevolve.evaluate task=$t kernel=tasks/$t/seeds/$s shapes=bench > "$log" 2>&1
    echo "$t $s exit=$? $(tail -1 "$log" | cut -c1-200)"
  done
done
python3 experiments/seeds_table.py "$out"/seeds/*.txt | tee "$out/seeds_table.txt"
