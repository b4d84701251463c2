"""Wall seconds per judging phase, to tell where a slow judgement goes."""
from __future__ import annotations

import collections
import contextlib
import time


class Phases:
    """Wall seconds per judging phase: `load` (worker start, library load), `check` (the worker's correctness
    calls and output export), `reference` (this process: inputs, float64 reference, comparison),
    `baselines` (torch.compile per shape), `time` (interleaved timing). Tells where a slow judgement goes."""

    def __init__(self):
        self.seconds: dict[str, float] = collections.defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - t0

    def done(self) -> dict[str, float]:
        return dict(self.seconds)
