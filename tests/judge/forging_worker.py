"""Test support only — never imported by kevolve: a worker whose timing session forges the times it reports.

It stands in for a kernel that rewrote the worker's timing results in memory (`tests/adversarial/test_inprocess.py`
reaches the worker's Python for real), in every session after the kernel loaded:
`python tests/judge/forging_worker.py SPEC`, where SPEC is `contender=factor,...` (`kernel=0.1,eager=3`;
`kernel=shift` moves 90% of the kernel's time onto the other contenders, keeping each round's total; `rounds=0`,
`calls=1` rewrite the timing plan `time_setup` replies with; `spare=canary` leaves the calls that carry the evaluator's
canary alone, as a forger that reads each round's request would: `judge.evaluator.canary`), then the
real worker's protocol loop. `ForgingWorker` is the evaluator-side handle that starts it, for a test to put in
place of `WorkerProcess` (`monkeypatch.setattr(harness, "WorkerProcess", ForgingWorker.of(SPEC))`).

Why a kernel cannot reach this switch: it exists only in this file, outside the package; the production
worker (`python -m kevolve.judge.worker`) never imports it, and nothing in it reads an environment variable,
a file or a message to turn it on. What worker an evaluator starts is decided in the evaluator's process
(`WorkerProcess.command`), which no code in any worker can write. So these tests exercise the evaluator's
outside clock alone, against a worker that lies, as a kernel that reached the worker's memory would.
"""
from __future__ import annotations

import sys
from pathlib import Path


def forge(times: dict, spec: dict, spare: frozenset = frozenset()) -> None:
    """Scales each contender's reported samples (and its latency call's) by its factor, in place; the calls in
    `spare` (indices: the canary's, to a forger that reads the round's request) keep their times."""
    def scaled(v, f):
        return [x * f for x in v] if isinstance(v, (list, tuple)) else v * f

    def each(values, f):
        return [v if i in spare else scaled(v, f) for i, v in enumerate(values)]
    shift = [name for name, f in spec.items() if f == "shift"]
    if shift:
        moved = {name: sum(_len(v) for i, v in enumerate(times.get(name, [])) if i not in spare) * 0.9
                 for name in shift}
        others = [n for n in times if not n.startswith(("_", "latency:")) and n not in shift]
        for name in shift:
            times[name] = each(times[name], 0.1)
        for name in others:
            total = sum(_len(v) for v in times[name])
            f = 1 + sum(moved.values()) / len(others) / total if total else 1
            times[name] = [scaled(v, f) for v in times[name]]
    for key in list(times):
        f = spec.get(key.removeprefix("latency:"))
        if isinstance(f, float):
            times[key] = each(times[key], f) if key in ("kernel", "other") else [scaled(v, f) for v in times[key]]


def _len(v) -> float:
    return max(v) if isinstance(v, (list, tuple)) else v


def parse(spec: str) -> dict:
    out = {}
    for part in filter(None, spec.split(",")):
        name, value = part.split("=")
        out[name] = value if value in ("shift", "canary") else float(value)
    return out


def main() -> None:
    from kevolve.judge.worker import session, serve as worker
    spec = parse(sys.argv[1] if len(sys.argv) > 1 else "")

    class ForgingSession(session.Session):
        def run_round(self, variants, hollow=(), canary=()):
            reply = super().run_round(variants, hollow, canary)
            spare = frozenset(canary) if spec.get("spare") == "canary" else frozenset()
            if self.checked:                  # a kernel's session (torch's are the clean baseline worker's since
                forge(reply["times"], spec, spare)   # issue 49, and that worker is never this one)
            return reply
    session.Session = ForgingSession          # worker.time_setup imports it from there, at call time
    plan = {k: int(v) for k, v in spec.items() if k in ("rounds", "calls")}
    if plan:
        setup = worker.Worker.time_setup

        def forged_setup(self, *args, **kwargs):
            reply = setup(self, *args, **kwargs)
            if self.kernel is not None:       # the timing plan rewritten once a kernel is loaded
                reply.update(plan)
            return reply
        worker.Worker.time_setup = forged_setup
    worker.main()


def _worker_class():
    from kevolve.judge.evaluator.process import WorkerProcess

    class ForgingWorker(WorkerProcess):
        spec = ""

        def command(self) -> list[str]:
            return [str(Path(__file__).resolve()), self.spec]

        @classmethod
        def of(cls, spec: str):
            return type("ForgingWorker", (cls,), {"spec": spec})
    return ForgingWorker


if __name__ == "__main__":
    main()
else:
    ForgingWorker = _worker_class()
