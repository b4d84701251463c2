#!/usr/bin/env bash
# Diagnosis and numbers in one device call: every CUDA seed's correctness on `small` (with the failure text),
# the adversarial CUDA tests streamed one line each, then experiments/gpu_bench.sh. Logs under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"
timeout ${CHECK_S:-100} python3 -m kevolve.tasks check-seeds --target cuda --shapes small > "$out/check_seeds.txt" 2>&1
echo "check exit $?" >> "$out/check_seeds.txt"; cut -c1-300 "$out/check_seeds.txt" | tail -16
timeout ${ADV_S:-130} python3 -m pytest tests/adversarial/test_cuda.py -m gpu -v --tb=line -p no:cacheprovider \
  > "$out/adversarial_gpu.txt" 2>&1; echo "pytest exit $?" >> "$out/adversarial_gpu.txt"
grep -E "PASSED|FAILED|ERROR|^/|Error|pytest exit" "$out/adversarial_gpu.txt" | cut -c1-220 | tail -30
bash experiments/gpu_bench.sh
