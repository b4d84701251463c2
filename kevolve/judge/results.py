"""The messages the evaluation core hands back: frozen dataclasses, plain data, JSON round-trippable.

`Measurement` is one configuration's numbers; `Evaluation` is the verdict on one kernel over a shape set.
Fitness is the geometric mean over timed configurations of (best torch time / kernel time).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field

from kevolve.task.spec import geomean


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

    @property
    def best_torch(self) -> float | None:
        times = [s.median for s in (self.eager, self.compile) if s is not None]
        return min(times) if times else None

    def speedup(self, over: str = "best") -> float | None:
        if self.kernel is None or self.kernel.median <= 0:
            return None
        base = {"best": self.best_torch, "eager": self.eager and self.eager.median,
                "compile": self.compile and self.compile.median}[over]
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
    baselines_reused: bool = False  # baseline times from this evaluator's recent judgements, not interleaved
    log: str = field(default="", compare=False)

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
                "configs": len(self.measurements), "device": self.device,
                "build_seconds": round(self.build_seconds, 3), "eval_seconds": round(self.eval_seconds, 3),
                "phases": {k: round(v, 3) for k, v in self.phases.items()}}

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @staticmethod
    def from_json(text: str) -> "Evaluation":
        d = json.loads(text)
        ms = []
        for m in d.pop("measurements"):
            for k in ("kernel", "eager", "compile"):
                m[k] = Stats(**m[k]) if m[k] else None
            ms.append(Measurement(**m))
        return Evaluation(measurements=tuple(ms), **d)
