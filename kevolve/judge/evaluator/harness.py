"""The harness: judges one kernel on one shape set, truthfully.

`evaluate(task, source, options)` runs the static rules, builds, then `judge`s the library: a fresh worker
process (`kevolve.judge.worker.serve`, no secrets in its environment) loads it and, for every configuration, is asked
for three calls — new buffers, the same buffers with new contents, a second set of buffers — each with outputs
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
from kevolve.judge import exchange, protocol
from kevolve.judge.evaluator import drawn, gpu_lock, impossible, measure, replayed, startup, torch_baselines
from kevolve.judge.evaluator.baseline_worker import BaselineWorker
from kevolve.judge.evaluator.checks import Checker
from kevolve.judge.evaluator.judgement import Judgement
from kevolve.judge.evaluator.compare import compare  # noqa: F401 (the judge's second entry point, imported from here)
from kevolve.judge.evaluator.phases import Phases
from kevolve.judge.evaluator.process import WorkerDied, WorkerProcess
from kevolve.judge.evaluator.reuse import Reuse
from kevolve.judge.evaluator.measure import noisy_bound  # noqa: F401 (tests and docs name it here)
from kevolve.judge.options import Options, resolved
from kevolve.judge.results import Evaluation, Release
from kevolve.judge.static import rules, symbols
from kevolve.progress import bar
from kevolve.task.spec import Task


def evaluate(task: Task, source: str, options: Options) -> Evaluation:
    """Static rules, build, then judge: the whole verdict on one source."""
    base = dict(task=task.name, target=options.target, abi=options.abi, shapes=options.shapes)
    verdict = rules.check(source, options.target, options.abi, task=task)      # task: its entry point checked
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
          reuse: Reuse | None = None, fresh_baselines: bool = False, sweep: tuple | None = None) -> Evaluation:
    """Runs a built library in a fresh worker: correctness on every configuration, then timing.

    `reuse` (an evaluator's, kept across its judgements) supplies a worker started in advance, cached
    float64 references and recently timed baselines; none of it is shared with, or reachable by, a kernel.
    `fresh_baselines` times the baselines (before the kernel loads, and interleaved with it) even when recent
    times are known. `sweep`: configurations of the domain checked alone, in place of the shape set's (a release
    check, `release.check`: correctness only)."""
    start = time.perf_counter()
    options = resolved(options)            # the node's own settings, read once for the whole judgement
    configs = task.configs(options.shapes) if sweep is None else ()
    base = dict(task=task.name, target=options.target, abi=options.abi, shapes=options.shapes, compiled=True)
    imports = symbols.check(lib_path, options.target) if options.abi == "c" else None
    if imports:                            # before any worker loads the library
        return Evaluation(**base, correct=False, stage="symbols", failure=imports,
                          eval_seconds=time.perf_counter() - start)
    baseline = reuse.baseline if reuse else BaselineWorker()    # torch's clean worker: kept by a search's evaluator
    for attempt in (1, 2):
        files = Path(tempfile.mkdtemp(prefix="kevolve-", dir=exchange.files_root()))
        worker = reuse.worker() if reuse else WorkerProcess(options)
        try:
            j = Judgement(task, lib_path, options, module, reuse, fresh_baselines, worker, files, start,
                          tuple(configs), Phases(), baseline, sweep)
            ev = _judge(j)
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
        if attempt == 1 and ev.stage == torch_baselines.CACHE_RETRY:
            why = "torch.compile failed in a worker seeded from the baseline cache"
            continue
        if attempt == 1 and _out_of_device_memory(ev):
            why = "the first attempt ran out of GPU memory"
            time.sleep(OOM_WAIT_S)         # memory other processes held (evaluators sharing the GPU): once more
            continue
        break
    if reuse is None:
        baseline.close()
    if attempt == 2:
        ev = Evaluation(**{**ev.__dict__, "log": f"[judged twice: {why}]\n{ev.log}"})
    ev = Evaluation(**{**ev.__dict__, "phases": {**ev.phases, "teardown": round(closing, 4)}})
    if ended and ev.correct:               # a death by signal at teardown is a crash, not a pass
        ev = Evaluation(**{**ev.__dict__, "correct": False, "stage": "teardown", "failure": f"crash: {ended}"})
    if forbidden and not startup.attempts_reject(options):       # noted, not yet a verdict (`Options.strict_cuda`)
        ev = Evaluation(**{**ev.__dict__, "log": f"[refused by the confinement, noted only: {forbidden}]\n{ev.log}"})
    elif forbidden:                        # an attempt is a rejection, even with the right answer (`evidence`)
        ev = Evaluation(**{**ev.__dict__, "correct": False, "stage": "confinement",
                           "failure": forbidden + (f"; and: {ev.failure}" if ev.failure else "")})
    return ev


def release(task: Task, lib_path: str, options: Options, count: int, module: str | None = None,
            salt: int | None = None) -> Release:
    """The release check: the library checked for correctness alone, in a fresh worker, on `count` configurations
    swept over the task's domain (`task.draw.sweep`: its corners under every init family, then draws of every kind;
    `salt` seeds them, else `drawn.salt()`); a failure shrunk to the smallest failing configuration found."""
    import random
    from kevolve.task import draw
    cases = draw.sweep(task, options.target, random.Random(drawn.salt() if salt is None else salt), count)
    checking = replace(options, time_kernel=False, domain="off")
    ev = judge(task, lib_path, checking, module=module, sweep=cases)
    return Release(task=task.name, target=options.target, passed=ev.correct, planned=len(cases),
                   checked=sum(m.correct for m in ev.drawn), proven=task.domain.describe(options.target),
                   failure=ev.failure, seconds=round(ev.eval_seconds, 1))


OOM_WAIT_S = 5.0


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
    return (not ev.correct and (ev.stage in ("correctness", "timing") or harness)
            and "OutOfMemoryError" in (ev.failure or ""))


def _judge(j: Judgement) -> Evaluation:
    """The steps of one judgement, in order, each a call down into a helper that returns here: the worker
    started and configured, the baselines compiled and timed alone, the seal and the kernel's load, every
    configuration checked, then the timing. Returns the verdict of the first step that fails, else the pass."""
    options, worker, clock, configs = j.options, j.worker, j.clock, j.configs
    seen = {"device": "", "bandwidth": None, "measurements": [], "reused": False, "ci": None, "drawn": []}
    if j.reuse is not None:
        j.reuse.phases = clock             # what the evaluator's `status` reports while this runs

    def verdict(stage: str = "done", failure: str | None = None, ms: list | None = None) -> Evaluation:
        return Evaluation(**j.base, correct=failure is None, stage=stage, failure=failure,
                          measurements=tuple(seen["measurements"] if ms is None else ms),
                          eval_seconds=time.perf_counter() - j.start, device=seen["device"],
                          bandwidth_gbs=seen["bandwidth"], phases=clock.done(), work=dict(clock.work),
                          baselines_reused=seen["reused"], log=worker.stderr_text()[-4000:],
                          speedup_ci=seen["ci"] if failure is None else None, drawn=tuple(seen["drawn"]))
    clock.gpu = gpu_lock.own(options)
    known = j.reuse.baselines if j.reuse and not j.fresh_baselines else None
    plan = torch_baselines.plan(configs, options, known)
    try:
        with clock("load"):
            info = startup.init(worker, startup.init_command(j.task.ref, j.lib_path, j.module, str(j.files), options),
                                options)
        if j.reuse and startup.landlocked(info):
            j.reuse.start_spare()          # a Landlocked kernel cannot reach it; otherwise after this worker ends
        if isinstance(info, protocol.Failed):
            return verdict("load", f"load error: {info.error}")
        seen["device"], seen["bandwidth"] = info.device, info.bandwidth_gbs
        ipc = startup.configure(worker, info, options)
        if options.target == "cuda":
            clock.gpu = gpu_lock.of_worker(info.uuid, info.device)
            clock.work["cuda_ipc"] = int(ipc)     # in the verdict's `work`: outputs by CUDA IPC (1) or by files (0)
        ended = torch_baselines.prepare(j, plan)        # in the clean baseline worker, as is all of torch's timing
        if ended:
            return verdict(*ended)
        checker = Checker(j.task, options, clock, j.reuse.references if j.reuse else None, folder=j.files,
                          fused=startup.fused(j.task, options, j.reuse, info))
        try:
            failure = torch_baselines.time_alone(j, checker, plan, known)
        except WorkerDied as e:
            failure = f"the baseline worker died timing the torch baselines: {e.kind}: {e.detail}"
        if failure:
            return verdict("load", f"harness: {failure}")
        limits = impossible.measure(worker, info, options.target) if options.time_kernel else impossible.Limits()
        failure = measure.clean_probes(j, checker, plan) if options.time_kernel and not replayed.wanted(options) \
            else None                      # (a replayed kernel is timed in a worker its host code never reached)
        if failure:
            return verdict("load", f"harness: {failure}")
        failure = startup.seal_and_load(worker, options, clock)
        if failure:
            return verdict("load", f"load error: {failure}")
        for i, cfg in enumerate(bar(configs, "checking")):
            m = checker.check_config(worker, i, cfg)
            seen["measurements"].append(m)
            if not m.correct:
                return verdict("correctness", f"{cfg.id}: {m.failure}")
        if options.domain == "draw" or j.drawn is not None:   # then configurations drawn from the domain
            with clock("drawn"):
                seen["drawn"], failure = drawn.check(j.task, options.target, worker, checker, len(configs), j.drawn)
            if failure:
                return verdict("correctness", failure)
        with clock("release"):
            worker.call(protocol.Release(), 60)
        if options.time_kernel:
            done, wrong, seen["reused"], ci = measure.time_all(j, seen["measurements"], seen["bandwidth"], checker,
                                                               plan, limits)
            if wrong is not None:
                return verdict("timing", f"{wrong.config}: {wrong.failure}", done + [wrong])
            seen["measurements"], seen["ci"] = done, ci
        return verdict()
    except WorkerDied as e:
        n = len(seen["measurements"])
        stage = "correctness" if n < len(configs) or not options.time_kernel else "timing"
        where = configs[n].id + ": " if n < len(configs) else ""
        return verdict(stage, f"{where}{e.kind}: {e.detail}")
