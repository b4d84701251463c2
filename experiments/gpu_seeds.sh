#!/usr/bin/env bash
# Every CUDA seed of each task judged on the bench shapes by `python -m kevolve.evaluate` (the harness's own
# clock: CUDA-graph replay, L2 flushed), then one compact table: seed, configuration, kernel / compile / eager
# µs, memory-floor µs, fraction of the floor, speedups. Run on the GPU host from the repository root:
#   bash experiments/gpu_seeds.sh                                   # every task, every cuda seed
#   TASKS="layernorm_fwd layernorm_bwd" SEEDS="cuda_split.cu cuda_fast.cu" PAR=3 bash experiments/gpu_seeds.sh
#   ONLY="layernorm_bwd/cuda_fast.cu rmsnorm_bwd/cuda.cu" bash experiments/gpu_seeds.sh     # just these
# Every task's cuda.cu goes first, then the other seeds, so that a BUDGET_S cut leaves the plain seeds judged.
# PAR judgements run side by side (default 1): builds, torch.compile and references overlap, while the device
# lock (kevolve/judge/evaluator/gpu_lock.py) keeps every timing phase alone on the GPU, so the times are those of a GPU
# with nothing else on it. EVAL_S caps one evaluation (default 240 s); BUDGET_S stops starting new ones after
# that many seconds (default: none); REPS sets evaluate's reps (default: its own). Logs (one per task and seed; stderr with the KEVOLVE_TRACE phases beside
# each as .trace) and the table under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out/seeds"
tasks=${TASKS:-$(ls tasks)}
start=$(date +%s)
jobs=(); later=()
while read -r t s; do                  # one Python for the whole list: each task's CUDA seeds
  if [ -n "${SEEDS:-}" ] && ! [[ " $SEEDS " == *" $s "* ]]; then continue; fi
  if [ -n "${ONLY:-}" ] && ! [[ " $ONLY " == *" $t/$s "* ]]; then continue; fi
  if [ "$s" = cuda.cu ]; then jobs+=("$t $s"); else later+=("$t $s"); fi
done < <(python3 -c "
import sys
from kevolve.task import load_task
for t in sys.argv[1:]:
    for p in load_task(t).seed_paths('cuda'):
        print(t, p.name)" $tasks)
jobs+=("${later[@]}")                  # every task's plain seed first, then the rest
one() {
  local t=$1 s=$2 log="$out/seeds/${1}__${2%.cu}.txt"
  if [ -n "${BUDGET_S:-}" ] && [ $(( $(date +%s) - start )) -gt "$BUDGET_S" ]; then echo "$t $s skipped (budget)"; return; fi
  local t0=$(date +%s)
  KEVOLVE_TRACE=1 timeout ${EVAL_S:-240} python3 -m kevolve.evaluate task=$t kernel=tasks/$t/seeds/$s shapes=bench ${REPS:+reps=$REPS} > "$log" 2> "${log%.txt}.trace"
  echo "$t $s exit=$? $(( $(date +%s) - t0 ))s $(tail -1 "$log" | cut -c1-160)"
}
export -f one; export out start
printf '%s\n' "${jobs[@]}" | xargs -P ${PAR:-1} -L 1 bash -c 'one $0 $1'
python3 -m kevolve.tasks seeds-table "$out"/seeds/*.txt | tee "$out/seeds_table.txt"
