"""The CPU clock's cold start follows the call's own bytes, not the host's last-level cache (`judge.worker.evict`,
`timing.CpuClock`): the eviction covers exactly the contender's buffers, a judgement's eviction work is the same
whatever LLC the host reports (`KEVOLVE_LLC_BYTES` stands for a host with a 1 GiB L3), and the older LLC-sized
rewrite (`cpu_flush=llc`), kept as a knob, is the one that grows with it."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from kevolve.judge.worker import evict, timing
from kevolve.judge.evaluator.harness import evaluate
from kevolve.judge.options import Options
from kevolve.task import load_task

HERE = Path(__file__).resolve().parent.parent
TINY = HERE / "kernels" / "tasks" / "layernorm_tiny"
SEED = (HERE / "kernels" / "cpu" / "good_openmp.cpp")

pytestmark = pytest.mark.usefixtures("private_build_cache")


@pytest.fixture(scope="module")
def evictor():
    path = evict.library()
    assert path, "the evictor must build wherever the CPU target builds kernels (a C compiler is there)"
    return evict.Evictor(path)


def test_eviction_covers_exactly_the_buffers_it_is_given(evictor):
    import torch
    a, b = torch.randn(1000), torch.empty(3, 7, dtype=torch.float64)
    ranges = evictor.ranges([a, b, torch.empty(0)])
    before = evictor.bytes
    assert evictor.evict(ranges) == 4000 + 168
    assert evictor.bytes - before == 4168
    assert evictor.line in (32, 64, 128, 256)


def test_the_lines_clock_never_touches_an_llc_sized_buffer(monkeypatch, evictor):
    import torch
    monkeypatch.setenv("KEVOLVE_LLC_BYTES", str(1 << 30))
    monkeypatch.setattr(timing, "_FLUSH", {})
    clock = timing.CpuClock(evictor, "lines")
    x = torch.randn(4096)
    ranges = evictor.ranges([x])
    for _ in range(3):
        clock.wall(lambda: x.sum(), ranges)
    assert clock.flush is None and "cpu" not in timing._FLUSH      # no 2 GiB buffer was ever made
    assert clock.flushed_bytes == 3 * 4096 * 4


def test_the_llc_clock_grows_with_the_cache_it_is_told_of(monkeypatch):
    monkeypatch.setenv("KEVOLVE_LLC_BYTES", str(8 << 20))
    monkeypatch.setattr(timing, "_FLUSH", {})
    clock = timing.CpuClock(None, "llc")
    clock.wall(lambda: None)
    assert clock.flushed_bytes == 16 << 20
    with pytest.raises(ValueError, match="cpu_flush"):
        timing.CpuClock(None, "l3")


def _work(monkeypatch, llc: int, mode: str) -> tuple[int, int]:
    monkeypatch.setenv("KEVOLVE_LLC_BYTES", str(llc))
    options = Options(target="cpu", shapes="small", baselines=("eager",), reps=5, budget_s=0.02, timeout=60,
                      time_inits="first", cpu_flush=mode)
    ev = evaluate(load_task(TINY), SEED.read_text(), options)
    assert ev.correct, ev.failure
    return ev.work["timed_calls"], ev.work["flushed_bytes"]


def test_a_judgements_flush_work_does_not_grow_with_the_llc(monkeypatch):
    """The same judgement on a host reporting a 32 MiB and a 1 GiB LLC: the same bytes evicted per timed call, each
    no more than the largest call's own buffers (layernorm_tiny's N=4096 row: x, weight, bias, out)."""
    per_call = {}
    for llc in (32 << 20, 1 << 30):
        calls, flushed = _work(monkeypatch, llc, "lines")
        assert calls > 0
        per_call[llc] = flushed / calls
    assert per_call[1 << 30] == pytest.approx(per_call[32 << 20], rel=0.25)
    task = load_task(TINY)
    biggest = max(sum(4 * math.prod(task.shape(s, c.size_dict)) for s in task.inputs + task.outputs)
                  + task.workspace(c.size_dict) for c in task.configs("small"))
    assert per_call[1 << 30] <= biggest


def test_the_llc_knob_keeps_the_old_flush(monkeypatch):
    calls, flushed = _work(monkeypatch, 4 << 20, "llc")
    assert flushed == calls * (8 << 20)
