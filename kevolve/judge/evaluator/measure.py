"""Timing a correct kernel: one configuration per (shape, init) — per shape with time_inits="first" — each timed
with the baselines interleaved (`judge.evaluator.timed`), every timed call checked, against the memory floor.

Guarantees: a time under `timed.FLOOR_REJECT`× the memory floor is a rejection, one under the floor is timed
again; an outside-clock bound that rests on two rounds agreeing is confirmed by a second timing before it is a
verdict (`noisy_bound`), the sum bound and every check of outputs never are; torch's baselines are timed in the clean
baseline worker, round by round beside the kernel's rounds (`paced.Paced`), and each counts at the faster of that
and its time alone there (where this judgement measured one). Called by the harness; calls nothing above.
"""
from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from dataclasses import replace

from kevolve.judge.evaluator import canary, impossible, noise, replayed, timed
from kevolve.judge.evaluator.baseline_worker import HarnessFailed, frozen, quiet_bound
from kevolve.judge.evaluator.checks import Checker
from kevolve.judge.evaluator.judgement import Judgement
from kevolve.judge.evaluator.paced import Paced
from kevolve.judge.evaluator.process import WorkerDied
from kevolve.judge.evaluator.reuse import Baselines
from kevolve.judge.options import Options
from kevolve.judge.results import Measurement, Stats
from kevolve.progress import bar


def time_all(j: Judgement, measurements: list[Measurement], bandwidth: float, checker: Checker,
             plan: dict[int, dict], limits: impossible.Limits = impossible.Limits()
             ) -> tuple[list[Measurement], Measurement | None, bool, tuple | None]:
    """Times one configuration per (shape, init) — per shape with time_inits="first" — the first seed's.
    Baselines timed recently by this evaluator (`plan`'s `known`) are reused, and only the kernel is timed;
    otherwise they are timed in the clean baseline worker, a round beside each of the kernel's (`paced.Paced`: the
    kernel's worker stopped meanwhile), and each counts at the faster of that and its `clean` time alone there
    (`torch_baselines.time_alone`, where this judgement took one): nothing the kernel does to its own process moves
    them. The rounds are fixed from the baselines' time, never the kernel's.
    Every timed call of the kernel is checked (`judge.evaluator.timed`); a time under 0.8× the memory floor is a
    rejection, one under the floor is timed again; a time under `limits` (`judge.evaluator.impossible`: the
    trivial call, the memory floor at peak) is a rejection on every configuration. Returns the measurements,
    the configuration that failed (a wrong timed call, an impossible time), whether baseline times were reused,
    and the speedup's 95% bootstrap interval."""
    replay = replayed.Replay(j, checker) if replayed.wanted(j.options) else None
    try:
        return _time_all(j, measurements, bandwidth, checker, plan, limits, replay)
    finally:
        if replay is not None:
            replay.close()


def _time_all(j: Judgement, measurements: list[Measurement], bandwidth: float, checker: Checker,
              plan: dict[int, dict], limits: impossible.Limits, replay
              ) -> tuple[list[Measurement], Measurement | None, bool, tuple | None]:
    task, configs, options, worker, clock = j.task, j.configs, j.options, j.worker, j.clock
    out, reused, pairs = [], False, []
    for i, (cfg, m) in enumerate(bar(list(zip(configs, measurements)), "timing")):
        if i not in plan:
            out.append(m)
            continue
        known, wanted, notes = plan[i]["known"], plan[i]["wanted"], plan[i]["notes"]
        reused = reused or known is not None
        clean = plan[i].get("clean")
        slowest = _slowest(plan[i])
        floor_ms = task.floor(cfg.size_dict) / (bandwidth * 1e9) * 1e3 if bandwidth else None
        why = replay.prepare(i, cfg) if replay is not None else None    # on CUDA, its device code alone
        if why:
            return out, _failed(m, why, 0), reused, None
        timer, checks = (replay.worker, replay.checker) if replay is not None else (worker, checker)
        spin_ms = canary.length(slowest, checker.call_ms.get(cfg.id))    # the canary: at least the kernel's own call
        for attempt in (1, 2):                        # near the floor, or an outside-clock near miss: once more
            pace = Paced(j.baseline, timer, checks, cfg, i, options, wanted, slowest) if wanted else None
            try:
                with clock("time"), (frozen(worker) if replay is not None else nullcontext()) as stopped:
                    t = timed.time_config(timer, checks, cfg, i, options, (), baseline_ms=slowest,
                                          canary=canary.plan(options.target, spin_ms, limits.cycle_ms),
                                          clean=plan[i].get("probe", ()) if replay is None else (), pace=pace)
                    quiet = quiet_bound(stopped(), cfg.id) if stopped is not None else None
            except HarnessFailed as e:                # the baseline worker's failure: never the kernel's
                return out, _failed(m, f"harness: {e}", 0), reused, None
            if quiet and not t.failure:
                t = dataclasses.replace(t, failure=quiet)
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
        why = impossible.verdict(limits, task, cfg.size_dict, kernel_ms)
        if why:
            return out, _failed(m, why, t.checked_calls), reused, None
        if known is not None:
            base = known
        elif pace is None:                            # no baseline asked for (`Options.baselines` empty)
            base = Baselines({}, {}, {}, dict(notes))
        else:                                         # the clean worker's, beside the kernel's rounds
            timed_b = pace.baselines()
            base = Baselines(timed_b.samples, timed_b.latency, timed_b.clock, {**notes, **timed_b.notes}).faster(clean)
            if j.reuse is not None and j.reuse.baselines is not None:
                j.reuse.baselines.put(cfg.id, base)
        mine = Measurement(**{**m.__dict__, "kernel": Stats.of(t.samples["kernel"]), "floor_ms": floor_ms,
                              "checked_calls": t.checked_calls, "canary_calls": t.canary_calls})
        out.append(base.apply(mine, t))
        best = out[-1].best_torch_name
        if best:
            pairs.append((base.samples[best], t.samples["kernel"]))
            out[-1] = replace(out[-1], speedup_ci=noise.ratio_ci(pairs[-1:]))
    return out, None, reused, noise.ratio_ci(pairs)


def _slowest(p: dict) -> float | None:
    """The slowest baseline's ms per call for a configuration's plan entry: the reused times', else what the baseline
    worker knows of it (`torch_baselines.prepare`, `time_alone`)."""
    return p["known"].slowest_ms if p["known"] else p.get("slowest")


def clean_probes(j: Judgement, checker: Checker, plan: dict[int, dict]) -> str | None:
    """Before the kernel loads: each configuration to time gets its clean probe (`timed.clean_probe`, into
    `plan[i]["probe"]`), the harness's own cost of its rounds measured where no candidate code has run. The kernel's
    session is the kernel's alone (torch's baselines are the clean worker's), so the evaluator's recent clean probe
    of the same session (same configuration, same baseline time: `Reuse.clean_probes`) is reused — it was also
    measured before a kernel loaded, and nothing of a candidate decides it. Returns the harness's failure, if any
    (the worker died: no kernel is loaded, so not the kernel's)."""
    kept = j.reuse.clean_probes if j.reuse is not None and not j.fresh_baselines else None
    for i, p in bar(sorted(plan.items()), "clean probes"):
        slowest = _slowest(p)
        key, keep = (j.configs[i].id, slowest), kept
        if keep is not None and (hit := keep.get(key)):
            p["probe"] = hit
            continue
        try:
            with j.clock("clean probe"):
                p["probe"] = timed.clean_probe(j.worker, checker, j.configs[i], i, j.options, (), slowest)
        except WorkerDied as e:
            return (f"{j.configs[i].id}: the worker died in the clean probe, before the kernel loaded: "
                    f"{e.kind}: {e.detail}")
        if keep is not None:
            keep.put(key, p["probe"])
    return None


def noisy_bound(failure: str) -> bool:
    """An outside-clock bound that rests on two rounds' CPU or wall times agreeing (`judge.evaluator.outside`, bounds 2
    and 3): a busy machine can break it for an honest worker — on this project's 2-core machine, with a test run
    beside it, an honest kernel's counted rounds burned 13 ms more main-thread CPU than its probe, 0.45 ms of
    kernel calls among them (most of it torch's pool spinning in the cache flush, single-threaded since). Such a
    violation is confirmed by timing the configuration once more before it is a verdict (a worker that forges its
    times forges them again); the sum bound, a law for any honest worker on any machine, and every check of
    outputs are never retried."""
    return failure.startswith(("outside clock, under bound", "outside clock, over bound",
                               "outside clock, side-work bound", "outside clock, quiet bound", "canary:"))


def _failed(m: Measurement, why: str, checked: int) -> Measurement:
    return Measurement(**{**m.__dict__, "correct": False, "failure": why, "checked_calls": checked})


def timed_configs(configs, options: Options) -> set[int]:
    """Indices of the configurations to time: one per (shape, init), or per shape with time_inits="first"."""
    chosen, seen = set(), set()
    for i, cfg in enumerate(configs):
        key = (cfg.shape_id, cfg.init if options.time_inits == "all" else "")
        if key not in seen:
            seen.add(key)
            chosen.add(i)
    return chosen
