"""Fixtures of the CPU red-team files (test_cpu.py, test_cpu_round2.py): the tiny LayerNorm task, and one `Reuse`
per module — the evaluator state a search keeps between candidates, so each file shows that a hostile kernel
leaves nothing behind for the honest one judged after it."""
from __future__ import annotations

from pathlib import Path

import pytest

from kevolve.judge.options import Options
from kevolve.judge.reuse import Reuse
from kevolve.task import load_task

TINY = Path(__file__).resolve().parent.parent / "kernels" / "tasks" / "layernorm_tiny"


@pytest.fixture(scope="module")
def tiny():
    return load_task(TINY)


@pytest.fixture(scope="module")
def reuse():
    r = Reuse(Options(target="cpu", shapes="small", time_kernel=False, timeout=30), reference_bytes=1 << 28,
              baseline_refresh_s=0)
    yield r
    r.close()
