#!/usr/bin/env bash
# One device call of knob searches, one after another, from the repository root after `source .devdeps/install.sh`:
#   SEARCHES="task:seconds ..." (each `python -m kevolve task=T resources.target=cuda search.wall_time_s=S`, with
#   SEARCH_ARGS, under a time limit of S + CONFIRM_S for its final judgement), then TESTS (pytest arguments, run
#   with -m gpu), if given. $OUT gets run_<task>.tgz per search (kevolve.db, best.cu, logs: `python -m
#   kevolve.tasks best RUN_DIR` promotes its best, `python -m kevolve.report RUN_DIR` renders it) and summary.txt;
#   then EVALS ("task:path ..."), each kernel judged on bench by `python -m kevolve.evaluate` (its table: eval_*.txt).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}; export PATH=$PATH:$CUDA_HOME/bin
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"
res=$(mktemp -d); summary="$out/summary.txt"
say() { echo "$*" | tee -a "$summary"; }
say "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
t0=$(date +%s)
for pair in ${SEARCHES:-}; do
  task=${pair%%:*}; s=${pair#*:}; run="$res/run_$task"
  timeout $(( s + ${CONFIRM_S:-90} )) python3 -m kevolve task=$task resources.target=cuda search.wall_time_s=$s \
    run_dir="$run" ${SEARCH_ARGS:-} > "$res/search_$task.txt" 2>&1
  say "search $task ${s}s: exit $? after $(( $(date +%s) - t0 )) s"
  tail -1 "$res/search_$task.txt" | cut -c1-400 | tee -a "$summary"
  cp "$res/search_$task.txt" "$run/" 2>/dev/null
  [ -d "$run" ] && tar -C "$res" -czf "$out/run_$task.tgz" "run_$task"
done
if [ -n "${TESTS:-}" ]; then
  timeout ${TESTS_S:-120} python3 -m pytest -q -m gpu -rA -p no:cacheprovider $TESTS > "$out/tests.txt" 2>&1
  say "tests: exit $? after $(( $(date +%s) - t0 )) s: $(grep -E '(passed|failed|error)' "$out/tests.txt" | tail -1)"
  grep -E "^(PASSED|FAILED|ERROR)" "$out/tests.txt" | cut -c1-200 | tee -a "$summary"
fi
for pair in ${EVALS:-}; do                       # then each "task:path" judged on bench, alone on the GPU
  etask=${pair%%:*}; kernel=${pair#*:}; log="$out/eval_${etask}_$(basename "$kernel" .cu).txt"
  timeout ${EVAL_S:-150} python3 -m kevolve.evaluate task=$etask kernel=$kernel shapes=bench > "$log" 2>&1
  say "eval $etask $kernel: exit $? after $(( $(date +%s) - t0 )) s: $(grep -E '^correct|^wrong|speedup' "$log" | tail -1 | cut -c1-300)"
done
