#!/usr/bin/env bash
# One device call that does a session's GPU work in the order that matters, from the repository root, after
# `source .devdeps/install.sh`:
#   1. side by side: a search on the bench shapes (SEARCH_TASK, default layernorm_bwd, for SEARCH_S seconds of
#      search wall time) and the `gpu` judge and adversarial tests (tests/judge/test_gpu.py without the per-task
#      seed tests, tests/adversarial/test_cuda.py). Both judge through kevolve's device lock (timing phases
#      exclusive), so the search's times are those of a GPU with nothing else timing on it;
#      Beside them, EVALS ("task:path ..."): each kernel judged on bench by `python -m kevolve.evaluate`, one
#      after another (also under the lock);
#   2. alone on the GPU: the three clocks (experiments/bench_clock.py) for each kernel of CLOCK ("task:path ...");
#   3. alone: EXTRA, a command line of further checks (e.g. "bash experiments/gpu_tasks_check.sh"), if given.
# Each step has its own time limit (SEARCH_S + 90, TESTS_S, CLOCK_S, EXTRA_S); a step that runs out is named in
# the summary and the next one starts. $OUT gets: run.tgz (the search's run directory: kevolve.db, the best
# kernel, the logs — `python -m kevolve.report` renders it anywhere), logs.tgz (everything), summary.txt.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}; export PATH=$PATH:$CUDA_HOME/bin
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"
res=$(mktemp -d); run="$res/run"
summary="$res/summary.txt"
say() { echo "$*" | tee -a "$summary"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv,noheader > "$res/gpu.txt" 2>&1
say "gpu: $(cat "$res/gpu.txt")"
t0=$(date +%s)

task=${SEARCH_TASK:-layernorm_bwd}
if [ "${SEARCH_S:-200}" -gt 0 ]; then
  timeout $(( ${SEARCH_S:-200} + ${CONFIRM_S:-90} )) python3 -m kevolve task=$task resources.target=cuda \
    search.wall_time_s=${SEARCH_S:-200} run_dir="$run" ${SEARCH_ARGS:-} > "$res/search.txt" 2>&1 &
  search=$!
fi
if [ -n "${EVALS:-}" ]; then
  ( for pair in $EVALS; do
      etask=${pair%%:*}; kernel=${pair#*:}; log="$res/eval_${etask}_$(basename "$kernel" .cu).txt"
      KEVOLVE_TRACE=1 timeout ${EVAL_S:-200} python3 -m kevolve.evaluate task=$etask kernel=$kernel shapes=bench \
        > "$log" 2> "${log%.txt}.trace"
      rc=$?
      echo "eval $etask $(basename "$kernel"): exit $rc after $(( $(date +%s) - t0 )) s: $(tail -1 "$log" | cut -c1-400)" >> "$res/evals.txt"
    done ) &
  evals=$!
fi
if [ "${TESTS_S:-280}" -gt 0 ]; then
  timeout ${TESTS_S:-280} python3 -m pytest -q -m gpu -rA -p no:cacheprovider tests/judge/test_gpu.py \
    tests/adversarial/test_cuda.py tests/judge/test_outside.py -k "not (test_cuda_seed_is_correct or test_every_further_cuda_seed_is_correct)" \
    > "$res/tests.txt" 2>&1
  say "tests: exit $? after $(( $(date +%s) - t0 )) s: $(grep -E '(passed|failed|error)' "$res/tests.txt" | tail -1)"
  grep -E "^(FAILED|ERROR)" "$res/tests.txt" | cut -c1-200 | tee -a "$summary"
fi
if [ -n "${search:-}" ]; then
  wait $search
  say "search: exit $? after $(( $(date +%s) - t0 )) s"
  tail -1 "$res/search.txt" | cut -c1-600 | tee -a "$summary"
  [ -d "$run" ] && tar -C "$res" -czf "$out/run.tgz" run
fi

if [ -n "${evals:-}" ]; then
  wait $evals
  tee -a "$summary" < "$res/evals.txt"
fi

for pair in ${CLOCK:-}; do
  ctask=${pair%%:*}; kernel=${pair#*:}
  name=$(basename "$kernel" .cu)
  timeout ${CLOCK_S:-120} python3 experiments/bench_clock.py --task "$ctask" --kernel "$kernel" --shapes bench \
    --out "$res/clock_${ctask}_${name}.txt" > "$res/clock_${ctask}_${name}.log" 2>&1
  say "clock $ctask $name: exit $? after $(( $(date +%s) - t0 )) s"
  grep -iE "geomean|wrong|error" "$res/clock_${ctask}_${name}.log" | head -6 | tee -a "$summary"
done

if [ -n "${EXTRA:-}" ]; then
  OUT="$res/extra" timeout ${EXTRA_S:-150} bash -c "mkdir -p \"\$OUT\"; $EXTRA" > "$res/extra.txt" 2>&1
  say "extra: exit $? after $(( $(date +%s) - t0 )) s"
  tail -15 "$res/extra.txt" | tee -a "$summary"
fi

cp "$summary" "$out/summary.txt"
tar -C "$res" --exclude=run -czf "$out/logs.tgz" .
