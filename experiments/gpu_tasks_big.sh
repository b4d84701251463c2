#!/usr/bin/env bash
# The GEMM and convolution tasks (unet_linear_fwd/bwd, llama_ffw_fwd, unet_conv2d_fwd, resnet_block_fwd) on a
# GPU host, in one device call of at most 10 min, from the repository root:
#   1. their CUDA seeds correct on the small set (the `gpu` test tests/judge/test_gpu.py::test_cuda_seed_is_correct);
#   2. how much of each tolerance cuBLAS / cuDNN float32 uses on the bench set, and that TF32 fails it
#      (experiments/tolerance_margins.py; rmsnorm_bwd too, for its new 65536-row configurations).
# Then, in calls of their own (the plain seeds are slow on the bench shapes, resnet_block_fwd most):
#   TASKS="unet_linear_fwd unet_linear_bwd llama_ffw_fwd unet_conv2d_fwd" EVAL_S=280 bash experiments/gpu_seeds.sh
#   TASKS=resnet_block_fwd EVAL_S=580 bash experiments/gpu_seeds.sh
# Logs under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"
big="unet_linear_fwd unet_linear_bwd llama_ffw_fwd unet_conv2d_fwd resnet_block_fwd"
timeout ${SEEDS_S:-150} python3 -m pytest -q -m gpu tests/judge/test_gpu.py -k "test_cuda_seed_is_correct and (${big// / or })" \
  -p no:cacheprovider > "$out/big_seeds_small.txt" 2>&1; echo "seeds exit $?" >> "$out/big_seeds_small.txt"
tail -5 "$out/big_seeds_small.txt"
timeout ${TOL_S:-400} python3 experiments/tolerance_margins.py ${big% *} rmsnorm_bwd resnet_block_fwd --shapes bench \
  > "$out/big_tolerance_margins.txt" 2>&1; echo "margins exit $?" >> "$out/big_tolerance_margins.txt"
cat "$out/big_tolerance_margins.txt" | cut -c1-120
