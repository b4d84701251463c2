"""The finish's last step: the assembled op (`kevolve.search.assemble`) built, judged as a whole like any candidate
— static rules, build, every configuration checked, baselines timed afresh and interleaved — and decided per
bucket, kernel or torch, from that judgement. Writes `op.cpp`/`op.cu` (the library's one source) and `op.json`
(what `python -m kevolve.export` reads: buckets, kernels, routes, numbers) to the run directory, and an `assembled`
event (the op's summary and its judgement) to the store.

Guarantees: an op is reported correct only from a correct judgement of the very source written to `op.*` (and, with
`search.release`, its release check over the task's domain, as the best kernel's); a bucket
runs a kernel only as `assemble.decide` allows; an op that fails its rules, its build or its judgement is reported
with the reason and the best kernel stands alone (nothing else of the run is lost). Not guaranteed: that the op's
numbers equal the bucket champions' (it is judged afresh: noise moves them).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import ray

from kevolve.judge.build import SUFFIX
from kevolve.judge.static import rules
from kevolve.messages import Op
from kevolve.record import events
from kevolve.search import assemble, proven

MANIFEST = "op.json"


def op_path(run_dir: Path, target: str) -> Path:
    return Path(run_dir) / f"op{SUFFIX[target]}"


def run(finish, line) -> Op | None:
    """Assembles, judges and decides the op of a finished search (`finish`: its `Finish`); None when there is
    nothing to assemble (no correct kernel, a fixed stream of sources)."""
    plan, contest, started = finish.plan, finish.contest, time.perf_counter()
    champion = contest.champion
    if plan.buckets is None or not champion.paired or champion.current is None:
        return None
    best, best_ev = finish.confirmed or (champion.current.candidate, champion.current.evaluation)
    choice = assemble.choose(plan.buckets, options(plan.buckets, contest.buckets, best, best_ev), best)
    text = assemble.source(finish.task, plan.target, plan.buckets, choice)
    path = op_path(finish.run_dir, plan.target)
    path.write_text(text)
    base = dict(source=str(path), kernels=tuple(k.id for k in choice.kernels), best_speedup=best_ev.speedup)

    def failed(why: str, evaluation=None) -> Op:
        op = Op(correct=False, failure=why, seconds=round(time.perf_counter() - started, 1), **base)
        _record(finish, op, choice, evaluation, text)
        return op
    line(force=True, note=f"assembling the op: {len(choice.kernels)} kernel(s) over "
                          f"{len(choice.routes)} size bucket(s), judged as a whole")
    verdict = rules.check(text, plan.target, "c")
    if not verdict.ok:
        return failed(f"static rule: {verdict.reason}")
    build_ref, lib = contest.pipeline.build(text)
    built = ray.get(build_ref)
    if not built.ok:
        return failed(f"compile error: {built.error}")
    ev = finish.pool.confirm(built, lib)
    if not ev.correct:
        return failed(f"rejected at {ev.stage}: {ev.failure}", ev)
    if plan.release:                       # the op is the run's result: released only after the domain's sweep
        line(force=True, note=f"release check of the op: {plan.release} configurations of the domain")
        checked = finish.pool.release(built, lib, plan.release)
        finish.store.log_event(events.Release(id="op", passed=checked.passed, planned=checked.planned,
                                              checked=checked.checked, proven=checked.proven,
                                              failure=checked.failure, seconds=checked.seconds))
        if not checked.passed:
            return failed(f"failed the release check: {checked.failure}", ev)
    routes = assemble.decide(plan.buckets, choice, ev)
    op = Op(correct=True, routes=routes, speedup=assemble.op_speedup(plan.buckets, routes, ev),
            seconds=round(time.perf_counter() - started, 1), **base)
    _record(finish, op, choice, ev, text)
    return op


def options(buckets, per_bucket, best, best_ev) -> dict[str, list]:
    """Per bucket, the kernels the op may run there with their speedup on it: its champion (paired evidence), the
    fastest judged there, the best kernel (from its final judgement, baselines afresh)."""
    out: dict[str, list] = {}
    champions, best_scores = per_bucket.current(), buckets.fitness(best_ev)
    for bucket in buckets.judged():
        for entry in (champions.get(bucket), per_bucket.fastest.get(bucket)):
            if entry is not None:
                out.setdefault(bucket, []).append((entry.candidate, entry.fitness))
        if bucket in best_scores:
            out.setdefault(bucket, []).append((best, best_scores[bucket]))
    return out


def _record(finish, op: Op, choice: assemble.Choice, evaluation, text: str) -> None:
    """op.json beside the source, and the `assembled` event (with the source: the store is the record)."""
    from dataclasses import asdict
    plan = finish.plan
    data = {"task": finish.task.name, "target": plan.target, "shapes": plan.shapes, "op": asdict(op),
            "buckets": plan.buckets.as_dict(), "device": evaluation.device if evaluation is not None else "",
            "kernels": [{"index": i, "id": k.id, "operator": k.operator} for i, k in enumerate(choice.kernels)],
            "library_routes": dict(choice.routes), "default": choice.default,
            "domain": proven.ranges(finish.task, plan.shapes, plan.target), "arch": plan.arch}
    (Path(finish.run_dir) / MANIFEST).write_text(json.dumps(data, indent=1) + "\n")
    finish.store.log_event(events.Assembled({**data, "source_text": text,
                                             "evaluation": evaluation.to_json() if evaluation else None}))
