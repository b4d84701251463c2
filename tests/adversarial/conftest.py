"""Fixtures of the red-team files (test_cpu.py, test_cpu_round2.py, test_cuda.py): the tiny LayerNorm task (and a
copy with one configuration per shape), and one `Reuse` per module — the evaluator state a search keeps between
candidates, so each file shows that a hostile kernel leaves nothing behind for the honest one judged after it."""
from __future__ import annotations

from pathlib import Path

import pytest

from kevolve.judge.options import Options
from kevolve.judge.evaluator.reuse import Reuse
from kevolve.task import load_task

TINY = Path(__file__).resolve().parent.parent / "kernels" / "tasks" / "layernorm_tiny"


@pytest.fixture(scope="module")
def tiny():
    return load_task(TINY)


@pytest.fixture(scope="module")
def tiny_one_per_shape(tmp_path_factory):
    """layernorm_tiny with one configuration per shape (first init, first seed). For the attacks that keep a table of
    every buffer they were called on and touch it later (cpu/ahead_of_calls.cpp, test_cuda.QUEUED_AHEAD): in the full
    set they meet, in their table, the third call's page-ended buffers of an earlier configuration of the same shape
    unmapped — a crash, their own bug, before any timed call; here each resets its table with each new shape."""
    import shutil
    import yaml
    folder = tmp_path_factory.mktemp("tasks") / "layernorm_tiny"
    shutil.copytree(TINY, folder)
    spec = yaml.safe_load((folder / "task.yaml").read_text())
    spec["shapes"]["small"].update(inits=spec["shapes"]["small"]["inits"][:1], seeds=[0])
    (folder / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_task(folder)


@pytest.fixture(scope="module")
def reuse():
    r = Reuse(Options(target="cpu", shapes="small", time_kernel=False, timeout=30), reference_bytes=1 << 28,
              baseline_refresh_s=0)
    yield r
    r.close()
