#!/usr/bin/env bash
# Issue 37 on a GPU, one device call (repository root, after `source .devdeps/install.sh`):
#   1. experiments/canary_margins.py on CUDA for MARGINS (task:kernel; default both layernorm best kernels): the
#      limits measured before the kernel loads (the trivial kernel in a graph, the canary's cycle, the peak) and the
#      canary's reported/known ratio on every timed configuration;
#   2. the gpu tests of the judge's clock and confinement (TESTS, for TESTS_S seconds; the seed sweeps left out).
# $OUT gets margins.txt, tests.txt and summary.txt (printed last).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}; export PATH=$PATH:$CUDA_HOME/bin TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"; summary="$out/summary.txt"
say() { echo "$*" | tee -a "$summary"; }
t0=$(date +%s)
say "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
timeout ${MARGINS_S:-170} python3 experiments/canary_margins.py --target cuda --shapes ${SHAPES:-small} \
  ${MARGINS:-layernorm_fwd:tasks/layernorm_fwd/best/cuda.cu layernorm_bwd:tasks/layernorm_bwd/best/cuda.cu} \
  > "$out/margins.txt" 2>&1
say "margins: exit $? after $(( $(date +%s) - t0 )) s"
grep -v "^  canary" "$out/margins.txt" | grep -v "^\s*$" | cut -c1-300 | tail -12 | tee -a "$summary"
if [ "${TESTS_S:-380}" -gt 0 ]; then
  timeout ${TESTS_S:-380} python3 -m pytest -q -m gpu -rA -p no:cacheprovider --durations=15 \
    ${TESTS:-tests/adversarial/test_impossible.py tests/judge/test_outside.py tests/adversarial/test_cuda.py tests/adversarial/test_reach.py tests/judge/test_l2.py tests/judge/test_gpu.py} \
    -k "not (test_cuda_seed_is_correct or test_every_further_cuda_seed_is_correct)" > "$out/tests.txt" 2>&1
  say "tests: exit $? after $(( $(date +%s) - t0 )) s: $(grep -E '(passed|failed|error)' "$out/tests.txt" | tail -1)"
  grep -E "^(FAILED|ERROR)" "$out/tests.txt" | cut -c1-400 | tee -a "$summary"
fi
