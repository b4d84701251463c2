"""The harness: judges one kernel on one shape set, truthfully.

`evaluate(task, source, options)` runs the static rules, builds, then `judge`s the library: a fresh worker
process (`kevolve.judge.worker.serve`, no secrets in its environment) loads it and, for every configuration, is asked for
three calls — new buffers, the same buffers with new contents, a second set of buffers — each with outputs
and workspace poisoned with NaN. This process draws the same inputs, computes the reference in float64 on
its own device, compares the worker's inputs with its own bit for bit after every call, and checks the
outputs: every element written, finite where the reference is, within tolerance. Only a kernel correct on
every configuration is timed, interleaved with torch eager and torch.compile on the same inputs (see
`judge.worker.timing`).

Guarantees: the reference never exists in the worker; a crash, CUDA error or hang of the worker is a
verdict (`crash`, `timeout`) and the next evaluation starts a new worker; nothing the candidate prints can
be mistaken for the protocol. `Evaluation.failure` says what failed, where, and by how much.
Before any worker loads a C-ABI library, `judge.static.symbols` checks its imports and load-time code (verdict stage
`symbols`); the worker confines itself before loading it (`judge.worker.confine`); the worker's whole process
group ends with the judgement, and a worker that dies at teardown turns a pass into a `teardown` crash.
Not guaranteed: timing stability on a loaded machine; protection from a candidate that attacks the worker's
Python objects in memory by pointer arithmetic (no static layer sees it; the outputs are still checked here, in
the evaluator, and the times it reports are bounded by the evaluator's outside clock, `judge.evaluator.outside`, within
that module's limits; the clock's own guarantees are `judge.worker.timing`'s).
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from kevolve.judge import build as builder
from kevolve.judge import exchange
from kevolve.judge.evaluator import baseline_cache, gpu_lock, noise, precompile, timed
from kevolve.judge.static import rules, symbols
from kevolve.judge.evaluator.checks import Checker
from kevolve.judge.evaluator.fused import Fused
from kevolve.judge.options import Options
from kevolve.judge.evaluator.phases import Phases
from kevolve.judge.evaluator.process import WorkerDied, WorkerProcess
from kevolve.judge.results import Comparison, Evaluation, Measurement, Stats
from kevolve.judge.evaluator.reuse import Baselines, BaselineTimes, Reuse
from kevolve.progress import bar
from kevolve.task.spec import Task


def evaluate(task: Task, source: str, options: Options) -> Evaluation:
    """Static rules, build, then judge: the whole verdict on one source."""
    base = dict(task=task.name, target=options.target, abi=options.abi, shapes=options.shapes)
    verdict = rules.check(source, options.target, options.abi)
    if not verdict.ok:
        return Evaluation(**base, compiled=False, correct=False, failure=f"static rule: {verdict.reason}",
                          stage="verify")
    built = builder.build(source, options.target, options.abi)
    if not built.ok:
        return Evaluation(**base, compiled=False, correct=False, failure=f"compile error: {built.error}",
                          stage="build", build_seconds=built.seconds)
    ev = judge(task, built.lib_path, options, module=built.module_name)
    return Evaluation(**{**ev.__dict__, "build_seconds": built.seconds})


def judge(task: Task, lib_path: str, options: Options, module: str | None = None,
          reuse: Reuse | None = None, fresh_baselines: bool = False) -> Evaluation:
    """Runs a built library in a fresh worker: correctness on every configuration, then timing.

    `reuse` (an evaluator's, kept across its judgements) supplies a worker started in advance, cached
    float64 references and recently timed baselines; none of it is shared with, or reachable by, a kernel.
    `fresh_baselines` times the baselines (before the kernel loads, and interleaved with it) even when recent
    times are known."""
    start = time.perf_counter()
    configs = task.configs(options.shapes)
    base = dict(task=task.name, target=options.target, abi=options.abi, shapes=options.shapes, compiled=True)
    imports = symbols.check(lib_path, options.target) if options.abi == "c" else None
    if imports:                            # before any worker loads the library
        return Evaluation(**base, correct=False, stage="symbols", failure=imports,
                          eval_seconds=time.perf_counter() - start)
    for attempt in (1, 2):
        files = Path(tempfile.mkdtemp(prefix="kevolve-", dir=exchange.files_root()))
        worker = reuse.worker() if reuse else WorkerProcess(options)
        try:
            ev = _judge(task, lib_path, options, module, reuse, fresh_baselines, worker, files, start, configs, base)
        except Exception as e:             # the evaluator's own work (references, comparisons) out of GPU memory
            if not _is_device_oom(e):
                raise
            ev = _evaluator_out_of_memory(e, base, start, reuse)
        finally:                           # the worker's whole process group ends with the judgement
            closing = time.perf_counter()
            ended = worker.close()
            forbidden = worker.forbidden()     # what the confinement refused it, as the Linux kernel told us
            shutil.rmtree(files, ignore_errors=True)
            if reuse:
                reuse.start_spare()
            closing = time.perf_counter() - closing
        if attempt == 1 and ev.stage == CACHE_RETRY:
            why = "torch.compile failed in a worker seeded from the baseline cache"
            continue
        if attempt == 1 and _out_of_device_memory(ev):
            why = "the first attempt ran out of GPU memory"
            time.sleep(OOM_WAIT_S)         # memory other processes held (evaluators sharing the GPU): once more
            continue
        break
    if attempt == 2:
        ev = Evaluation(**{**ev.__dict__, "log": f"[judged twice: {why}]\n{ev.log}"})
    ev = Evaluation(**{**ev.__dict__, "phases": {**ev.phases, "teardown": round(closing, 4)}})
    if ended and ev.correct:               # a death by signal at teardown is a crash, not a pass
        ev = Evaluation(**{**ev.__dict__, "correct": False, "stage": "teardown", "failure": f"crash: {ended}"})
    if forbidden and not _attempts_reject(options):       # noted, not yet a verdict (`Options.strict_cuda`)
        ev = Evaluation(**{**ev.__dict__, "log": f"[refused by the confinement, noted only: {forbidden}]\n{ev.log}"})
    elif forbidden:                        # an attempt is a rejection, even with the right answer (`evidence`)
        ev = Evaluation(**{**ev.__dict__, "correct": False, "stage": "confinement",
                           "failure": forbidden + (f"; and: {ev.failure}" if ev.failure else "")})
    return ev


OOM_WAIT_S = 5.0
CACHE_RETRY = "baseline cache"            # a verdict stage `judge` never returns: it judges once more, unseeded


def _is_device_oom(e: BaseException) -> bool:
    return type(e).__name__ == "OutOfMemoryError" and type(e).__module__.startswith("torch")


def _evaluator_out_of_memory(e: BaseException, base: dict, start: float, reuse: Reuse | None) -> Evaluation:
    """The verdict when the evaluator itself (its float64 references or output comparisons, on the GPU) ran out
    of device memory: the harness's failure, said so, which `judge` retries like a worker's. The evaluator's
    cached references and torch's cached blocks are let go first, so the retry starts from what this process
    needs now."""
    if reuse:
        reuse.references.clear()
    import torch
    torch.cuda.empty_cache()
    detail = str(e).splitlines()[0][:300] if str(e) else ""
    return Evaluation(**base, correct=False, stage="correctness", eval_seconds=time.perf_counter() - start,
                      failure=f"harness: the evaluator ran out of GPU memory computing references or comparing "
                              f"outputs (memory other processes on this GPU hold; fewer evaluators per GPU or a "
                              f"smaller resources.reference_cache_gb help), not the kernel: OutOfMemoryError: "
                              f"{detail}")


def _out_of_device_memory(ev: Evaluation) -> bool:
    """A GPU judgement that failed because the device ran out of memory. Its buffers are the harness's, on a
    GPU other evaluators may share (`resources.evaluators` above the GPU count; each keeps references
    cached), so a correct kernel would be rejected for its neighbours' memory: `judge` runs it once more in a
    fresh worker. A kernel that itself needs more memory than the device has fails both times. (torch raises
    OutOfMemoryError for device allocations; the CPU target's limits are the worker's own rlimits.)"""
    harness = ev.stage == "load" and (ev.failure or "").startswith("harness:")   # timing the baselines first
    return not ev.correct and (ev.stage in ("correctness", "timing") or harness) and "OutOfMemoryError" in (ev.failure or "")


def _judge(task: Task, lib_path: str, options: Options, module: str | None, reuse: Reuse | None,
           fresh_baselines: bool, worker: WorkerProcess, files: Path, start: float, configs, base) -> Evaluation:
    device_name, bandwidth, measurements = "", None, []
    clock = Phases()
    if reuse is not None:
        reuse.phases = clock               # what the evaluator's `status` reports while this runs
    baselines_reused = False               # some configuration's baseline times came from `reuse`
    speedup_ci = None

    def verdict(stage: str = "done", failure: str | None = None, ms: list | None = None) -> Evaluation:
        return Evaluation(**base, correct=failure is None, stage=stage, failure=failure,
                          measurements=tuple(measurements if ms is None else ms),
                          eval_seconds=time.perf_counter() - start, device=device_name, bandwidth_gbs=bandwidth,
                          phases=clock.done(), work=dict(clock.work), baselines_reused=baselines_reused,
                          log=worker.stderr_text()[-4000:],
                          speedup_ci=speedup_ci if failure is None else None)
    clock.gpu = _own_device_lock(options)
    known = reuse.baselines if reuse and not fresh_baselines else None
    plan = _baseline_plan(configs, options, known)
    wanted = [i for i, p in sorted(plan.items()) if p["wanted"]]
    helped = precompile.needed(task, options, wanted)   # a second worker compiles these, from now on
    helper = precompile.Precompiler(task, options, lib_path, str(files), helped, plan) if helped else None
    try:
        try:
            with clock("load"):
                info = worker.call("init", options.timeout + 120, task_dir=task.ref, lib=lib_path, abi=options.abi,
                                   target=options.target, module=module, exchange=str(files),
                                   threads=options.threads, load=False, **_cold(options))
        except WorkerDied as e:
            info = {"error": f"{e.kind}: {e.detail}"}
        if reuse and (info.get("confinement") or {}).get("landlock"):
            reuse.start_spare()            # a Landlocked kernel cannot reach it; otherwise after this worker ends
        if "error" in info:
            return verdict("load", f"load error: {info['error']}")
        device_name, bandwidth = info["device"], info["bandwidth_gbs"]
        worker.call("set_configs", 60, shapes=options.shapes)
        if options.target == "cuda":
            ipc = exchange.ipc_works(lambda cmd: worker.call(cmd, 60), info.get("uuid"), options.exchange)
            worker.call("set_exchange", 60, ipc=ipc)
            clock.gpu = _device_lock(info)
        cached = (any(p["wanted"] for p in plan.values()) and (info.get("confinement") or {}).get("landlock")
                  and baseline_cache.enabled(options.cache_dir))
        if not cached:
            helped = []
        if cached:                         # torch.compile's caches as the node has them, only when it will compile
            baseline_cache.seed(worker.tmp, options.cache_dir)
        try:                               # torch.compile's compilers run now, before the kernel's code can (the
            for i in bar([i for i in wanted if i not in helped] + helped, "compiling torch baselines"):  # (the seal
                # below refuses every new process)
                if helper is not None and i in helped:
                    with clock("baselines", "waiting for the second worker's compiles"):
                        helper.join()      # its graphs into the master, then into this worker's caches
                        baseline_cache.seed(worker.tmp, options.cache_dir)
                    helper = None
                with clock("baselines"):
                    plan[i]["notes"] = worker.call("prepare", 600 + options.timeout, config=i,
                                                   baselines=list(plan[i]["wanted"])).get("notes", {})
        except WorkerDied as e:            # no code of the kernel has run yet: the harness's failure, said so
            return verdict("load", f"harness: the worker died compiling the torch baselines, before the kernel "
                                   f"loaded: {e.kind}: {e.detail}")
        if cached:
            failed = sorted({n for p in plan.values() for n in p["notes"].values() if "torch.compile failed" in n})
            if failed:                     # the seeded copy broke torch.compile: the node stops using it, and
                baseline_cache.disable(failed[0][:500], options.cache_dir)   # `judge` starts again unseeded
                return verdict(CACHE_RETRY, f"harness: torch.compile failed in a worker seeded from the node's "
                                            f"baseline cache ({failed[0][:300]}); the cache is now off on this node")
            baseline_cache.harvest(worker.tmp, options.cache_dir)   # before the kernel loads: nothing of it
            if helped:
                precompile.mark(task, options)
        checker = Checker(task, options, clock, reuse.references if reuse else None, folder=files,
                          fused=_fused(task, options, reuse, info))
        try:
            failure = _time_baselines(worker, checker, configs, options, plan, clock, known)
        except WorkerDied as e:
            failure = f"the worker died timing the torch baselines, before the kernel loaded: {e.kind}: {e.detail}"
        if failure:
            return verdict("load", f"harness: {failure}")
        with clock("seal"):
            worker.call("seal", 60, threads=_threads_after_seal(options))
        try:
            with clock("load"):
                loaded = worker.call("load", options.timeout + 60)
        except WorkerDied as e:            # a crash or hang while the library loads (static initialisers)
            loaded = {"error": f"{e.kind}: {e.detail}"}
        if "error" in loaded:
            return verdict("load", f"load error: {loaded['error']}")
        for i, cfg in enumerate(bar(configs, "checking")):
            m = checker.check_config(worker, i, cfg)
            measurements.append(m)
            if not m.correct:
                return verdict("correctness", f"{cfg.id}: {m.failure}")
        with clock("release"):
            worker.call("release", 60)
        if options.time_kernel:
            done, wrong, baselines_reused, ci = _time_all(worker, task, configs, measurements, options, bandwidth,
                                                          checker, clock, plan)
            if wrong is not None:
                return verdict("timing", f"{wrong.config}: {wrong.failure}", done + [wrong])
            measurements, speedup_ci = done, ci
        return verdict()
    except WorkerDied as e:
        stage = "correctness" if len(measurements) < len(configs) or not options.time_kernel else "timing"
        where = configs[len(measurements)].id + ": " if len(measurements) < len(configs) else ""
        return verdict(stage, f"{where}{e.kind}: {e.detail}")
    finally:
        if helper is not None:             # never given a kernel: what it compiled is the harness's own
            helper.join()


def _attempts_reject(options: Options) -> bool:
    """Whether an attempt the confinement refused rejects the kernel: always on the CPU; on CUDA with
    `Options.strict_cuda` (until the gpu tests pass with it, honest CUDA code — the driver's lazy file reads, say —
    might be what was refused)."""
    return options.target != "cuda" or options.strict_cuda


def _threads_after_seal(options: Options) -> bool:
    """New threads after the seal: allowed on the CPU (OpenMP), refused on CUDA with `Options.strict_cuda`."""
    return options.target != "cuda" or not options.strict_cuda


def _cold(options: Options) -> dict:
    """How the worker's CPU clock makes a timed call cold (`timing.CpuClock`): the mode, and the evictor's library
    (`judge.worker.evict`, built once per node) for `lines`."""
    if options.target != "cpu":
        return {"strict_cuda": options.strict_cuda}
    from kevolve.judge.worker import evict
    return {"cpu_flush": options.cpu_flush,
            "evict": evict.library(options.cache_dir) if options.cpu_flush == "lines" else None}


def _fused(task, options: Options, reuse: Reuse | None, info: dict):
    """The compiled checks (`judge.evaluator.fused`) where `options.compiled_checks` asks for them — auto: on CUDA, for an
    evaluator that keeps them across judgements (a search's; one judgement alone would pay the compile for
    little) — and only for a Landlock-confined worker: the evaluator's Inductor and Triton caches must be out of
    a kernel's reach. None: eager checks."""
    mode = options.compiled_checks
    if mode == "off" or not (info.get("confinement") or {}).get("landlock"):
        return None
    if mode == "auto" and not (options.target == "cuda" and reuse is not None):
        return None
    device = "cuda" if options.target == "cuda" else "cpu"
    return reuse.fused(task, device) if reuse is not None else Fused(task, device)


def _baseline_plan(configs, options: Options, known_baselines: BaselineTimes | None) -> dict[int, dict]:
    """Per configuration to time: the baseline times this evaluator already has (`known`, reused) or the
    baselines to time now (`wanted`: compiled by `prepare` and timed by `_time_baselines`, both before the
    kernel loads). Decided once, before the seal, so no baseline needs compiling after it."""
    if not options.time_kernel:
        return {}
    plan = {}
    for i in _timed_configs(configs, options):
        known = known_baselines.get(configs[i].id) if known_baselines is not None else None
        plan[i] = {"known": known, "wanted": () if known else tuple(options.baselines), "notes": {}}
    return plan


def _time_baselines(worker: WorkerProcess, checker: Checker, configs, options: Options, plan: dict[int, dict],
                    clock: Phases, known_baselines: BaselineTimes | None) -> str | None:
    """Times every configuration's `wanted` baselines alone, in this worker before the kernel's library is
    loaded, as each entry's `clean` times: no code of the candidate has run in the process yet, so nothing it
    does can have slowed torch down. A kernel that reaches CPython by pointer arithmetic (no static layer can
    stop that in C) could otherwise patch torch beside its own calls and inflate its speedup
    (`tests/adversarial/test_inprocess.py`). `_time_all` then times them again interleaved with the kernel and
    counts, per baseline, the faster of the two; `known_baselines` (the evaluator's `Reuse`, which later
    candidates' speedups use) is fed from the clean times only. Returns the harness's failure, if any."""
    for i, p in bar(sorted(plan.items()), "timing torch alone"):
        if not p["wanted"]:
            continue
        cfg = configs[i]
        with clock("time"):
            t = timed.time_config(worker, checker, cfg, i, clean_options(options), p["wanted"], kernel=False)
        if t.failure:
            return f"{cfg.id}: timing the torch baselines before the kernel loaded failed: {t.failure}"
        p["clean"] = Baselines.of(t, p["wanted"], p["notes"])
        if known_baselines is not None:
            known_baselines.put(cfg.id, p["clean"])
    return None


def clean_options(options: Options) -> Options:
    """The clean timing's effort (`_time_baselines`): half the calls of the interleaved timing, at least 10. It is a
    bound — each baseline counts at the faster of it and its interleaved time — not the headline's only sample."""
    return replace(options, reps=max(10, options.reps // 2))


def _time_all(worker: WorkerProcess, task: Task, configs, measurements: list[Measurement], options: Options,
              bandwidth: float, checker: Checker, clock: Phases,
              plan: dict[int, dict]) -> tuple[list[Measurement], Measurement | None, bool, tuple | None]:
    """Times one configuration per (shape, init) — per shape with time_inits="first" — the first seed's.
    Baselines timed recently by this evaluator (`plan`'s `known`) are reused, and only the kernel is timed;
    otherwise they are timed interleaved with it and each counts at the faster of that and its `clean` time
    from before the kernel loaded (`_time_baselines`), so a kernel that slows torch in its own process gains
    nothing by it. The rounds are fixed from the baselines' time, never the kernel's.
    Every timed call of the kernel is checked (`judge.evaluator.timed`); a time under 0.8× the memory floor is a
    rejection, one under the floor is timed again. Returns the measurements, the configuration that failed
    (a wrong timed call, an impossible time), whether baseline times were reused, and the speedup's 95%
    bootstrap interval."""
    out, reused, pairs = [], False, []
    for i, (cfg, m) in enumerate(bar(list(zip(configs, measurements)), "timing")):
        if i not in plan:
            out.append(m)
            continue
        known, wanted, notes = plan[i]["known"], plan[i]["wanted"], plan[i]["notes"]
        reused = reused or known is not None
        clean = plan[i].get("clean")
        slowest = (known or clean).slowest_ms if known or clean else None
        floor_ms = task.floor(cfg.size_dict) / (bandwidth * 1e9) * 1e3 if bandwidth else None
        for attempt in (1, 2):                        # near the floor, or an outside-clock near miss: once more
            with clock("time"):
                t = timed.time_config(worker, checker, cfg, i, options, wanted, baseline_ms=slowest)
            if t.failure and attempt == 1 and noisy_bound(t.failure):
                continue
            if t.failure:
                return out, _failed(m, t.failure, t.checked_calls), reused, None
            kernel_ms = Stats.of(t.samples["kernel"]).median
            floor = timed.floor_verdict(kernel_ms, floor_ms, options.target)
            if floor != "near" and not t.near:
                break
        if floor == "below":
            return out, _failed(m, f"timed at {kernel_ms * 1e3:.1f} us per call, under {timed.FLOOR_REJECT}x the "
                                   f"memory floor ({floor_ms * 1e3:.1f} us at {bandwidth:.0f} GB/s): no kernel moves "
                                   f"{task.floor(cfg.size_dict)} bytes that fast — work skipped, or hidden from the "
                                   "clock", t.checked_calls), reused, None
        base = known or Baselines.of(t, wanted, notes).faster(clean)
        mine = Measurement(**{**m.__dict__, "kernel": Stats.of(t.samples["kernel"]), "floor_ms": floor_ms,
                              "checked_calls": t.checked_calls})
        out.append(base.apply(mine, t))
        best = out[-1].best_torch_name
        if best:
            pairs.append((base.samples[best], t.samples["kernel"]))
    return out, None, reused, noise.ratio_ci(pairs)


_LOCKS: dict[str, gpu_lock.DeviceLock] = {}


def _device_lock(info: dict) -> gpu_lock.DeviceLock:
    """This process's lock of the worker's GPU (by UUID; by name and bus where the worker gives none)."""
    key = str(info.get("uuid") or info.get("device") or "cuda")
    if key not in _LOCKS:
        _LOCKS[key] = gpu_lock.DeviceLock(key, settle=_settle)
    return _LOCKS[key]


def _own_device_lock(options: Options) -> gpu_lock.DeviceLock | None:
    """Before the worker names its GPU: the lock of the one it will get (`options.gpu` among this process's
    visible devices, else the current one: a worker inherits CUDA_VISIBLE_DEVICES), so its start, a bandwidth
    probe among the rest, is held too."""
    if options.target != "cuda":
        return None
    import torch
    if not torch.cuda.is_available():
        return None
    index = options.gpu if options.gpu is not None else torch.cuda.current_device()
    return _device_lock({"uuid": str(torch.cuda.get_device_properties(index).uuid)})


def _settle() -> None:
    """This process's queued device work done (references, comparisons), before its hold of the GPU ends."""
    import torch
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def noisy_bound(failure: str) -> bool:
    """An outside-clock bound that rests on two rounds' CPU or wall times agreeing (`judge.evaluator.outside`, bounds 2 and
    3): a busy machine can break it for an honest worker — on this project's 2-core machine, with a test run
    beside it, an honest kernel's counted rounds burned 13 ms more main-thread CPU than its probe, 0.45 ms of
    kernel calls among them (most of it torch's pool spinning in the cache flush, single-threaded since). Such a
    violation is confirmed by timing the configuration once more before it is a verdict (a worker that forges its
    times forges them again); the sum bound, a law for any honest worker on any machine, and every check of
    outputs are never retried."""
    return failure.startswith(("outside clock, under bound", "outside clock, over bound"))


def _failed(m: Measurement, why: str, checked: int) -> Measurement:
    return Measurement(**{**m.__dict__, "correct": False, "failure": why, "checked_calls": checked})


def _timed_configs(configs, options: Options) -> set[int]:
    """Indices of the configurations to time: one per (shape, init), or per shape with time_inits="first"."""
    chosen, seen = set(), set()
    for i, cfg in enumerate(configs):
        key = (cfg.shape_id, cfg.init if options.time_inits == "all" else "")
        if key not in seen:
            seen.add(key)
            chosen.add(i)
    return chosen


def compare(task: Task, lib_a: str, lib_b: str, options: Options, module_a: str | None = None,
            module_b: str | None = None, reuse: Reuse | None = None) -> Comparison:
    """Times two built kernels paired and interleaved in one fresh worker, on the same fresh inputs, every
    call of both checked, on the configurations `judge` would time. For the search: a candidate replaces
    the best only if `Comparison.faster == "a"` (a = candidate, b = incumbent). The result is made once the
    worker is closed: a worker that dies by a signal at teardown (or does not exit when asked) makes it a
    failure, as `judge` makes such a pass a `teardown` crash. `reuse`: the evaluator's state, whose compiled
    checks (`judge.evaluator.fused`) it uses."""
    start = time.perf_counter()
    configs = task.configs(options.shapes)
    files = Path(tempfile.mkdtemp(prefix="kevolve-", dir=exchange.files_root()))
    worker = WorkerProcess(options)
    base = dict(task=task.name, target=options.target, shapes=options.shapes)
    ids, pairs, clocks, device = [], [], {}, ""

    def result(failure: str | None = None) -> Comparison:
        ratios = tuple(noise.geomean_ratio([p]) for p in pairs)
        ci = None if failure else noise.ratio_ci(pairs)
        return Comparison(**base, configs=tuple(ids), ratios=ratios, ratio=None if failure else noise.geomean_ratio(pairs),
                          ci=ci, indistinguishable=bool(ci and ci[0] <= 1.0 <= ci[1]), clock=clocks,
                          failure=failure, device=device, seconds=time.perf_counter() - start)

    def compared() -> str | None:          # the comparison's failure, if any
        nonlocal device
        info = worker.call("init", options.timeout + 120, task_dir=task.ref, lib=lib_a, abi=options.abi,
                           target=options.target, module=module_a, exchange=str(files), threads=options.threads,
                           also=[lib_b], load=False, **_cold(options))
        if "error" not in info:
            worker.call("seal", 60, threads=_threads_after_seal(options))   # no baselines to compile: sealed before
                                                                             # either kernel's code runs
            info = {**info, **worker.call("load", options.timeout + 60)}
        if "error" in info:
            return f"kernel a: load error: {info['error']}"
        device = info["device"]
        other = worker.call("load_other", options.timeout + 60, lib=lib_b, module=module_b)
        if "error" in other:
            return f"kernel b: load error: {other['error']}"
        worker.call("set_configs", 60, shapes=options.shapes)
        if options.target == "cuda":
            ipc = exchange.ipc_works(lambda cmd: worker.call(cmd, 60), info.get("uuid"), options.exchange)
            worker.call("set_exchange", 60, ipc=ipc)
        checker = Checker(task, options, folder=files, fused=_fused(task, options, reuse, info))
        if reuse is not None:
            reuse.phases = checker.clock
        if options.target == "cuda":
            checker.clock.gpu = _device_lock(info)
        for i in sorted(_timed_configs(configs, options)):
            for attempt in (1, 2):                    # an outside-clock near miss, or a noisy bound: once more
                with checker.clock("time", configs[i].id):
                    t = timed.time_config(worker, checker, configs[i], i, options, (), other=True)
                if t.failure and attempt == 1 and noisy_bound(t.failure):
                    continue
                if t.failure or not t.near:
                    break
            if t.failure:
                return f"{configs[i].id}: {t.failure}"
            ids.append(configs[i].id)
            pairs.append((t.samples["kernel"], t.samples["other"]))
            clocks[configs[i].id] = {"a": t.clock["kernel"], "b": t.clock["other"]}
        return None
    try:
        try:
            failure = compared()
        except WorkerDied as e:
            failure = f"{e.kind}: {e.detail}"
    finally:                               # the worker's whole process group ends before the result is made
        ended = worker.close()
        shutil.rmtree(files, ignore_errors=True)
    if ended and failure is None:          # a death by signal at teardown is a crash, not a comparison
        failure = f"crash: {ended}"
    if worker.forbidden() and _attempts_reject(options):   # either kernel's attempt (`evidence`)
        failure = worker.forbidden() + (f"; and: {failure}" if failure else "")
    return result(failure)
