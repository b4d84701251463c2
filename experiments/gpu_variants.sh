#!/usr/bin/env bash
# Knob variants of kernels, each judged on bench by `python -m kevolve.evaluate` (the judge's own clock:
# CUDA-graph replay, L2 flushed), then seeds_table.py's compact table of them all. On the GPU host, from the
# repository root (after `source .devdeps/install.sh` on the device machine):
#   VARIANTS="layernorm_bwd:tasks/layernorm_bwd/seeds/cuda_coop.cu:ROW_THREADS=512,ROW_FUSE=0 ..." \
#     bash experiments/gpu_variants.sh
# A variant is task:path[:KNOB=VALUE,...] (no knobs: the file as it is); its source, rewritten by
# kevolve.operators.knobs.apply (so a value outside the knob's choices is refused), is judged from
# $OUT/variants/. PAR judgements side by side (default 2; the device lock keeps each timing phase alone on the
# GPU), EVAL_S caps one (default 240 s). Logs: $OUT/variants/<task>__<name>.txt (+ .trace: KEVOLVE_TRACE
# phases); table: $OUT/variants_table.txt.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out/variants"
jobs=()
for v in ${VARIANTS:-}; do
  IFS=: read -r task path knobs <<< "$v"
  name=$(basename "$path" .cu)${knobs:+_$(echo "$knobs" | tr ',=' '_-')}
  python3 - "$path" "$knobs" "$out/variants/${task}__$name.cu" <<'PY' || exit 2
import sys
from kevolve.operators import knobs
src, spec, dest = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
values = dict(kv.split("=", 1) for kv in spec.split(",") if kv)
open(dest, "w").write(knobs.apply(src, values) if values else src)
PY
  jobs+=("$task $out/variants/${task}__$name.cu")
done
one() {
  local t=$1 k=$2 log="${2%.cu}.txt" t0=$(date +%s)
  KEVOLVE_TRACE=1 timeout ${EVAL_S:-240} python3 -m kevolve.evaluate task=$t kernel=$k shapes=bench > "$log" 2> "${log%.txt}.trace"
  echo "$(basename "$k") exit=$? $(( $(date +%s) - t0 ))s $(tail -1 "$log" | cut -c1-160)"
}
export -f one
printf '%s\n' "${jobs[@]}" | xargs -P ${PAR:-2} -L 1 bash -c 'one $0 $1'
python3 -m kevolve.tasks seeds-table "$out"/variants/*.txt | tee "$out/variants_table.txt"
