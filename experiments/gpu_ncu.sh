#!/usr/bin/env bash
# Nsight Compute side by side with torch.compile, then gpu tests, in one device call (repository root, after
# `source .devdeps/install.sh`):
#   NCU="task:kernel-pattern ..." (default: the shortfalls of issue 14: layernorm_fwd's and rmsnorm_fwd's best/,
#   cross_entropy_bwd's cuda_fast seed), each `python experiments/ncu_seeds.py --task T --kernel K --torch compile`
#   (NCU_TORCH= empty: the kernel alone)
#   on bench, NCU_JOBS at a time; then EVALS ("task:path ...", each judged on bench by `python -m kevolve.evaluate`
#   within EVAL_S, alone on the GPU); then TESTS (pytest arguments, -m gpu, TESTS_N xdist workers) for TESTS_S.
# $OUT gets ncu_<task>.txt per task, eval_<task>_<kernel>.txt, tests.txt and summary.txt (also printed last).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}; export PATH=$PATH:$CUDA_HOME/bin
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"; summary="$out/summary.txt"
say() { echo "$*" | tee -a "$summary"; }
say "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1); ncu: $(ncu --version 2>&1 | tail -1)"
t0=$(date +%s)
default='layernorm_fwd:tasks/{task}/best/cuda.cu rmsnorm_fwd:tasks/{task}/best/cuda.cu cross_entropy_bwd:tasks/{task}/seeds/cuda_fast.cu'
for pair in ${NCU:-$default}; do        # (a literal default inside ${NCU:-...} would end at {task}'s brace)
  task=${pair%%:*}; kernel=${pair#*:}
  timeout ${NCU_S:-300} python3 experiments/ncu_seeds.py --task "$task" --kernel "$kernel" --torch ${NCU_TORCH-compile} \
    --jobs ${NCU_JOBS:-8} --shapes ${SHAPES:-bench} > "$out/ncu_$task.txt" 2>&1
  say "ncu $task $kernel: exit $? after $(( $(date +%s) - t0 )) s"
done
for pair in ${EVALS:-}; do
  etask=${pair%%:*}; kernel=${pair#*:}; log="$out/eval_${etask}_$(basename "$kernel" .cu).txt"
  KEVOLVE_TRACE=1 timeout ${EVAL_S:-200} python3 -m kevolve.evaluate task=$etask kernel=$kernel shapes=bench > "$log" 2>&1
  say "eval $etask $kernel: exit $? after $(( $(date +%s) - t0 )) s: $(grep -E '^correct|^wrong|speedup' "$log" | tail -1 | cut -c1-300)"
done
if [ -n "${TESTS:-}" ]; then
  timeout ${TESTS_S:-300} python3 -m pytest -q -m gpu -rA -p no:cacheprovider ${TESTS_N:+-n $TESTS_N} $TESTS \
    ${TESTS_K:+-k "$TESTS_K"} > "$out/tests.txt" 2>&1
  say "tests: exit $? after $(( $(date +%s) - t0 )) s: $(grep -E '(passed|failed|error)' "$out/tests.txt" | tail -1)"
  grep -E "^(PASSED|FAILED|ERROR)" "$out/tests.txt" | cut -c1-220 | tee -a "$summary"
fi
for task in $(ls "$out" | sed -n 's/^ncu_\(.*\)\.txt$/\1/p'); do      # the short table: time per config, ours vs compile
  say "== $task"; grep -vE "^(configuration|##|\s*$)" "$out/ncu_$task.txt" | grep -v "floor" | awk '{print $1, $2, $3, $4, $5, $6, $7, $8, $9, $10}' | head -80 | tee -a "$summary" >/dev/null
done
tail -c 6000 "$summary"
