"""The messages the evaluation core hands back: frozen dataclasses, plain data, JSON round-trippable.

`Measurement` is one configuration's numbers; `Evaluation` is the verdict on one kernel over a shape set;
`Comparison` is two kernels timed paired (`harness.compare`). Times are per call on the clock named in
`Measurement.clock` (see `judge.worker.timing`: device time on CUDA, wall time on the CPU). Fitness is the
geometric mean over timed configurations of (best torch time / kernel time).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field

from kevolve.task.expr import geomean


@dataclass(frozen=True)
class Stats:
    """Robust summary of repeated timings, in milliseconds."""
    median: float
    p10: float
    p90: float
    n: int

    @staticmethod
    def of(samples: list[float]) -> "Stats":
        s = sorted(samples)
        q = lambda f: s[min(len(s) - 1, max(0, int(round(f * (len(s) - 1)))))]  # noqa: E731
        return Stats(q(0.5), q(0.1), q(0.9), len(s))


@dataclass(frozen=True)
class Measurement:
    """One configuration: its correctness, its error, and (if timed) kernel and baseline times."""
    config: str                     # Config.id
    shape: str                      # Config.shape_id
    init: str
    heldout: bool
    correct: bool
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0        # max |out - ref| / (atol + rtol * |ref|): <= 1 passes
    failure: str | None = None
    kernel: Stats | None = None
    eager: Stats | None = None
    compile: Stats | None = None
    floor_ms: float | None = None   # floor bytes / measured copy bandwidth
    autotune: Stats | None = None   # torch.compile mode=max-autotune-no-cudagraphs (baseline compile-max-autotune)
    clock: dict = field(default_factory=dict)    # contender -> graph | queued | wall (see judge.worker.timing)
    latency: dict = field(default_factory=dict)  # contender -> Stats of one synced call, launch included (CUDA)
    launch_bound: bool = False      # the kernel's or best torch's device time is within its launch cost
    checked_calls: int = 0          # timed and warm-up kernel calls whose outputs were checked
    canary_calls: int = 0           # timed calls of the kernel that carried the canary: checked, not in `kernel`
    speedup_ci: tuple | None = None  # 95% bootstrap interval of speedup("best") over this configuration's samples
                                    # (paired where the baselines were timed interleaved: judge.evaluator.noise)

    def baseline(self, name: str) -> Stats | None:
        return {"eager": self.eager, "compile": self.compile, "compile-max-autotune": self.autotune}.get(name)

    @property
    def best_torch_name(self) -> str | None:
        timed = [(s.median, n) for n in ("eager", "compile", "compile-max-autotune") if (s := self.baseline(n))]
        return min(timed)[1] if timed else None

    @property
    def best_torch(self) -> float | None:
        name = self.best_torch_name
        return self.baseline(name).median if name else None

    def speedup(self, over: str = "best") -> float | None:
        if self.kernel is None or self.kernel.median <= 0:
            return None
        base = self.best_torch if over == "best" else (s.median if (s := self.baseline(over)) else None)
        return base / self.kernel.median if base else None

    @property
    def floor_fraction(self) -> float | None:
        return self.floor_ms / self.kernel.median if self.kernel and self.floor_ms and self.kernel.median > 0 else None


@dataclass(frozen=True)
class Evaluation:
    """The whole verdict on one kernel: compiled? correct on every configuration? how fast?"""
    task: str
    target: str
    abi: str
    shapes: str
    compiled: bool
    correct: bool
    failure: str | None = None
    stage: str = "done"             # where it stopped: verify | build | load | correctness | timing | done
    measurements: tuple[Measurement, ...] = ()
    build_seconds: float = 0.0
    eval_seconds: float = 0.0
    device: str = ""
    bandwidth_gbs: float | None = None
    phases: dict = field(default_factory=dict, compare=False)  # seconds per judging phase (see harness.judge)
    baselines_reused: bool = False  # baseline times from this evaluator's recent judgements, not timed afresh
    log: str = field(default="", compare=False)
    # 95% bootstrap interval of `speedup` over the timed samples (judge.evaluator.noise)
    speedup_ci: tuple | None = None
    work: dict = field(default_factory=dict, compare=False)  # the worker's counts: timed_calls, flushed_bytes
    drawn: tuple[Measurement, ...] = ()   # configurations drawn from the task's domain: checked, never timed

    def _geo(self, fn) -> float | None:
        vals = [fn(m) for m in self.measurements if m.kernel is not None]
        g = geomean([v for v in vals if v])
        return None if not self.correct or math.isnan(g) else g

    @property
    def speedup(self) -> float | None:
        return self._geo(lambda m: m.speedup("best"))

    @property
    def speedup_eager(self) -> float | None:
        return self._geo(lambda m: m.speedup("eager"))

    @property
    def speedup_compile(self) -> float | None:
        return self._geo(lambda m: m.speedup("compile"))

    @property
    def floor_fraction(self) -> float | None:
        return self._geo(lambda m: m.floor_fraction)

    @property
    def fitness(self) -> float:
        """What the search maximises: the speedup over the faster torch baseline, 0 when rejected."""
        return self.speedup or 0.0

    def summary(self) -> dict:
        """The JSON object `python -m kevolve.evaluate` prints last."""
        return {"task": self.task, "target": self.target, "abi": self.abi, "shapes": self.shapes,
                "compiled": self.compiled, "correct": self.correct, "failure": self.failure,
                "stage": self.stage, "speedup": self.speedup, "speedup_eager": self.speedup_eager,
                "speedup_compile": self.speedup_compile, "floor_fraction": self.floor_fraction,
                "speedup_ci": list(self.speedup_ci) if self.speedup_ci else None,
                "launch_bound": sum(m.launch_bound for m in self.measurements),
                "configs": len(self.measurements), "drawn": len(self.drawn), "device": self.device,
                "build_seconds": round(self.build_seconds, 3), "eval_seconds": round(self.eval_seconds, 3),
                "phases": {k: round(v, 3) for k, v in self.phases.items()}, "work": dict(self.work)}

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @staticmethod
    def from_json(text: str) -> "Evaluation":
        d = json.loads(text)

        def measurement(m: dict) -> Measurement:
            for k in ("kernel", "eager", "compile", "autotune"):
                m[k] = Stats(**m[k]) if m.get(k) else None
            m["latency"] = {k: Stats(**v) for k, v in m.get("latency", {}).items()}
            if m.get("speedup_ci"):
                m["speedup_ci"] = tuple(m["speedup_ci"])
            return Measurement(**m)
        if d.get("speedup_ci"):
            d["speedup_ci"] = tuple(d["speedup_ci"])
        return Evaluation(measurements=tuple(measurement(m) for m in d.pop("measurements")),
                          drawn=tuple(measurement(m) for m in d.pop("drawn", [])), **d)


@dataclass(frozen=True)
class Release:
    """A kernel checked over a sweep of its task's domain in a fresh worker before it is released
    (`harness.release`): `checked` configurations passed of `planned`; `failure` names the smallest failing
    configuration found (shrunk); `proven` says on which domain and target."""
    task: str
    target: str
    passed: bool
    planned: int
    checked: int
    proven: str
    failure: str | None = None
    seconds: float = 0.0

    def line(self) -> str:
        """One line for a console or a report."""
        if self.passed:
            return f"release check: correct on {self.checked} configurations swept over the domain ({self.proven})"
        return f"release check FAILED after {self.checked} of {self.planned} configurations: {self.failure}"


@dataclass(frozen=True)
class Comparison:
    """Two built kernels, a and b, timed paired and interleaved in one worker on the same fresh inputs, every
    call of both checked (`harness.compare`). `ratio` < 1: a is faster."""
    task: str
    target: str
    shapes: str
    configs: tuple[str, ...] = ()
    ratios: tuple[float, ...] = ()          # per configuration: median time of a / median time of b
    ratio: float | None = None              # geometric mean of `ratios`
    ci: tuple[float, float] | None = None   # 95% bootstrap interval of `ratio` over paired samples
    indistinguishable: bool = False         # the interval contains 1.0: neither is shown faster
    clock: dict = field(default_factory=dict)   # configuration -> {"a": clock, "b": clock}
    failure: str | None = None              # a wrong timed call ("kernel a: ..." / "kernel b: ..."), a crash
    device: str = ""
    seconds: float = 0.0

    @property
    def faster(self) -> str | None:
        """"a" or "b" when the interval excludes 1.0, else None."""
        if self.failure or self.ci is None or self.indistinguishable:
            return None
        return "a" if self.ci[1] < 1.0 else "b"
