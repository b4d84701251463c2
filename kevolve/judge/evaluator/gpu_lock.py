"""One GPU, several evaluators: a reader-writer lock per device, across processes, so that no judgement's timing
overlaps another's GPU work.

Evaluators that share a GPU (several judgements started side by side, `experiments/gpu_seeds.sh` with PAR > 1,
or a search with more evaluators than GPUs) build, compile and check in parallel, but a timed round measures
device time, and another process's kernels on the same device would be counted in it. So the phases that put
work on the device hold this lock (`Phases.GPU_PHASES`): worker start, correctness calls, references, the
verification of timed calls and torch.compile warm-ups shared; the worker's timing commands (warm-up and
capture, each timed round) exclusive. A hold ends only once the holder's own queued device work is done
(`settle`: the evaluator's device sync), so nothing it queued runs into another's timed round. A waiting writer
goes first: readers pass a turnstile the writer holds while it waits, so a stream of checks cannot starve a
timing phase.

The lock is `flock(2)` on two files per device, named by the device's UUID, in `$KEVOLVE_GPU_LOCKS` (default
`<tmp>/kevolve-gpu-locks`); the kernel releases it when a process dies, so a killed evaluator never leaves it held.
Holds are re-entrant within a process (a nested hold keeps the outer one's mode).

Guarantees: between processes using the same lock folder, no shared hold overlaps an exclusive one on the same
device. Not guaranteed: anything about processes that do not take the lock (another program on the GPU), or
about GPU work a worker leaves running between phases (a kernel still running after its call returned is its
own evaluation's problem: the device-wide sync before each check waits for it).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import threading
import time
from pathlib import Path

from kevolve.config import env


def folder() -> Path:
    return Path(env.gpu_locks() or Path(tempfile.gettempdir()) / "kevolve-gpu-locks")


class DeviceLock:
    """The lock of one device (`key`: its UUID). `hold(exclusive)` is a context manager; `waited` sums the
    seconds spent waiting for it; `settle`, when given, runs before the outermost hold lets go."""

    def __init__(self, key: str, where: Path | None = None, settle=None):
        where = where or folder()
        where.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", key) or "device"
        self._paths = (where / f"{name}.turn", where / f"{name}.lock")
        self._fds: tuple[int, int] | None = None
        self._depth = 0
        self._mutex = threading.Lock()       # one thread of this process takes the flocks at a time
        self._settle = settle                # called before the outermost hold ends (e.g. torch.cuda.synchronize)
        self.waited = 0.0

    def _open(self) -> tuple[int, int]:
        if self._fds is None:
            self._fds = tuple(os.open(p, os.O_RDWR | os.O_CREAT, 0o666) for p in self._paths)
        return self._fds

    @contextlib.contextmanager
    def hold(self, exclusive: bool):
        with self._mutex:
            outer = self._depth == 0
            self._depth += 1
        try:
            if outer:
                self._acquire(exclusive)
            try:
                yield
            finally:
                if outer and self._settle is not None:
                    self._settle()
        finally:
            with self._mutex:
                self._depth -= 1
                if outer:
                    fcntl.flock(self._open()[1], fcntl.LOCK_UN)

    def _acquire(self, exclusive: bool) -> None:
        turn, rw = self._open()
        t0 = time.perf_counter()
        fcntl.flock(turn, fcntl.LOCK_EX)            # a writer keeps the turnstile while it waits for the readers
        try:
            if exclusive:
                fcntl.flock(rw, fcntl.LOCK_EX)
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)
        if not exclusive:
            fcntl.flock(rw, fcntl.LOCK_SH)
        self.waited += time.perf_counter() - t0

    def close(self) -> None:
        if self._fds is not None:
            for fd in self._fds:
                os.close(fd)
            self._fds = None


_LOCKS: dict[str, DeviceLock] = {}


def of_worker(uuid: str | None, device: str | None = None) -> DeviceLock:
    """This process's lock of the worker's GPU (by UUID; by name and bus where the worker gives none)."""
    key = str(uuid or device or "cuda")
    if key not in _LOCKS:
        _LOCKS[key] = DeviceLock(key, settle=_settle)
    return _LOCKS[key]


def own(options) -> DeviceLock | None:
    """Before the worker names its GPU: the lock of the one it will get (`options.gpu` among this process's
    visible devices, else the current one: a worker inherits CUDA_VISIBLE_DEVICES), so its start, a bandwidth
    probe among the rest, is held too."""
    if options.target != "cuda":
        return None
    import torch
    if not torch.cuda.is_available():
        return None
    index = options.gpu if options.gpu is not None else torch.cuda.current_device()
    return of_worker(str(torch.cuda.get_device_properties(index).uuid))


def _settle() -> None:
    """This process's queued device work done (references, comparisons), before its hold of the GPU ends."""
    import torch
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
