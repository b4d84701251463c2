#!/usr/bin/env bash
# One device call: every `gpu` test (experiments/gpu_verify.sh, parallel groups) and, beside it, Nsight Compute
# per configuration for the fast norm seeds (experiments/ncu_seeds.py). Correctness only: nothing here is a
# timing result. From the repository root, after `source .devdeps/install.sh`:
#   bash experiments/gpu_verify_profile.sh
# Everything lands in $OUT/verify_profile.tgz (plus ncu.txt and summary.txt); a short summary last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}; export PATH=$PATH:$CUDA_HOME/bin
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"
res=$(mktemp -d)
OUT=$res GROUP_S=${GROUP_S:-480} bash experiments/gpu_verify.sh > "$res/verify.txt" 2>&1 &
verify=$!
timeout ${NCU_S:-420} python3 experiments/ncu_seeds.py --task ${NCU_TASKS:-layernorm_fwd layernorm_bwd rmsnorm_fwd} \
  --kernel 'tasks/{task}/seeds/cuda_fast.cu' 'tasks/{task}/seeds/cuda_split.cu' --jobs ${NCU_JOBS:-6} \
  > "$res/ncu.txt" 2>&1
echo "ncu exit $?" >> "$res/ncu.txt"
wait $verify
cp "$res/ncu.txt" "$res/verify.txt" "$out/"
tar -C "$res" -czf "$out/verify_profile.tgz" .
tail -25 "$res/verify.txt" | tee "$out/summary.txt"
grep -cE "^[a-z]" "$res/ncu.txt"
