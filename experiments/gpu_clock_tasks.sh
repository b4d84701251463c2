#!/usr/bin/env bash
# One device call for issues 9 and 13, from the repository root after `source .devdeps/install.sh` (carry .rkb):
#   1. alone on the GPU: the empty graph's place in a round (experiments/clock_position.py) for layernorm_fwd's
#      cuda_rows.cu on every bench shape and layernorm_bwd's cuda_split.cu on three, then bench_clock and the
#      judge (`python -m kevolve.evaluate`) on cuda_rows.cu, for the judge-against-bench_clock comparison
#      (CLOCK_TASK=, CLOCK_KERNEL= pick another; CLOCK_POSITION=0 skips clock_position; CLOCK=0 the whole step);
#      meanwhile robust-kbench's highlighted kernels build (CPU only);
#   2. side by side, under kevolve's device lock: every task's CUDA seeds on bench (experiments/gpu_seeds.sh,
#      PAR=2, plain seeds first; ONLY= picks; more than 3 judgements at once can run a bench shape out of
#      memory) and, once built, the highlighted kernels judged (RKB=0 skips them).
# TESTS="test files" [TESTS_K="-k expression"] [TESTS_N=4: pytest-xdist workers; one gpu test took 10-40 s on the H200,
# 16-39 of them fit in a 575 s call]: gpu tests run beside both steps (TESTS_AFTER_CLOCK=1: step 2 only). RKB_ONLY= picks highlighted kernels.
# Step 2 stops starting judgements at END_S - 200 s and ends by END_S (default 585). Everything goes to
# $OUT/logs.tgz; a summary prints last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export KEVOLVE_CACHE_RKB=${KEVOLVE_CACHE_RKB:-/root/rkbcache}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"; res=$(mktemp -d); end=${END_S:-585}
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
start_tests() {                       # gpu tests beside everything else (they judge under the device lock too)
  [ -n "${TESTS:-}" ] || return 0
  (timeout $(( end - 10 - $(el) )) python3 -m pytest -m gpu -v -rA -p no:cacheprovider ${TESTS_N:+-n $TESTS_N} $TESTS ${TESTS_K:+-k "$TESTS_K"} > $res/tests.txt 2>&1
   echo "tests: exit $? at $(el) s: $(grep -E '(passed|failed|error)' $res/tests.txt | tail -1)") &
  ts=$!
}
[ "${TESTS_AFTER_CLOCK:-0}" = 1 ] || start_tests
if [ "${RKB:-1}" = 1 ]; then
  (KEVOLVE_CACHE=$KEVOLVE_CACHE_RKB STEPS=build JOBS=4 OUT=$res bash experiments/rkb_highlighted.sh > $res/rkb_build.log 2>&1
   echo "rkb build done at $(el) s") &
  rb=$!
fi
if [ "${CLOCK:-1}" = 1 ]; then
  ct=${CLOCK_TASK:-layernorm_fwd}; ck=${CLOCK_KERNEL:-tasks/$ct/seeds/cuda_rows.cu}
  if [ "${CLOCK_POSITION:-1}" = 1 ]; then
    timeout 110 python3 experiments/clock_position.py --task layernorm_fwd --kernel tasks/layernorm_fwd/seeds/cuda_rows.cu \
      --configs 11 --samples 20 --out $res/clock_position_fwd.txt > $res/cp_fwd.log 2>&1; echo "clock_position fwd: exit $? at $(el) s"
    timeout 50 python3 experiments/clock_position.py --task layernorm_bwd --kernel tasks/layernorm_bwd/seeds/cuda_split.cu \
      --configs 3 --samples 20 --out $res/clock_position_bwd.txt > $res/cp_bwd.log 2>&1; echo "clock_position bwd: exit $? at $(el) s"
  fi
  timeout ${CLOCK_BENCH_S:-70} python3 experiments/bench_clock.py --task $ct --kernel $ck \
    --shapes bench --out $res/bench_clock_rows.txt > $res/bench_clock.log 2>&1; echo "bench_clock $ct: exit $? at $(el) s"
  KEVOLVE_TRACE=1 timeout ${CLOCK_EVAL_S:-120} python3 -m kevolve.evaluate task=$ct kernel=$ck \
    shapes=bench > $res/eval_rows.txt 2> $res/eval_rows.trace; echo "evaluate $ck: exit $? at $(el) s"
fi
[ "${TESTS_AFTER_CLOCK:-0}" = 1 ] && start_tests
(OUT=$res/s PAR=${PAR:-2} EVAL_S=${EVAL_S:-200} BUDGET_S=$(( end - 200 - $(el) )) timeout $(( end - $(el) )) bash experiments/gpu_seeds.sh \
   > $res/seeds.log 2>&1; echo "seeds done at $(el) s") &
sd=$!
if [ "${RKB:-1}" = 1 ]; then
  wait $rb                            # the seeds start at once; the highlighted kernels once they are built
  KEVOLVE_CACHE=$KEVOLVE_CACHE_RKB STEPS=run RUN_JOBS=${RKB_JOBS:-1} PER_KERNEL_S=${RKB_S:-150} ONLY=${RKB_ONLY:-} OUT=$res timeout $(( end - 5 - $(el) )) \
    bash experiments/rkb_highlighted.sh > $res/rkb_run.log 2>&1; echo "rkb run: exit $? at $(el) s"
fi
wait $sd
[ -n "${ts:-}" ] && wait $ts
tar -C $res -czf $out/logs.tgz .
echo "== clock"; cat $res/clock_position_*.txt 2>/dev/null | cut -c1-420
grep -E "geomean|^B=1,\(1,256" $res/bench_clock_rows.txt 2>/dev/null
grep -E "^B=[0-9]+,\(|^correct|^rejected|speedup" $res/eval_rows.txt 2>/dev/null | head -10 | cut -c1-200
echo "== rkb"; grep " | " $res/rkb_run.log 2>/dev/null | cut -c1-250
echo "== tests"; grep -E "(PASSED|FAILED|ERROR)( |$)" $res/tests.txt 2>/dev/null | grep -vE "^(PASSED|FAILED|ERROR) " | cut -c1-200
echo "== seeds"; grep -E "exit=|skipped" $res/seeds.log | cut -c1-220
