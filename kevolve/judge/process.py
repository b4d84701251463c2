"""The evaluator's side of the worker process: start it, speak its JSON-lines protocol, end it.

`WorkerProcess` starts `python -m kevolve.judge.worker` in its own session with an environment holding no
secrets (`sandbox.clean_env`), sends one command at a time with a fresh nonce, and reads one reply.
Guarantees: a reply without the request's nonce (a kernel writing to the protocol pipe), a dead worker or
a command past its timeout raises `WorkerDied` (kind `protocol`, `crash` or `timeout`); the worker's stderr
tail is kept for the verdict's log. Each worker gets a private temporary directory (TMPDIR, HOME and the
torch/Triton/CUDA caches point into it, so nothing one candidate writes is read by the next) that the
worker's confinement (`judge.confine`) makes the only place it may write besides the output exchange.
`close()` always ends the worker's whole process group — also after a normal exit, so a child the kernel
left behind dies with the judgement (confined workers cannot leave the group: setsid/setpgid are denied) —
removes the private directory, and returns how the worker ended if that was not a clean exit when asked
(a death by signal at teardown is a crash verdict, see `harness.judge`).
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
import subprocess
import sys
import tempfile
import threading
import time

from kevolve import ROOT
from kevolve.judge import build as builder
from kevolve.judge.options import Options
from kevolve.judge import cpus
from kevolve.judge.sandbox import clean_env


class WorkerDied(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


class WorkerProcess:
    """A `python -m kevolve.judge.worker` child speaking JSON lines, killed with its process group on a hang."""

    def __init__(self, options: Options):
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
                self.cpus = cpus.claim(options.threads)
                extra.update({cpus.ENV: self.cpus.env(), "OMP_NUM_THREADS": str(options.threads)})
        _not_dumpable()
        self.tmp = tempfile.mkdtemp(prefix="kevolve-worker-")
        open(os.path.join(self.tmp, ".kevolve-worker"), "w").close()
        for var, sub in (("TMPDIR", ""), ("HOME", ""), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                         ("TRITON_CACHE_DIR", "triton"), ("CUDA_CACHE_PATH", "nv"), ("XDG_CACHE_HOME", "cache")):
            extra[var] = os.path.join(self.tmp, sub) if sub else self.tmp
        self.proc = subprocess.Popen([sys.executable, *self.command()], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(extra),
                                     start_new_session=True, cwd=self.tmp)
        self.pgid = self.proc.pid                         # its own session and group, led by the worker
        self.stderr = collections.deque(maxlen=256)       # the tail only: a kernel may print without end
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)

    def command(self) -> list[str]:
        """What the worker's Python runs (tests start a fault-injecting worker through a subclass; nothing in
        the worker's process can change what its evaluator starts)."""
        return ["-m", "kevolve.judge.worker"]

    def _drain(self) -> None:
        for line in iter(self.proc.stderr.readline, b""):
            self.stderr.append(line[:2000].decode(errors="replace"))

    def call(self, cmd: str, timeout: float, **args) -> dict:
        """Sends one command; the reply must carry the request's nonce (a kernel writing to the protocol
        pipe cannot know it), else the worker is killed and the call fails as `protocol`."""
        nonce = secrets.token_hex(16)
        try:
            self.proc.stdin.write((json.dumps({"cmd": cmd, "nonce": nonce, **args}) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerDied("crash", self._died()) from None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerDied("timeout", f"{cmd} did not finish within {timeout:.0f} s")
            if self.sel.select(timeout=min(left, 1.0)):
                line = self.proc.stdout.readline()
                if not line:
                    raise WorkerDied("crash", self._died())
                try:
                    reply = json.loads(line)
                except ValueError:
                    reply = None
                if not isinstance(reply, dict) or reply.pop("nonce", None) != nonce:
                    self.kill()
                    raise WorkerDied("protocol", "something other than the harness wrote to its protocol pipe "
                                     f"during {cmd} (the kernel?): {line[:120]!r}")
                return reply

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
        children keep the group after it exits), and reaps the worker."""
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def close(self) -> str | None:
        """Asks the worker to exit, then ends its process group and removes its private directory. Returns
        None after a clean exit, else how it ended (a signal, a nonzero status, no exit when asked)."""
        ended = None
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"cmd": "exit"}\n')
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
