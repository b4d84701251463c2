#!/usr/bin/env bash
# Re-checks on one GPU the task fixes of branch tasks-fix, in one device call of at most ~4 min, from the repository
# root, one step after the other (never two processes on the GPU at once):
#   1. the task filters eager and init_impact through CUDA on `bench`, for the norm tasks (their new offset inits)
#      and the convolution tasks (TF32 off in the filters, as in the worker): python -m kevolve.tasks check;
#   2. eager's and torch.compile's share of the tolerance (and TF32's) on the configurations that failed before
#      (experiments/tolerance_margins.py --compile);
#   3. if time is left, the filters output_std and eager on rmsnorm_bwd, the largest task (3 input variants held).
# While each step runs, nvidia-smi samples the GPU's memory (its peak shows whether the filters release it).
# Logs under $OUT; the summary table comes last. Local dry run (no GPU): DEVICE=cpu SHAPES=small bash ...
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDA_HOME=/usr/local/cuda; fi
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"
device=${DEVICE:-cuda}
shapes=${SHAPES:-bench}
budget=${BUDGET_S:-225}                   # seconds for all steps together
norm="layernorm_fwd layernorm_bwd rmsnorm_fwd rmsnorm_bwd"
conv="mnist_conv_relu_pool_fwd mnist_conv_relu_pool_bwd unet_conv2d_fwd resnet_block_fwd"
tasks=${TASKS:-$norm $conv}
# step 2's configurations: the ones that failed on the H200 (or stand for them), each at the init set it now has
only=${ONLY:-'^B=8,\((64|1),256,256\)/offset|^B=64,\(64,256,256\)/offset|^B=8192,\(4096,\)/offset_mild|^B=1000,\(1000,\),eps=1e-06/offset_mild|^BT=65536,\(4096,\)/offset|^B=64,C=32,H=28,W=28,O=32/normal|^B=64,C=13,H=28,W=28,O=64/normal|^B=32,C=256,K=128,s1,p1/normal|^B=16,C=64,K=128,s2/random'}
start=$SECONDS
rows=()

left() { local l=$((budget - (SECONDS - start))); [ "$l" -lt 1 ] && l=1; [ "$l" -gt "$1" ] && l=$1; echo "$l"; }

# step NAME LIMIT_S LOG COMMAND...: runs COMMAND under `timeout`, the GPU's memory sampled; appends a summary row
step() {
  local name=$1 limit log=$out/$3 t0=$SECONDS sampler="" peak="n/a" rc
  limit=$(left "$2"); shift 3
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$log.mem" 2>/dev/null &
    sampler=$!
  fi
  echo "== $name (limit ${limit}s): $*" | tee "$log"
  timeout "$limit" "$@" >> "$log" 2>&1
  rc=$?
  if [ -n "$sampler" ]; then
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    peak=$(sort -n "$log.mem" 2>/dev/null | tail -1)
    peak=${peak:+$(awk -v m="$peak" 'BEGIN { printf "%.1f", m / 1024 }')}
    peak=${peak:-n/a}
  fi
  [ "$rc" -eq 124 ] && rc="124 (timed out)"
  rows+=("$(printf '%-22s %-16s %6ss %10s' "$name" "$rc" "$((SECONDS - t0))" "$peak")")
  tail -4 "$log" | cut -c1-200
}

# shellcheck disable=SC2086
step "filters eager,init" 100 tasks_filters.txt \
  python3 -m kevolve.tasks check $tasks --shapes "$shapes" --device "$device" --filters eager,init_impact -v
# the configurations that failed worst first (a timeout leaves the rest out, not these)
first="mnist_conv_relu_pool_fwd layernorm_fwd layernorm_bwd unet_conv2d_fwd resnet_block_fwd mnist_conv_relu_pool_bwd"
margins=$(for t in $first $tasks; do case " $tasks " in *" $t "*) echo "$t";; esac; done | awk '!seen[$0]++' | xargs)
# shellcheck disable=SC2086
step "compile margins" 120 tasks_margins.txt \
  python3 experiments/tolerance_margins.py $margins --shapes "$shapes" --device "$device" --compile --only "$only"
if [ $((budget - (SECONDS - start))) -ge 25 ]; then
  step "rmsnorm_bwd variants" 60 tasks_variants.txt \
    python3 -m kevolve.tasks check rmsnorm_bwd --shapes "$shapes" --device "$device" --filters output_std,eager
fi

{
  echo
  echo "== summary ($((SECONDS - start)) s; logs in $out)"
  printf '%-22s %-16s %7s %10s\n' step exit time "GPU GiB"
  printf '%s\n' "${rows[@]}"
  echo "-- filters (task, then eager init_impact / output_std eager; FAIL lines give the worst configuration):"
  grep -hE "^[a-z_0-9]+ +(pass|FAIL)" "$out/tasks_filters.txt" "$out/tasks_variants.txt" 2>/dev/null
  grep -hE "^[a-z_0-9]+ (eager|compile|output_std|init_impact): FAIL" "$out/tasks_filters.txt" \
    "$out/tasks_variants.txt" 2>/dev/null | cut -c1-260
  grep -hE "^[a-z_0-9]+ eager: pass" "$out/tasks_filters.txt" 2>/dev/null | sed 's/passes the tolerance on every configuration, //' | cut -c1-160
  echo "-- share of the tolerance (> 1 fails): float32 eager, torch.compile, TF32 (should fail on conv tasks):"
  grep -hE "^[a-z_0-9]+: atol|^  [A-Z]" "$out/tasks_margins.txt" 2>/dev/null | cut -c1-160
  grep -hE "Error|error:" "$out/tasks_margins.txt" 2>/dev/null | tail -3 | cut -c1-200
} | tee "$out/tasks_summary.txt"
