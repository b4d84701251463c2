#!/usr/bin/env bash
# One device call, from the repository root on a GPU host (after `source .devdeps/install.sh`):
#   1. the further CUDA seeds' gpu test on the whole small set (tests/judge/test_gpu.py, TESTS_K selects), which
#      runs what the CPU emulator cannot (clusters, occupancy queries, the real SM count);
#   2. then, alone on the GPU, a second clock on each seed of CONFIRM ("task:seed.cu ..."):
#      experiments/bench_clock.py (synced, queued and CUDA-graph clocks, and triton's do_bench and
#      do_bench_cudagraph where triton imports) on the bench shapes, so a speedup on the judge's clock is checked
#      on clocks the judge does not use.
#   CONFIRM="rmsnorm_bwd:cuda_fast.cu mnist_linear_fwd:cuda_tiled.cu" TESTS_K="cuda_tiled" bash experiments/gpu_confirm.sh
# Logs under $OUT (tests.txt, clock_<task>_<seed>.txt/.log); the geomean lines print last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"; t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ -n "${TESTS_K:-}" ]; then
  timeout ${TESTS_S:-240} python3 -m pytest -m gpu -v -rA -p no:cacheprovider ${TESTS_N:+-n $TESTS_N} \
    "tests/judge/test_gpu.py::test_every_further_cuda_seed_is_correct" -k "$TESTS_K" > "$out/tests.txt" 2>&1
  echo "tests: exit $? at $(( $(date +%s) - t0 )) s: $(grep -E '(passed|failed|error)' "$out/tests.txt" | tail -1)"
fi
for pair in ${CONFIRM:-}; do
  t=${pair%%:*}; s=${pair#*:}; name="clock_${t}_${s%.cu}"
  timeout ${CLOCK_S:-100} python3 experiments/bench_clock.py --task "$t" --kernel "tasks/$t/seeds/$s" --shapes bench \
    --out "$out/$name.txt" > "$out/$name.log" 2>&1
  echo "bench_clock $t/$s: exit $? at $(( $(date +%s) - t0 )) s"
done
echo "== tests"; grep -E "(PASSED|FAILED|ERROR)( |$)" "$out/tests.txt" 2>/dev/null | grep -vE "^(PASSED|FAILED|ERROR) " | cut -c1-160
echo "== second clock"; grep -h "geomean" "$out"/clock_*.txt "$out"/clock_*.log 2>/dev/null | sort -u | cut -c1-200
