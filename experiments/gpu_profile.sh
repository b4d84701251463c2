#!/usr/bin/env bash
# Where a GPU judgement's time goes, and the gpu tests of the judge, in one device call (repository root,
# after `source .devdeps/install.sh`):
#   1. experiments/bench_judge.py on bench for each "task:kernel" of PROFILE (default: layernorm_fwd's
#      cuda_rows.cu and layernorm_bwd's cuda_split.cu): JUDGEMENTS judgements with one evaluator's reuse (the
#      first pays for torch.compile), the last one's phases (the worker's breakdown too) and its cProfile,
#      once per value of CHECKS (--compiled-checks: default auto; "off on" compares eager and compiled checks);
#   2. for each task of THROUGHPUT (default none): experiments/bench_throughput.py with 1 and 2 evaluators on the
#      GPU, CANDIDATES knob variants of the seeds, the search's timing defaults (reps 50, budget 0.15 s);
#   3. TESTS (default: the judge's and the adversarial gpu tests, without the per-task seed sweeps) for TESTS_S.
#   0. first, if FUSED names tasks: experiments/bench_fused.py --device cuda --shapes bench on them (the compiled
#      reference and comparison alone, against eager).
# Stop 33's plan, two device calls of under 10 minutes each:
#   FUSED="layernorm_fwd layernorm_bwd rmsnorm_fwd rmsnorm_bwd cross_entropy_fwd cross_entropy_bwd"
#     PROFILE=layernorm_bwd:tasks/layernorm_bwd/best/cuda.cu CHECKS="off on" TESTS_S=0 bash experiments/gpu_profile.sh
#   PROFILE=" " TESTS="tests/judge/test_gpu.py" TESTS_S=420 bash experiments/gpu_profile.sh   (PROFILE=" ": none)
# $OUT gets logs.tgz (every log, each judgement's cProfile) and summary.txt (also printed last).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}; export PATH=$PATH:$CUDA_HOME/bin TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"
res=$(mktemp -d); summary="$res/summary.txt"
say() { echo "$*" | tee -a "$summary"; }
say "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv,noheader 2>&1)"
t0=$(date +%s)
if [ -n "${FUSED:-}" ]; then
  timeout ${FUSED_S:-300} python3 experiments/bench_fused.py --device cuda --shapes bench --reps ${FUSED_REPS:-3} $FUSED \
    > "$res/bench_fused.txt" 2>&1
  say "bench_fused: exit $? after $(( $(date +%s) - t0 )) s"
  grep -v " done$" "$res/bench_fused.txt" | tail -$(( $(echo $FUSED | wc -w) + 3 )) | tee -a "$summary"
fi
for pair in ${PROFILE:-layernorm_fwd:tasks/layernorm_fwd/seeds/cuda_rows.cu layernorm_bwd:tasks/layernorm_bwd/seeds/cuda_split.cu}; do
  for checks in ${CHECKS:-auto}; do
  task=${pair%%:*}; kernel=${pair#*:}; name=${task}_$(basename "$kernel" .cu)_checks-$checks
  timeout ${PROFILE_S:-200} python3 experiments/bench_judge.py --task "$task" --kernel "$kernel" --target ${TARGET:-cuda} \
    --judgements ${JUDGEMENTS:-3} --compiled-checks $checks --profile "$res/profile_$name.txt" > "$res/judge_$name.txt" 2>&1
  say "judge $name: exit $? after $(( $(date +%s) - t0 )) s"
  tail -${TAIL:-8} "$res/judge_$name.txt" | tee -a "$summary"
  done
done
for task in ${THROUGHPUT:-}; do
  timeout ${THROUGHPUT_S:-300} python3 experiments/bench_throughput.py --task "$task" --target ${TARGET:-cuda} \
    --evaluators ${EVALUATORS:-1 2} --candidates ${CANDIDATES:-12} --reps 50 --budget 0.15 > "$res/throughput_$task.txt" 2>&1
  say "throughput $task: exit $? after $(( $(date +%s) - t0 )) s"
  tail -${TAIL_T:-6} "$res/throughput_$task.txt" | cut -c1-400 | tee -a "$summary"
done
if [ "${TESTS_S:-240}" -gt 0 ]; then
  timeout ${TESTS_S:-240} python3 -m pytest -q -m "${MARK:-gpu}" -rA -p no:cacheprovider ${TESTS:-tests/judge/test_gpu.py tests/adversarial/test_cuda.py tests/judge/test_outside.py} \
    -k "not (test_cuda_seed_is_correct or test_every_further_cuda_seed_is_correct)" > "$res/tests.txt" 2>&1
  say "tests: exit $? after $(( $(date +%s) - t0 )) s: $(grep -E '(passed|failed|error)' "$res/tests.txt" | tail -1)"
  grep -E "^(FAILED|ERROR)" "$res/tests.txt" | cut -c1-220 | tee -a "$summary"
fi
cp "$summary" "$out/summary.txt"
tar -C "$res" -czf "$out/logs.tgz" .
