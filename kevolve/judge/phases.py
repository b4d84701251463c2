"""Wall seconds per judging phase, to tell where a slow judgement goes. With `KEVOLVE_TRACE=1` in the
environment every phase also prints one line to stderr as it ends (phase, what, seconds, running total)."""
from __future__ import annotations

import collections
import contextlib
import os
import sys
import time


class Phases:
    """Wall seconds per judging phase: `load` (worker start, library load), `check` (the worker's correctness
    calls and output export), `reference` (this process: inputs, float64 reference, comparison),
    `baselines` (torch.compile per shape), `time` (interleaved timing, verification included) and, inside it,
    `setup` (buffers, warm-up, graph capture), `round` (the worker's timed rounds) and `inputs` (the exact input
    comparison). Nested phases count in both. Tells where a slow judgement goes."""

    def __init__(self, trace: bool | None = None):
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.trace = bool(os.environ.get("KEVOLVE_TRACE")) if trace is None else trace

    @contextlib.contextmanager
    def __call__(self, phase: str, what: str = ""):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self.seconds[phase] += dt
            if self.trace:
                print(f"[judge] {phase:<10} {dt:8.3f}s  total {self.seconds[phase]:8.2f}s  {what}", file=sys.stderr,
                      flush=True)

    def done(self) -> dict[str, float]:
        return dict(self.seconds)
