"""A paired comparison of two built kernels (`compare`), for the search's replacement of its best: both loaded in
one fresh worker, timed interleaved on the same fresh inputs, every call of both checked, each the other's
baseline.

Guarantees: as `harness.judge`'s for the kernels' calls (checks, outside clock, confinement); a worker that
dies by a signal at teardown, or does not exit when asked, makes the comparison a failure; either kernel's
refused attempt is one where `startup.attempts_reject` says so.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from kevolve.judge import exchange, protocol
from kevolve.judge.evaluator import gpu_lock, noise, startup, timed
from kevolve.judge.evaluator.checks import Checker
from kevolve.judge.evaluator.measure import noisy_bound, timed_configs
from kevolve.judge.evaluator.process import WorkerDied, WorkerProcess
from kevolve.judge.evaluator.reuse import Reuse
from kevolve.judge.options import Options, resolved
from kevolve.judge.results import Comparison
from kevolve.task.spec import Task


def compare(task: Task, lib_a: str, lib_b: str, options: Options, module_a: str | None = None,
            module_b: str | None = None, reuse: Reuse | None = None, only: tuple[str, ...] | None = None) -> Comparison:
    """Times two built kernels paired and interleaved in one fresh worker, on the same fresh inputs, every
    call of both checked, on the configurations `judge` would time. For the search: a candidate replaces
    the best only if `Comparison.faster == "a"` (a = candidate, b = incumbent). The result is made once the
    worker is closed: a worker that dies by a signal at teardown (or does not exit when asked) makes it a
    failure, as `judge` makes such a pass a `teardown` crash. `reuse`: the evaluator's state, whose compiled
    checks (`judge.evaluator.fused`) it uses. `only`: shape ids; the configurations of those shapes alone are timed
    (a size bucket's champion and its challenger: `kevolve.search.buckets`)."""
    start = time.perf_counter()
    options = resolved(options)            # the node's own settings, read once
    configs = task.configs(options.shapes)
    files = Path(tempfile.mkdtemp(prefix="kevolve-", dir=exchange.files_root()))
    worker = WorkerProcess(options)
    base = dict(task=task.name, target=options.target, shapes=options.shapes)
    ids, pairs, clocks, device = [], [], {}, ""

    def result(failure: str | None = None) -> Comparison:
        ratios = tuple(noise.geomean_ratio([p]) for p in pairs)
        ci = None if failure else noise.ratio_ci(pairs)
        return Comparison(**base, configs=tuple(ids), ratios=ratios,
                          ratio=None if failure else noise.geomean_ratio(pairs),
                          ci=ci, indistinguishable=bool(ci and ci[0] <= 1.0 <= ci[1]), clock=clocks,
                          failure=failure, device=device, seconds=time.perf_counter() - start)

    def compared() -> str | None:          # the comparison's failure, if any
        nonlocal device
        info = worker.call(startup.init_command(task.ref, lib_a, module_a, str(files), options, also=(lib_b,)),
                           options.timeout + 120)
        if not isinstance(info, protocol.Failed):
            worker.call(protocol.Seal(startup.threads_after_seal(options)), 60)   # no baselines to compile: sealed
            loaded = worker.call(protocol.Load(), options.timeout + 60)          # before either kernel's code runs
            if isinstance(loaded, protocol.Failed):
                return f"kernel a: load error: {loaded.error}"
        if isinstance(info, protocol.Failed):
            return f"kernel a: load error: {info.error}"
        device = info.device
        other = worker.call(protocol.LoadOther(lib_b, module_b), options.timeout + 60)
        if isinstance(other, protocol.Failed):
            return f"kernel b: load error: {other.error}"
        startup.configure(worker, info, options)
        checker = Checker(task, options, folder=files, fused=startup.fused(task, options, reuse, info))
        if reuse is not None:
            reuse.phases = checker.clock
        if options.target == "cuda":
            checker.clock.gpu = gpu_lock.of_worker(info.uuid, info.device)
        for i in sorted(timed_configs(configs, options)):
            if only is not None and configs[i].shape_id not in only:
                continue
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
        return None if pairs else f"no configuration of {sorted(only or ())} in the shape set {options.shapes}"
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
    if worker.forbidden() and startup.attempts_reject(options):   # either kernel's attempt (`evidence`)
        failure = worker.forbidden() + (f"; and: {failure}" if failure else "")
    return result(failure)
