"""CPUs for a CPU-target worker with a thread count (`Options.threads`, `resources.worker_threads`).

torch's baselines run on `threads` threads (`torch.set_num_threads`); without more, a kernel's OpenMP would
still use every core (`num_threads(64)`, `omp_set_num_threads`) and be timed against a torch held to fewer:
a speedup bought with cores. So the evaluator claims `threads` CPUs of its own affinity for each worker it
starts and the worker pins itself to them before anything else (`KEVOLVE_CPUS`, read by `worker.main`), with
OMP_NUM_THREADS set to match; a thread of the kernel's, however many it starts, runs on those CPUs only, and
the seal (`confine.seal(pinned=True)`) refuses `sched_setaffinity`, so none can move off them.

Claims are advisory locks (`flock`) on one file per CPU in a directory every evaluator of the node shares, held
by the evaluator (the worker never sees the descriptors: they are not inheritable), so several evaluators'
workers, and an evaluator's spare beside its current worker, get disjoint CPUs while there are enough; when
there are not, a worker shares CPUs with another (slower, never unfair: it is still held to `threads`) and the
claim says so. A lock ends with its descriptor, so a dead evaluator leaves nothing claimed.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ENV = "KEVOLVE_CPUS"


def claim_dir() -> Path:
    base = (Path("/dev/shm") if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK)
            else Path(tempfile.gettempdir()))
    d = base / f"kevolve-cpus-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


@dataclass
class Claim:
    cpus: tuple[int, ...]
    shared: bool                       # fewer free CPUs than asked: some are another worker's too
    fds: list[int] = field(default_factory=list, repr=False)

    def env(self) -> str:
        return ",".join(map(str, self.cpus))

    def release(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)           # closing the descriptor ends its lock
            except OSError:
                pass
        self.fds = []


def claim(n: int) -> Claim:
    """`n` CPUs of this process's affinity, free ones first (each locked until `release`)."""
    mine = sorted(os.sched_getaffinity(0))
    n = max(1, min(n, len(mine)))
    d, got, fds = claim_dir(), [], []
    for cpu in mine:
        fd = os.open(d / str(cpu), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        got.append(cpu)
        fds.append(fd)
        if len(got) == n:
            return Claim(tuple(got), False, fds)
    extra = [c for c in mine if c not in got][: n - len(got)]     # not enough free: share the first others
    return Claim(tuple(sorted(got + extra)), True, fds)


def pin_from_env() -> tuple[int, ...] | None:
    """In the worker, before torch's import starts any thread: its affinity from `KEVOLVE_CPUS`, if set."""
    spec = os.environ.get(ENV)
    if not spec:
        return None
    cpus = tuple(int(c) for c in spec.split(","))
    os.sched_setaffinity(0, cpus)
    return cpus
