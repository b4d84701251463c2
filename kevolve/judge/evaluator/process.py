"""The evaluator's side of the worker process: start it, speak its JSON-lines protocol, end it.

`WorkerProcess` starts `python -m kevolve.judge.worker` in its own session with an environment holding no
secrets (`sandbox.clean_env`), sends one command at a time with a fresh nonce, and reads one reply.
Guarantees: a reply without the request's nonce (a kernel writing to the protocol pipe), a dead worker or
a command past its timeout raises `WorkerDied` (kind `protocol`, `crash` or `timeout`); the worker's stderr
tail is kept for the verdict's log. Each worker gets a private temporary directory (TMPDIR, HOME and the
torch/Triton/CUDA caches point into it, so nothing one candidate writes is read by the next) that the
worker's confinement (`judge.worker.confine`) makes the only place it may write besides the output exchange.
`close()` always ends the worker's whole process group — also after a normal exit, so a child the kernel
left behind dies with the judgement — then every process the worker's lineage left outside the group
(`_end_orphans`: where seccomp is missing a kernel's child can setsid or setpgid; this process is their
child subreaper, so they become its children when the worker dies, and the worker's mark, `confine._mark`,
tells them from any other child), removes the private directory, and returns how the worker ended if that
was not a clean exit when asked (a death by signal at teardown is a crash verdict, see `harness.judge`).
Each worker also gets a unix socket on which its seal's seccomp listener comes back (`confine.seal`); a
`judge.evaluator.evidence.Supervisor` here answers every call the confinement refuses after the kernel loads and keeps
it (`forbidden()`), which the harness turns into a rejection.
Not guaranteed: anything about what the worker computed — `checks` decides that.
"""
from __future__ import annotations

import collections
import json
import os
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from kevolve import ROOT
from kevolve.judge import build as builder
from kevolve.judge import protocol
from kevolve.judge.protocol import WorkerDied  # noqa: F401 (importers name it here too)
from kevolve.judge.worker.confine import EVIDENCE_ENV, LIMITS_ENV
from kevolve.judge.evaluator.evidence import Supervisor
from kevolve.judge.options import Options
from kevolve.judge import cpus
from kevolve.judge.worker import pidns
from kevolve.judge.sandbox import clean_env




class WorkerProcess:
    """A `python -m kevolve.judge.worker` child speaking JSON lines, killed with its process group on a hang."""

    def __init__(self, options: Options, claim: bool = True):
        """`claim=False` (the clean baseline worker, `judge.evaluator.baseline_worker`): no CPUs claimed or pinned
        at start — its evaluator pins it to each judgement's kernel worker's CPUs — but the same thread count."""
        extra = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                 "CUDA_HOME": builder.cuda_home(), "PYTHONUNBUFFERED": "1"}
        if options.gpu is not None:
            extra["CUDA_VISIBLE_DEVICES"] = _physical_gpu(options.gpu)
        self.cpus: cpus.Claim | None = None
        if options.target == "cpu":
            # torch's OpenMP and the kernel's (the system libgomp) are two thread pools; spinning ones
            # starve each other on few cores and time each other's spin, not work
            extra.setdefault("OMP_WAIT_POLICY", os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
            if options.threads:            # the kernel held to the threads torch gets (kevolve/judge/cpus.py)
                extra["OMP_NUM_THREADS"] = str(options.threads)
                if claim:
                    self.cpus = cpus.claim(options.threads)
                    extra[cpus.ENV] = self.cpus.env()
        _not_dumpable()
        _subreaper()
        self.tmp = tempfile.mkdtemp(prefix="kevolve-worker-")
        open(os.path.join(self.tmp, ".kevolve-worker"), "w").close()
        for var, sub in (("TMPDIR", ""), ("HOME", ""), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                         ("TRITON_CACHE_DIR", "triton"), ("CUDA_CACHE_PATH", "nv"), ("XDG_CACHE_HOME", "cache")):
            extra[var] = os.path.join(self.tmp, sub) if sub else self.tmp
        extra[LIMITS_ENV] = json.dumps(self.limits(options))
        extra[pidns.PARENT_ENV] = str(os.getpid())            # the relay dies with this process (`pidns.py`)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        extra[EVIDENCE_ENV] = str(theirs.fileno())          # the seal's listener comes back on it (`evidence`)
        with _LOCK:                                       # no orphan sweep sees it before it is known as ours
            try:
                self.proc = subprocess.Popen([sys.executable, "-s", PIDNS, sys.executable, *self.command()],
                                             stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(extra),
                                             start_new_session=True, cwd=self.tmp, pass_fds=(theirs.fileno(),))
            finally:
                theirs.close()
            _LIVE.add(self.proc.pid)
        self.evidence = Supervisor(ours)
        self.pgid = self.proc.pid                         # its own session and group, led by the relay (pidns)
        self._pid: int | None = None
        self.stderr = collections.deque(maxlen=256)       # the tail only: a kernel may print without end
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)

    @property
    def pid(self) -> int:
        """The worker's own pid as this process sees it (its CPU clocks, `outside`), once it has answered a call:
        the relay's (`pidns.py`) where it became the worker, else its init's child that is PID 2 inside."""
        if self._pid is None:
            self._pid = _worker_in(self.proc.pid)
        return self._pid or self.proc.pid                 # not found (yet): asked again next time

    @staticmethod
    def limits(options: Options) -> dict:
        """The cpu worker's rlimits, which its confinement applies before any kernel loads (`confine._rlimits`):
        CPU seconds from the judgement's timeout (`cpu_seconds`: 10 minutes for torch's import and the
        baselines' compilation plus 10× the timeout, on every CPU the worker may use; SIGXCPU, and SIGKILL
        5 s later), and its address space (`address_space`: 16 GiB plus 256 MiB per CPU for two thread pools'
        stacks and allocator arenas, or half the machine's memory where that is more; a torch CPU worker that
        compiled its baselines maps about 5 GiB, see README). The CUDA target gets neither: the CUDA runtime
        reserves address space far beyond any such bound, and a synchronising host thread spins."""
        if options.target != "cpu":
            return {}
        n = options.threads or len(os.sched_getaffinity(0)) or 1
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return {"cpu_seconds": int(n * (600 + 10 * options.timeout)),
                "address_space": max((16 << 30) + n * (256 << 20), ram // 2)}

    def command(self) -> list[str]:
        """What the worker's Python runs (tests start a fault-injecting worker through a subclass; nothing in
        the worker's process can change what its evaluator starts)."""
        return ["-m", "kevolve.judge.worker"]

    def _drain(self) -> None:
        for line in iter(self.proc.stderr.readline, b""):
            self.stderr.append(line[:2000].decode(errors="replace"))

    def call(self, command: protocol.Command, timeout: float) -> protocol.Reply:
        """Sends one command and returns its typed reply (`judge.protocol.decode_reply`): it must carry the
        request's nonce (a kernel writing to the protocol pipe cannot know it) and the fields its type declares,
        else the worker is killed and the call fails as `protocol`. A command that raised in the worker is a
        `protocol.Failed` reply, not an exception."""
        nonce = secrets.token_hex(16)
        if command.loads_kernel:
            self.evidence.loading()                       # from here on, what the worker tries is the kernel's
        try:
            self.proc.stdin.write(protocol.encode(command, nonce))
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerDied("crash", self._died()) from None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerDied("timeout", f"{command.name} did not finish within {timeout:.0f} s")
            if self.sel.select(timeout=min(left, 1.0)):
                line = self.proc.stdout.readline()
                if not line:
                    raise WorkerDied("crash", self._died())
                try:
                    reply = protocol.decode_reply(line, command, nonce)
                except protocol.ProtocolError as e:
                    self.kill()
                    raise WorkerDied("protocol", "something other than the harness wrote to its protocol pipe "
                                     f"during {command.name} (the kernel?), or the worker's reply was malformed "
                                     f"({e}): {line[:120]!r}") from None
                if isinstance(reply, protocol.Started) and isinstance(reply.confinement, dict):
                    self.evidence.policy(reply.confinement)
                return reply

    def forbidden(self) -> str | None:
        """What the kernel tried after it was loaded and the confinement refused (`judge.evaluator.evidence`), as the
        Linux kernel told this process; None if nothing. Complete once the worker has ended (`close`)."""
        return self.evidence.found()

    def _died(self) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        self._drainer.join(timeout=2)
        why = f"killed by signal {signal.Signals(-code).name}" if code and code < 0 else f"exit status {code}"
        return f"the worker process died ({why}){_tail(self.stderr_text())}"

    def stderr_text(self) -> str:
        return "".join(self.stderr)

    def kill(self) -> None:
        """Kills the worker's whole process group, whether or not the worker itself is still alive (its
        children keep the group after it exits), reaps the worker, then ends whatever its lineage left
        outside the group (`_end_orphans`)."""
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.evidence.close()                             # the listener has told all it will
        with _LOCK:
            _LIVE.discard(self.proc.pid)
            _end_orphans()

    def close(self) -> str | None:
        """Asks the worker to exit, then ends its process group and removes its private directory. Returns
        None after a clean exit, else how it ended (a signal, a nonzero status, no exit when asked)."""
        ended = None
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(protocol.encode(protocol.Exit(), None))
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                ended = "the worker did not exit when asked"
        code = self.proc.poll()
        self.kill()
        if ended is None and code is not None and code != 0:
            ended = (f"the worker was killed by signal {signal.Signals(-code).name} at teardown" if code < 0
                     else f"the worker exited with status {code} at teardown")
        self.sel.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.cpus is not None:
            self.cpus.release()
        return ended


# started as a script: see there
PIDNS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "worker", "pidns.py")


def _worker_in(relay: int) -> int | None:
    """The worker's pid under `relay` (see `WorkerProcess.pid`): the relay's own where it exec'd the worker (no
    namespace, or the relay is gone); None where the namespace's worker is not found (not started yet)."""
    try:
        if os.readlink(f"/proc/{relay}/ns/pid") == os.readlink(f"/proc/{relay}/ns/pid_for_children"):
            return relay                                  # no namespace: the relay exec'd the worker
    except OSError:
        return relay
    table = _processes()
    for init, (_, parent, _) in table.items():
        if parent == relay:
            for pid, (_, p, _) in table.items():
                if p == init and _inner_pid(pid) == 2:
                    return pid
    return None


def _inner_pid(pid: int) -> int | None:
    """A process's pid in its innermost PID namespace (the last of /proc/PID/status's NSpid)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return None


PR_SET_CHILD_SUBREAPER = 36
_LIVE: set[int] = set()                 # this process's workers (spares included) not yet reaped
_LOCK = threading.Lock()                # held while a worker starts and while orphans are swept
_SUBREAPER: bool | None = None


def _subreaper() -> bool:
    """Makes this process (the evaluator: the CLI, a Ray actor) its workers' child subreaper, once for its life:
    a process left behind by a worker's lineage — a kernel's child that left the worker's process group,
    possible where seccomp is missing — becomes this process's child when its parent dies, instead of init's,
    so `_end_orphans` can find it, kill it and reap it. Not inherited by this process's other children. It also
    adopts the orphans of every other process tree this process started, and leaves them as they are, zombies
    once they end (docs/decisions/judge.md, "The evaluator is a subreaper"; `tests/conftest.py`)."""
    global _SUBREAPER
    if _SUBREAPER is None:
        import ctypes
        try:
            _SUBREAPER = ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _SUBREAPER = False
    return _SUBREAPER


def _end_orphans(limit_s: float = 5.0) -> int:
    """Kills and reaps every process a worker of this process left behind, with all its descendants; returns
    how many of this process's children it reaped. A child of this process is one only if it is no live
    worker of ours (`_LIVE`), is in a session other than ours (a worker starts its own session, and no
    descendant of it can ever join ours) and carries the mark every confined worker gives itself before a
    kernel loads (`confine._mark`: a hard RLIMIT_RTTIME under this process's own, which an unprivileged
    process can lower but never raise) — so this process's other children (compilers, Ray's, the user's)
    are never touched. Repeats until none is left (each kill hands the killed process's children to this
    one), for at most `limit_s` seconds. Sweeps nothing where this process is no subreaper or its own
    RLIMIT_RTTIME leaves no room for a mark. Called with `_LOCK` held, so no worker starts meanwhile."""
    own = _rttime_hard("self")
    if not _SUBREAPER or not own:
        return 0
    me, session = os.getpid(), os.getsid(0)
    reaped, deadline = 0, time.monotonic() + limit_s
    while True:
        table = _processes()
        roots = [p for p, (_, parent, sid) in table.items()
                 if parent == me and p not in _LIVE and sid != session and _marked(p, own)]
        if not roots or time.monotonic() > deadline:
            return reaped
        below: dict[int, list[int]] = {}
        for p, (_, parent, _) in table.items():
            below.setdefault(parent, []).append(p)
        tree, todo = set(), list(roots)
        while todo:
            p = todo.pop()
            if p not in tree:
                tree.add(p)
                todo += below.get(p, [])
        for p in tree:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for p in roots:
            try:
                done, _ = os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                continue
            if done:
                reaped += 1
        time.sleep(0.005)


def _processes() -> dict[int, tuple[str, int, int]]:
    """Every process's state, parent and session, from /proc/<pid>/stat."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            out[int(name)] = (fields[0].decode(), int(fields[1]), int(fields[3]))
        except (OSError, IndexError, ValueError):
            pass                                      # ended meanwhile
    return out


def _marked(pid: int, own: float) -> bool:
    """A hard RLIMIT_RTTIME under this process's own: a confined worker's lineage (`confine._mark`)."""
    hard = _rttime_hard(pid)
    return hard is not None and hard < own


def _rttime_hard(pid: int | str) -> float | None:
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max realtime timeout"):
                    hard = line.split()[4]
                    return float("inf") if hard == "unlimited" else float(hard)
    except (OSError, IndexError, ValueError):
        pass
    return None


def _not_dumpable() -> None:
    """The evaluator itself: no other process of its user may open its /proc/<pid>/fd (the pipes to every
    worker, the spare's included) — a confined worker is also kept out by Landlock."""
    import ctypes
    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)          # PR_SET_DUMPABLE 0
    except (OSError, AttributeError):
        pass


def _physical_gpu(index: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible.split(",")[index] if visible else str(index)


def _tail(text: str, lines: int = 12) -> str:
    keep = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return (":\n" + "\n".join(keep)) if keep else ""
