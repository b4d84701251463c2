#!/usr/bin/env bash
# Issue 37 on a GPU (repository root, after `source .devdeps/install.sh`); STAGES picks and orders the parts, each
# under its own limit:
#   margins  experiments/canary_margins.py on CUDA for MARGINS (task:kernel; default both layernorm best kernels): the
#            limits measured before the kernel loads (the trivial kernel in a graph, the canary's cycle, the peak) and
#            the canary's reported/known ratio on every timed configuration (MARGINS_S seconds);
#   tests    the gpu tests of the judge's clock and confinement (TESTS; the seed sweeps left out; TESTS_S seconds);
#   seeds    every task's CUDA seeds and best kernels judged for correctness (test_gpu.py's sweeps; SEEDS_S seconds);
#   tally    experiments/tally_forgeries.py cuda with this judge, then with the judge in .devdeps/old_judge if there
#            is one (`git archive <rev> kevolve | tar -x -C .devdeps/old_judge`), today's attacks (TALLY_S each);
#   strict   experiments/strict_cuda_probe.py: which confinement layer keeps the CUDA driver from starting after it.
# $OUT gets one log per stage and summary.txt (printed last).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}; export PATH=$PATH:$CUDA_HOME/bin TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"; summary="$out/summary.txt"
say() { echo "$*" | tee -a "$summary"; }
t0=$(date +%s)
pytest_tail() {   # $1: log; the counts line, then every failure
  say "$2: exit $3 after $(( $(date +%s) - t0 )) s: $(grep -E '(passed|failed|error)' "$1" | tail -1)"
  grep -E "^(FAILED|ERROR)" "$1" | cut -c1-400 | tee -a "$summary"
}
say "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
say "strict_cuda default: $(python3 -c 'from kevolve.judge.options import Options; print(Options().strict_cuda)' 2>&1)"
for stage in ${STAGES:-strict margins tests seeds tally}; do
  case $stage in
  strict)
    timeout ${STRICT_S:-150} python3 experiments/strict_cuda_probe.py > "$out/strict.txt" 2>&1
    say "strict probe: exit $? after $(( $(date +%s) - t0 )) s"; cut -c1-400 "$out/strict.txt" | tee -a "$summary" ;;
  margins)
    timeout ${MARGINS_S:-170} python3 experiments/canary_margins.py --target cuda --shapes ${SHAPES:-small} \
      ${MARGINS:-layernorm_fwd:tasks/layernorm_fwd/best/cuda.cu layernorm_bwd:tasks/layernorm_bwd/best/cuda.cu} \
      > "$out/margins.txt" 2>&1
    say "margins: exit $? after $(( $(date +%s) - t0 )) s"
    grep -v "^  canary" "$out/margins.txt" | grep -v "^\s*$" | cut -c1-300 | tail -12 | tee -a "$summary" ;;
  tests)
    timeout ${TESTS_S:-380} python3 -m pytest -v -m gpu -rA -p no:cacheprovider --durations=15 \
      ${TESTS:-tests/adversarial/test_impossible.py tests/judge/test_outside.py tests/adversarial/test_cuda.py tests/adversarial/test_reach.py tests/judge/test_l2.py tests/judge/test_gpu.py} \
      -k "not (cuda_seed_is_correct or best_cuda_kernel_is_correct)" > "$out/tests.txt" 2>&1
    pytest_tail "$out/tests.txt" tests $? ;;
  seeds)
    timeout ${SEEDS_S:-240} python3 -m pytest -v -m gpu -rA -p no:cacheprovider --durations=10 tests/judge/test_gpu.py \
      -k "cuda_seed_is_correct or best_cuda_kernel_is_correct" > "$out/seeds.txt" 2>&1
    pytest_tail "$out/seeds.txt" seeds $? ;;
  tally)
    timeout ${TALLY_S:-150} python3 experiments/tally_forgeries.py cuda > "$out/tally.txt" 2>&1
    say "tally (this judge): exit $? after $(( $(date +%s) - t0 )) s"; tail -6 "$out/tally.txt" | cut -c1-300 | tee -a "$summary"
    if [ -d .devdeps/old_judge/kevolve ]; then
      PYTHONPATH=$PWD/.devdeps/old_judge:/tmp/site ATTACKS=$PWD/tests/adversarial timeout ${TALLY_S:-150} \
        python3 experiments/tally_forgeries.py cuda > "$out/tally_old.txt" 2>&1
      say "tally (old judge $(cat .devdeps/old_judge/REV 2>/dev/null)): exit $? after $(( $(date +%s) - t0 )) s"
      tail -6 "$out/tally_old.txt" | cut -c1-300 | tee -a "$summary"
    fi ;;
  esac
done
