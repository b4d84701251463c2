"""The evaluator's side of the worker process: start it, speak its JSON-lines protocol, end it.

`WorkerProcess` starts `python -m kevolve.judge.worker` in its own session with an environment holding no
secrets (`sandbox.clean_env`), sends one command at a time with a fresh nonce, and reads one reply.
Guarantees: a reply without the request's nonce (a kernel writing to the protocol pipe), a dead worker or
a command past its timeout raises `WorkerDied` (kind `protocol`, `crash` or `timeout`) and, for the last
two, the whole process group is killed; the worker's stderr tail is kept for the verdict's log.
Not guaranteed: anything about what the worker computed — `checks` decides that.
"""
from __future__ import annotations

import collections
import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time

from kevolve import ROOT
from kevolve.judge import build as builder
from kevolve.judge.options import Options
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
        if options.target == "cpu":
            # torch's OpenMP and the kernel's (the system libgomp) are two thread pools; spinning ones
            # starve each other on few cores and time each other's spin, not work
            extra.setdefault("OMP_WAIT_POLICY", os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
        self.proc = subprocess.Popen([sys.executable, "-m", "kevolve.judge.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(extra),
                                     start_new_session=True, cwd=tempfile.gettempdir())
        self.stderr = collections.deque(maxlen=256)       # the tail only: a kernel may print without end
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)

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
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"cmd": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.sel.close()


def _physical_gpu(index: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible.split(",")[index] if visible else str(index)


def _tail(text: str, lines: int = 12) -> str:
    keep = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return (":\n" + "\n".join(keep)) if keep else ""
