#!/usr/bin/env bash
# Every `gpu` test, in parallel groups, on a GPU host in one device call (~8 min on an H200 with 16 cores), from
# the repository root:   bash experiments/gpu_verify.sh
# Groups (each one pytest process, run side by side — correctness only: timings taken here share the GPU, so no
# number from this script is a result; time with gpu_seeds.sh / bench_clock.py in a call of their own):
#   seeds    every task's plain CUDA seed correct on `small` (tests/judge/test_gpu.py::test_cuda_seed_is_correct)
#   further  every further CUDA seed and every torch-ABI seed correct
#   judge    the rest of tests/judge/test_gpu.py and tests/adversarial/test_cuda.py (hostile kernels on the GPU)
#   filters  the task filters on every task's `bench` set through CUDA (tests/task/test_filters.py)
#   profile  Nsight Compute on the worker (tests/search/test_profile.py; KEVOLVE_NCU_RECORD keeps ncu's CSV)
# ONLY="seeds judge" picks some; GROUP_S caps each (default 540 s). Logs under $OUT, one summary table last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
declare -A ARGS=(
  [seeds]="tests/judge/test_gpu.py -k test_cuda_seed_is_correct"
  [further]="tests/judge/test_gpu.py -k test_every_further_cuda_seed_is_correct or test_torch_abi_seed_is_correct"
  [judge]="tests/judge/test_gpu.py tests/adversarial/test_cuda.py -k not (test_cuda_seed_is_correct or test_every_further_cuda_seed_is_correct or test_torch_abi_seed_is_correct)"
  [filters]="tests/task/test_filters.py"
  [profile]="tests/search/test_profile.py"
)
groups=${ONLY:-seeds further judge filters profile}
for g in $groups; do
  set -- ${ARGS[$g]%% -k *}
  k=""; [[ "${ARGS[$g]}" == *" -k "* ]] && k="${ARGS[$g]#* -k }"
  ( KEVOLVE_NCU_RECORD="$out/ncu" timeout ${GROUP_S:-540} python3 -m pytest -q -m gpu -rA -p no:cacheprovider \
      "$@" ${k:+-k "$k"} > "$out/gpu_$g.txt" 2>&1; echo "pytest exit $?" >> "$out/gpu_$g.txt" ) &
done
wait
for g in $groups; do
  echo "== $g: $(grep -E '^[0-9]+ (passed|failed)|(passed|failed|error).* in [0-9.]+s' "$out/gpu_$g.txt" | tail -1) $(tail -1 "$out/gpu_$g.txt")"
  grep -E "^(FAILED|ERROR)" "$out/gpu_$g.txt" | cut -c1-220
done
