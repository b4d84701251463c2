#!/usr/bin/env bash
# One device call, in stages (repository root, after `source .devdeps/install.sh`). STAGES picks and orders:
#   tests   the gpu tests not yet run with the strict confinement (issue 50, item 3): tests/search/test_profile.py,
#           tests/task/test_filters.py, and rmsnorm_fwd's torch-ABI seed (TESTS= others; TESTS_S seconds);
#   clock   the per-size table of every norm and cross-entropy best/ kernel on bench: the judge's graph clock and
#           triton's do_bench as a second clock (experiments/bench_clock.py; CLOCK_S seconds);
#   domain  every task's CUDA seeds and best/ kernels judged with drawn configurations, and the hostile kernels
#           of issue 46's CUDA twins (DOMAIN_S seconds; DOMAIN_ARGS adds to domain_check.py's, e.g. --tasks ...);
#   hostile issue 46's hostile CUDA kernels alone, through a release check of HOSTILE_COUNT configurations (200);
#   probe   experiments/replay_probe.py: which graph queries the driver answers (PROBE_S seconds);
#   export  two searches of KEVOLVE_OP_SEARCH_S seconds (layernorm_fwd, layernorm_bwd; their run dirs under $OUT/runs),
#           then tests/export/test_export_gpu.py -s on them: the exported op in a model, its speed against
#           nn.LayerNorm under torch.compile (issue 48; EXPORT_S seconds for the test);
#   tally   experiments/tally_forgeries.py cuda with the replay on (TALLY_REPLAY=0: off; TALLY_S seconds);
#   replay  experiments/replay_gpu.py: the adversarial CUDA kernels and every task's seeds timed in their own worker
#           and replayed apart from their host code (issue 49; REPLAY_S seconds, REPLAY_ARGS e.g. --tasks ...).
# $OUT gets one log per stage and summary.txt (printed last).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}; export PATH=$PATH:$CUDA_HOME/bin TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
out=${OUT:-/tmp/kevolve-out}; mkdir -p "$out"; summary="$out/summary.txt"
say() { echo "$*" | tee -a "$summary"; }
t0=$(date +%s)
pytest_tail() {
  say "$2: exit $3 after $(( $(date +%s) - t0 )) s: $(grep -E '(passed|failed|error)' "$1" | tail -1)"
  grep -E "^(FAILED|ERROR)" "$1" | cut -c1-400 | tee -a "$summary"
}
say "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
for stage in ${STAGES:-tests clock}; do
  case $stage in
  tests)
    timeout ${TESTS_S:-240} python3 -m pytest -v -m gpu -rA -p no:cacheprovider --durations=10 --tb=short \
      ${TESTS:-tests/search/test_profile.py tests/task/test_filters.py \
      "tests/judge/test_gpu.py::test_torch_abi_seed_is_correct_on_every_timed_call[rmsnorm_fwd]"} \
      > "$out/tests.txt" 2>&1
    pytest_tail "$out/tests.txt" tests $? ;;
  clock)
    timeout ${CLOCK_S:-300} python3 experiments/bench_clock.py --task ${CLOCK_TASKS:-layernorm_fwd layernorm_bwd rmsnorm_fwd rmsnorm_bwd cross_entropy_fwd cross_entropy_bwd} \
      --kernel 'tasks/{task}/best/cuda.cu' --shapes bench --samples ${SAMPLES:-15} --out "$out/clock.txt" > "$out/clock.log" 2>&1
    say "clock: exit $? after $(( $(date +%s) - t0 )) s"; grep -E "^##|geomean" "$out/clock.txt" | cut -c1-250 | tee -a "$summary" ;;
  domain)
    [ "${CORNERS_S:-150}" = 0 ] || timeout ${CORNERS_S:-150} python3 -m kevolve.tasks check --shapes domain --device cuda --filters eager -v \
      > "$out/corners.txt" 2>&1
    say "corners (eager torch at each domain's corners, cuda): exit $? after $(( $(date +%s) - t0 )) s"
    grep -E "FAIL" "$out/corners.txt" | cut -c1-300 | tee -a "$summary"
    timeout ${DOMAIN_S:-400} python3 experiments/domain_check.py --target cuda --jobs ${JOBS:-3} --count ${COUNT:-40} \
      ${DOMAIN_ARGS:-} --out "$out/domain.txt" > "$out/domain.log" 2>&1
    say "domain: exit $? after $(( $(date +%s) - t0 )) s"; cut -c1-230 "$out/domain.txt" | tee -a "$summary" ;;
  probe)
    timeout ${PROBE_S:-60} python3 experiments/replay_probe.py > "$out/probe.txt" 2>&1
    say "probe: exit $? after $(( $(date +%s) - t0 )) s"; tail -12 "$out/probe.txt" | cut -c1-300 | tee -a "$summary" ;;
  export)
    for task in layernorm_fwd layernorm_bwd; do
      timeout $(( ${KEVOLVE_OP_SEARCH_S:-120} + 150 )) python3 -m kevolve task=$task resources.target=cuda \
        search.wall_time_s=${KEVOLVE_OP_SEARCH_S:-120} progress=false run_dir="$out/runs/$task" > "$out/search_$task.txt" 2>&1
      say "search $task: exit $? after $(( $(date +%s) - t0 )) s"
      grep -E "^op |^candidates|^speedup" "$out/search_$task.txt" | cut -c1-250 | tee -a "$summary"
    done
    KEVOLVE_OP_RUNS="$out/runs/layernorm_fwd,$out/runs/layernorm_bwd" timeout ${EXPORT_S:-300} python3 -m pytest -m gpu -s \
      -p no:cacheprovider --tb=short tests/export/test_export_gpu.py > "$out/export.txt" 2>&1
    pytest_tail "$out/export.txt" export $?
    grep -E "geomean|fwd\+bwd|Error" "$out/export.txt" | cut -c1-250 | tee -a "$summary" ;;
  tally)
    KEVOLVE_CUDA_REPLAY=${TALLY_REPLAY:-1} timeout ${TALLY_S:-150} python3 experiments/tally_forgeries.py cuda \
      > "$out/tally.txt" 2>&1
    say "tally (KEVOLVE_CUDA_REPLAY=${TALLY_REPLAY:-1}): exit $? after $(( $(date +%s) - t0 )) s"
    grep -vE "^\s*$" "$out/tally.txt" | tail -9 | cut -c1-300 | tee -a "$summary" ;;
  hostile)
    timeout ${HOSTILE_S:-200} python3 experiments/domain_check.py --target cuda --hostile-only --jobs 2 \
      --count ${HOSTILE_COUNT:-200} --out "$out/hostile.txt" > "$out/hostile.log" 2>&1
    say "hostile: exit $? after $(( $(date +%s) - t0 )) s"; cut -c1-330 "$out/hostile.txt" | tee -a "$summary" ;;
  replay)
    timeout ${REPLAY_S:-300} python3 experiments/replay_gpu.py --budget-s $(( ${REPLAY_S:-300} - 40 )) ${REPLAY_ARGS:-} \
      > "$out/replay.txt" 2>&1
    say "replay: exit $? after $(( $(date +%s) - t0 )) s"
    grep -E "^adversarial|replayed/own|kernels:|budget|Error|error" "$out/replay.txt" | cut -c1-330 | tee -a "$summary" ;;
  esac
done
