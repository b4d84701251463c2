"""The clean baseline worker: torch's baselines timed in a process that never loads candidate code (issue 49).

Everything a verdict compares a kernel with used to be measured in the kernel's own worker, beside its host code:
a kernel that set `omp_set_num_threads(1)` for small problems (an honest pattern) changed the thread count torch's
baselines ran with, and torch.compile's guard on it recompiled inside the sealed worker — a vfork the evidence layer
charged to the kernel; a kernel that reached the worker's Python could slow torch down beside its calls. So each
evaluator keeps one `BaselineWorker`: a worker process like any other (the same confinement, environment and code,
started through `process.WorkerProcess`) that is never sealed, never sent a library and never given a kernel, and
that compiles and times torch eager and torch.compile for every judgement of the evaluator, kept warm between them
(its compiled graphs and its record of each configuration's slowest baseline with it).

How a configuration is timed (`Paced`, driven by `timed.time_config`): the kernel's worker times the kernel alone,
its rounds checked and bounded from outside as before; for each of its counted rounds the baseline worker times the
baselines on the same input variants, before it on odd rounds and after it on even ones, so the machine's drift
falls on both alike. On the same device (CUDA: the same GPU, the same device lock) or the same CPUs (the kernel
worker's claimed CPUs, `pin`), and while the baseline worker times, the kernel's worker is stopped: its whole
process group gets SIGSTOP before the round and SIGCONT after it (`frozen`), so nothing of it runs beside torch — a
thread a kernel left running, a GPU launch from its host code — and the CPU time its process burned meanwhile, which
for a stopped process is none, is checked (the quiet bound: more than `QUIET_MS` is a rejection naming it, a thread
of the kernel's that escaped the stop).

Guarantees: no code of any candidate runs in the baseline worker, ever (no command that loads a library is sent to
it, and no worker of a candidate can reach it: Landlock and the PID namespace keep every worker out of the others'
processes, and its exchange folder is its own); the kernel's worker runs nothing while the baselines are timed; a
failure of the baseline worker is the harness's (`HarnessFailed`, a `harness: ...` verdict the search judges again),
and the next judgement starts a new one. Not guaranteed: that the baselines and the kernel see the same load from
the rest of the machine (interleaving makes drift common to both, not absent); where SIGSTOP cannot stop a thread
(one in an uninterruptible wait), the quiet bound sees its CPU.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from kevolve.judge import exchange, protocol
from kevolve.judge.evaluator import outside
from kevolve.judge.evaluator.process import WorkerDied, WorkerProcess
from kevolve.judge.options import Options

QUIET_MS = 1.0                   # the kernel's worker may burn this much CPU while stopped (clock granularity)
STOP_WAIT_S = 0.5                # how long to wait for every thread of the kernel's worker to show stopped


class HarnessFailed(Exception):
    """The baseline worker failed (died, timed out, refused a command): the harness's failure, never the kernel's."""


class BaselineWorker:
    """One evaluator's clean worker for torch's baselines: started on first use for a task and options (`ready`),
    kept between judgements, started anew when they change or it failed."""

    def __init__(self):
        self.worker: WorkerProcess | None = None
        self.key = None
        self.files: str | None = None
        self.info: protocol.Started | None = None
        self.prepared: set = set()          # (configuration index, baselines) compiled in this process
        self.slowest: dict = {}             # configuration id -> its slowest baseline's ms per call (plans, canary)
        self.notes: dict = {}               # configuration index -> what its compile noted (a failed torch.compile)

    # ------------------------------------------------------------------ lifecycle
    def ready(self, task, options: Options) -> protocol.Started:
        """The baseline worker for `task` and `options`, started (confined, its shape set named) if it is not
        running with them. Raises `HarnessFailed`."""
        from kevolve.judge.evaluator import baseline_cache, startup
        key = (task.ref, str(task.dir), options.target, options.abi, options.shapes, options.threads, options.gpu,
               options.strict_cuda, options.cpu_flush, options.cache_dir, options.timeout)
        if self.worker is not None and self.key == key and self.worker.proc.poll() is None:
            return self.info
        self.close()
        self.key, self.files = key, tempfile.mkdtemp(prefix="kevolve-baselines-", dir=exchange.files_root())
        self.worker = WorkerProcess(options, claim=False)
        stand_in = str(Path(task.dir) / "task.yaml")     # no library: the task's own folder is what it may read
        info = startup.init(self.worker, startup.init_command(task.ref, stand_in, None, self.files, options), options)
        if isinstance(info, protocol.Failed):
            self.close()
            raise HarnessFailed(f"the baseline worker did not start: {info.error}")
        try:
            startup.configure(self.worker, info, options)
        except WorkerDied as e:
            self.close()
            raise HarnessFailed(f"the baseline worker died starting: {e.kind}: {e.detail}") from None
        if (info.confinement or {}).get("landlock") and baseline_cache.enabled(options.cache_dir):
            baseline_cache.seed(self.worker.tmp, options.cache_dir)   # torch.compile's graphs as the node has them
        self.info = info
        return info

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
        if self.files:
            shutil.rmtree(self.files, ignore_errors=True)
        self.worker, self.key, self.files, self.info = None, None, None, None
        self.prepared, self.slowest, self.notes = set(), {}, {}

    # ------------------------------------------------------------------ per judgement
    def pin(self, kernel_worker: WorkerProcess) -> None:
        """Every thread of the baseline worker onto the CPUs the kernel's worker was given (`cpus.claim`: only with
        `Options.threads`; otherwise both may use every CPU): torch and the kernel on the same cores."""
        claim = getattr(kernel_worker, "cpus", None)
        if claim is None or self.worker is None:
            return
        pid = self.worker.pid
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                os.sched_setaffinity(int(tid), claim.cpus)
            except OSError:             # a thread that ended meanwhile
                pass

    def call(self, command: protocol.Command, timeout: float) -> protocol.Reply:
        """`command` in the baseline worker; its death, a timeout or a failed reply is `HarnessFailed`."""
        if self.worker is None:
            raise HarnessFailed("the baseline worker is not running")
        try:
            reply = self.worker.call(command, timeout)
        except WorkerDied as e:
            self.close()
            raise HarnessFailed(f"the baseline worker failed during {command.name}: {e.kind}: {e.detail}") from None
        if isinstance(reply, protocol.Failed):
            self.close()
            raise HarnessFailed(f"the baseline worker failed during {command.name}: {reply.error}")
        return reply


@contextlib.contextmanager
def frozen(kernel_worker: WorkerProcess):
    """The kernel's worker stopped for the block (SIGSTOP to its process group, SIGCONT after, whatever happens);
    yields a function giving the CPU its process burned since every thread showed stopped (or since the wait for that
    ran out): a stopped process burns none."""
    pid, group = kernel_worker.pid, kernel_worker.pgid
    try:
        os.killpg(group, signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        _wait_stopped(pid)
        cpu = outside.CpuClock(pid)
        before, _ = cpu.ms()
        yield lambda: max(0.0, (cpu.ms()[0] or 0.0) - (before or 0.0)) if before is not None else 0.0
    finally:
        try:
            os.killpg(group, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_stopped(pid: int) -> bool:
    """Whether every thread of `pid` shows stopped (`T`/`t`) within `STOP_WAIT_S`."""
    deadline = time.monotonic() + STOP_WAIT_S
    while True:
        try:
            states = [_state(pid, int(t)) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return False
        if states and all(s in ("T", "t", None) for s in states):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0002)


def _state(pid: int, tid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None                      # the thread ended meanwhile


def quiet_bound(burned_ms: float, when: str) -> str | None:
    """The kernel's worker ran nothing while the baselines were timed (it was stopped)."""
    if burned_ms > QUIET_MS:
        return (f"outside clock, quiet bound: the kernel's worker burned {burned_ms:.2f} ms of CPU while it was "
                f"stopped and torch's baselines were timed in the clean worker ({when}) — a thread of the kernel's "
                "that escaped the stop, running beside torch")
    return None
