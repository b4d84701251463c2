#!/usr/bin/env bash
# One device call for the clock (issue 9): the gpu-marked judge tests, then the three clocks side by side for the
# split seeds of layernorm forward and backward on the bench shapes. Full logs under $OUT; a short table last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$out/gpu.txt"
timeout ${TEST_S:-320} python3 -m pytest tests/judge/test_gpu.py -q -m gpu -rA -p no:cacheprovider ${PYTEST_ARGS:-} \
  > "$out/gpu_tests.txt" 2>&1; echo "pytest exit $?" >> "$out/gpu_tests.txt"
timeout ${BENCH_S:-230} python3 experiments/bench_clock.py --task layernorm_fwd layernorm_bwd \
  --kernel 'tasks/{task}/seeds/cuda_split.cu' --shapes bench --out "$out/bench_clock.txt" > "$out/bench_clock.log" 2>&1
echo "bench exit $?" >> "$out/bench_clock.log"
grep -E "passed|failed|error|PASSED|FAILED|ERROR|pytest exit" "$out/gpu_tests.txt" | tail -30
tail -45 "$out/bench_clock.log"
