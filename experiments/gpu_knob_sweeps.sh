#!/usr/bin/env bash
# Several `python -m kevolve.tasks knob-sweep` runs in one device call (repository root, after `source .devdeps/install.sh`):
# each SWEEPS entry is "TASK:KERNEL:ARGS", ARGS the sweep's own options with ';' between them
# (e.g. "--each PDL;--variant PDL=1,ROW_VPT=5"), run one after another, each for at most SWEEP_S seconds.
# $OUT gets sweeps.txt (every table, each headed by its command; also printed last) and logs.tgz.
# The default is the knobs stop 33 added without a GPU to try (each off by default in its seed):
#   layernorm_bwd cuda_pipe.cu PDL, ROW_VPT; rmsnorm_fwd / layernorm_fwd cuda_rows.cu PERSIST;
#   rmsnorm_bwd cuda_fast.cu PDL (at best/'s CLUSTER=8, GRAD_BLOCKS=2048); cross_entropy_fwd cuda_fast.cu PDL.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}; export PATH=$PATH:$CUDA_HOME/bin
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"
res=$(mktemp -d)
DEFAULT_SWEEPS=(
  "layernorm_bwd:tasks/layernorm_bwd/seeds/cuda_pipe.cu:--each PDL;--each ROW_VPT;--variant PDL=1,ROW_VPT=5"
  "rmsnorm_fwd:tasks/rmsnorm_fwd/seeds/cuda_rows.cu:--each PERSIST"
  "layernorm_fwd:tasks/layernorm_fwd/seeds/cuda_rows.cu:--each PERSIST"
  "rmsnorm_bwd:tasks/rmsnorm_bwd/seeds/cuda_fast.cu:--variant CLUSTER=8,GRAD_BLOCKS=2048;--variant CLUSTER=8,GRAD_BLOCKS=2048,PDL=1"
  "cross_entropy_fwd:tasks/cross_entropy_fwd/seeds/cuda_fast.cu:--each PDL"
)
if [ -n "${SWEEPS:-}" ]; then IFS=$'\n' read -r -d '' -a sweeps <<< "$SWEEPS"; else sweeps=("${DEFAULT_SWEEPS[@]}"); fi
t0=$(date +%s)
for entry in "${sweeps[@]}"; do
  [ -z "$entry" ] && continue
  task=${entry%%:*}; rest=${entry#*:}; kernel=${rest%%:*}; args=${rest#*:}
  IFS=';' read -r -a opts <<< "$args"
  argv=()
  for o in "${opts[@]}"; do read -r -a words <<< "$o"; argv+=("${words[@]}"); done
  name=${task}_$(basename "$kernel" .cu)
  cmd="python3 -m kevolve.tasks knob-sweep --task $task --kernel $kernel --target ${TARGET:-cuda} ${argv[*]} --out $res/$name.table"
  timeout ${SWEEP_S:-200} $cmd > "$res/$name.log" 2>&1
  rc=$?
  { echo "# $cmd"; echo "# exit $rc after $(( $(date +%s) - t0 )) s"; cat "$res/$name.table" 2>/dev/null || tail -20 "$res/$name.log"; echo; } >> "$res/sweeps.txt"
done
cp "$res/sweeps.txt" "$out/sweeps.txt"
tar -C "$res" -czf "$out/logs.tgz" .
cat "$out/sweeps.txt"
