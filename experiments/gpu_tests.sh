#!/usr/bin/env bash
# Every gpu-marked test on this GPU host (judge and adversarial), logs under $OUT, a short table last.
#   bash experiments/gpu_tests.sh          (on the GPU machine, from the repository root)
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
timeout ${TEST_S:-540} python3 -m pytest tests/judge/test_gpu.py tests/adversarial/test_cuda.py -q -m gpu -rA \
  -p no:cacheprovider ${PYTEST_ARGS:-} > "$out/gpu_tests.txt" 2>&1; echo "pytest exit $?" >> "$out/gpu_tests.txt"
grep -E "^(PASSED|FAILED|ERROR)|passed|failed|pytest exit" "$out/gpu_tests.txt" | sed 's/^PASSED //' | cut -c1-160 | tail -60
