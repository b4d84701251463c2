"""Wall seconds per judging phase, to tell where a slow judgement goes. With `KEVOLVE_TRACE=1` in the
environment every phase also prints one line to stderr as it ends (phase, what, seconds, running total)."""
from __future__ import annotations

import collections
import contextlib
import sys
import time

from kevolve.config import env
from kevolve.judge.evaluator.gpu_lock import DeviceLock


class Phases:
    """Wall seconds per judging phase: `load` (worker start, library load), `check` (the worker's correctness
    calls and output export), `reference` (this process: inputs, float64 reference, comparison),
    `baselines` (torch.compile per shape), `seal` (the worker's last step before the kernel loads), `teardown`
    (the worker's process group ended, the spare worker started: `harness.judge`, after the verdict), `time`
    (interleaved timing, verification included) and, inside it,
    `setup` (buffers, warm-up, graph capture), `round` (the worker's timed rounds) and `inputs` (the exact input
    comparison); inside `reference`, `expected` (float64 references computed) and `outputs` (outputs compared
    with them; both compiled where `judge.evaluator.fused` is on); `drawn` (the configurations drawn from the domain:
    their checks and references, counted in those phases too). Nested phases count in both. Tells where a slow
    judgement goes. Phases named `worker …` are the worker's own account of its timing commands (`add`: buffers
    filled, poisoned, timed calls, export); a diagnostic inside `setup` and `round`, never a verdict's input (a
    kernel could forge them).

    With a device lock (`gpu`, set once the worker names its GPU) the phases that put work on the device hold
    it (`GPU_PHASES`; `judge.evaluator.gpu_lock`), and the seconds spent waiting for it are the phase `gpu wait`. Only
    the worker's timing commands hold it exclusively (`setup`: warm-up, capture, the graphs' first replays;
    `round`: one timed round): the verification between rounds (`reference`, `inputs`) is shared, so another
    evaluator on the same GPU checks its candidate while this one verifies, never while it times."""

    GPU_PHASES = {"load": True, "check": False, "reference": False, "inputs": False, "baselines": False,
                  "release": False, "setup": True, "round": True}                   # phase -> exclusive
    NESTED = frozenset({"setup", "round", "inputs", "gpu wait", "expected", "outputs", "drawn"})   # counted twice

    def __init__(self, trace: bool | None = None):
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.trace = env.trace() if trace is None else trace
        self.gpu: DeviceLock | None = None
        self.work: dict[str, int] = collections.defaultdict(int)
        self.open: list[tuple[str, str, float]] = []          # phases entered and not yet left (`snapshot`)
        self.began = time.perf_counter()

    @contextlib.contextmanager
    def __call__(self, phase: str, what: str = ""):
        t0 = time.perf_counter()
        self.open.append((phase, what, t0))
        held = contextlib.nullcontext()
        if self.gpu is not None and phase in self.GPU_PHASES:
            waited = self.gpu.waited
            held = self.gpu.hold(self.GPU_PHASES[phase])
        try:
            with held:
                if self.gpu is not None and phase in self.GPU_PHASES and self.gpu.waited > waited:
                    self.seconds["gpu wait"] += self.gpu.waited - waited
                yield
        finally:
            dt = time.perf_counter() - t0
            self.open.pop()
            self.seconds[phase] += dt
            if self.trace:
                print(f"[judge] {phase:<10} {dt:8.3f}s  total {self.seconds[phase]:8.2f}s  {what}", file=sys.stderr,
                      flush=True)

    @classmethod
    def nested(cls, phase: str) -> bool:
        """Counted inside another phase as well (so not summed with the outer ones)."""
        return phase in cls.NESTED or phase.startswith("worker ")

    def add(self, seconds: dict | None) -> None:
        """The worker's breakdown of one timing command (`{"fill": s, ...}`), as phases `worker fill`, ...;
        anything but a small dict of finite numbers is ignored (it is the worker's word)."""
        if not isinstance(seconds, dict) or len(seconds) > 16:
            return
        for name, s in seconds.items():
            if isinstance(name, str) and len(name) < 32 and isinstance(s, (int, float)) and 0 <= s < 1e6:
                self.seconds[f"worker {name}"] += float(s)

    def snapshot(self) -> dict:
        """Where a judgement in progress is, for someone waiting on it (`search.actors.Evaluator.status`, read from
        another thread): seconds since it began, the phases it is in (outermost first, with what and for how long),
        and the seconds of the phases it has left."""
        now = time.perf_counter()
        for _ in range(3):                  # the judging thread may change the dicts under us: read again
            try:
                return {"seconds": round(now - self.began, 1),
                        "in": [(p, w, round(now - t, 1)) for p, w, t in list(self.open)],
                        "done": {k: round(v, 1) for k, v in list(self.seconds.items()) if not self.nested(k)}}
            except RuntimeError:
                continue
        return {"seconds": round(now - self.began, 1), "in": [], "done": {}}

    def count(self, work: dict | None) -> None:
        """The worker's count of a timing command's work (`{"timed_calls": n, "flushed_bytes": b}`): summed into
        `work`, the judgement's cost in units that do not depend on the clock. Anything but a small dict of
        non-negative integers is ignored (it is the worker's word: a diagnostic, never a verdict's input)."""
        if not isinstance(work, dict) or len(work) > 8:
            return
        for name, n in work.items():
            if isinstance(name, str) and len(name) < 32 and isinstance(n, int) and 0 <= n < 1 << 62:
                self.work[name] += n

    def done(self) -> dict[str, float]:
        return dict(self.seconds)
