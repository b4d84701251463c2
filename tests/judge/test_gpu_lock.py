"""Contracts of kevolve.judge.evaluator.gpu_lock: across processes, no shared hold overlaps an exclusive one on the same
device; a waiting writer is not starved by readers that keep coming; holds nest; a killed holder frees the
lock; the judge's GPU phases take it (shared for checks, exclusive for timing)."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest

from kevolve.judge.evaluator.gpu_lock import DeviceLock
from kevolve.judge.evaluator.phases import Phases


def _worker(where: str, exclusive: bool, log: str, hold_s: float, offset: float, name: str, ready, go, start) -> None:
    lock = DeviceLock("GPU-test", where=__import__("pathlib").Path(where))
    ready.release()
    go.wait()                                   # every process is up: the schedule below is relative to one start
    time.sleep(max(0.0, start.value + offset - time.time()))
    with lock.hold(exclusive):
        t0 = time.time()
        time.sleep(hold_s)
        t1 = time.time()
    with open(log, "a") as f:
        f.write(f"{name} {'X' if exclusive else 'S'} {t0:.6f} {t1:.6f}\n")


def _run(tmp_path, plan: list[tuple[str, bool, float, float]]) -> dict[str, tuple[str, float, float]]:
    """Run one process per (name, exclusive, start offset s, hold s), all released at once after every one has
    started (a spawned interpreter can take seconds on a loaded machine); returns name -> (kind, t0, t1)."""
    ctx, log = mp.get_context("spawn"), tmp_path / "log"
    ready, go, start = ctx.Semaphore(0), ctx.Event(), ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_worker,
                         args=(str(tmp_path), exclusive, str(log), hold, offset, name, ready, go, start))
             for name, exclusive, offset, hold in plan]
    for p in procs:
        p.start()
    for _ in procs:
        assert ready.acquire(timeout=120), "a lock process did not start"
    start.value = time.time() + 0.1
    go.set()
    for p in procs:
        p.join(60)
    return {name: (k, float(a), float(b))
            for name, k, a, b in (line.split() for line in log.read_text().splitlines())}


def test_exclusive_holds_never_overlap_any_other_hold(tmp_path):
    spans = _run(tmp_path, [(f"p{i}", i % 3 == 0, 0.02 * i, 0.15) for i in range(9)])
    assert len(spans) == 9
    shared = [s for s in spans.values() if s[0] == "S"]
    assert any(a[1] < b[2] and b[1] < a[2] for a in shared for b in shared if a is not b), "readers never shared"
    for x in (s for s in spans.values() if s[0] == "X"):
        for o in spans.values():
            if o is not x:
                assert o[2] <= x[1] or o[1] >= x[2], f"{o} overlaps exclusive {x}"


def test_a_waiting_writer_goes_before_readers_that_come_after_it(tmp_path):
    # the first reader holds 0.6 s; the writer asks at 0.2 s, three more readers at 0.3, 0.4, 0.5 s
    spans = _run(tmp_path, [("first", False, 0.0, 0.6), ("writer", True, 0.2, 0.1),
                            *[(f"late{i}", False, 0.3 + 0.1 * i, 0.6) for i in range(3)]])
    assert spans["first"][1] < spans["writer"][1], spans
    assert all(spans["writer"][1] < spans[f"late{i}"][1] for i in range(3)), spans


def _hold_forever(where: str) -> None:
    with DeviceLock("GPU-test", where=__import__("pathlib").Path(where)).hold(True):
        time.sleep(60)


def test_holds_nest_and_a_killed_holder_frees_the_lock(tmp_path):
    lock = DeviceLock("GPU-test", where=tmp_path)
    with lock.hold(True):
        with lock.hold(False):                  # nested: keeps the outer exclusive hold, no deadlock
            pass
    p = mp.get_context("spawn").Process(target=_hold_forever, args=(str(tmp_path),))
    p.start()
    time.sleep(1.5)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    t0 = time.perf_counter()
    with lock.hold(True):
        pass
    assert time.perf_counter() - t0 < 5


def test_judging_phases_take_the_device_lock(tmp_path):
    """Only the worker's timing commands (setup, round) hold the GPU exclusively; verifying a round between them
    (reference, inputs) and the other device phases share it, so another evaluator's checks fit in between;
    each hold ends with the holder's own device work done (`settle`)."""
    settled = []
    clock = Phases(trace=False)
    clock.gpu = DeviceLock("GPU-test", where=tmp_path, settle=lambda: settled.append(1))
    other = DeviceLock("GPU-test", where=tmp_path)
    import fcntl
    phases = [("load", True), ("check", False), ("reference", False), ("inputs", False), ("baselines", False),
              ("release", False), ("setup", True), ("round", True)]
    for phase, exclusive in phases:
        with clock(phase):
            fd = other._open()[1]
            with pytest.raises(BlockingIOError):    # another process's view: an exclusive request must wait
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if exclusive:
                with pytest.raises(BlockingIOError):
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            else:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
    assert len(settled) == len(phases)
    with clock("time"):                              # an account of the timing phase, not a hold: nothing held
        fcntl.flock(other._open()[1], fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(other._open()[1], fcntl.LOCK_UN)
        with clock("round"):                         # the round inside it is held, and settled once
            with pytest.raises(BlockingIOError):
                fcntl.flock(other._open()[1], fcntl.LOCK_SH | fcntl.LOCK_NB)
            with clock("reference"):                 # nested: keeps the outer (exclusive) hold
                with pytest.raises(BlockingIOError):
                    fcntl.flock(other._open()[1], fcntl.LOCK_SH | fcntl.LOCK_NB)
    assert len(settled) == len(phases) + 1
