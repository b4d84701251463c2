#!/usr/bin/env bash
# robust-kbench's highlighted kernels judged on our tasks through the torch ABI (experiments/rkb_highlighted.py).
# Here, once (needs the robust-kbench mirror):  python experiments/rkb_highlighted.py export
# On the GPU host (carry .rkb):                  bash experiments/rkb_highlighted.sh [bench|small]
# Builds go to .rkb/cache (kept between calls on a warm machine); ONLY=layernorm/forward,... picks kernels;
# PER_KERNEL_S bounds each evaluation; RUN_JOBS evaluations run side by side (default 1). The table goes to
# stdout and $OUT/rkb_highlighted.txt. STEPS="build" or "run" does one step (default both).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export KEVOLVE_CACHE=${KEVOLVE_CACHE:-$PWD/.rkb/cache}
if [ -z "$CUDA_HOME" ] && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDA_HOME=/usr/local/cuda; fi
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"
shapes=${1:-bench}
if [[ "${STEPS:-build run}" == *build* ]]; then python3 experiments/rkb_highlighted.py build --jobs ${JOBS:-6} 2>&1 | tee "$out/rkb_build.txt" | cut -c1-240; fi
[[ "${STEPS:-build run}" == *run* ]] || exit 0
python3 experiments/rkb_highlighted.py run --shapes "$shapes" --only "${ONLY:-}" --timeout ${PER_KERNEL_S:-480} --jobs ${RUN_JOBS:-1} \
  2>&1 | tee "$out/rkb_highlighted.txt"
