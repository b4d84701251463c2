"""The worker's PID namespace (`kevolve/judge/worker/pidns.py`): what the worker sees, how its end is relayed, and that
nothing started inside outlives it. The adversarial side (a kernel that looks for the spare worker, a kernel's
child that leaves the process group) is in tests/adversarial/test_cpu.py."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from kevolve.judge import protocol
from kevolve.judge.worker import pidns
from kevolve.judge.options import Options
from kevolve.judge.evaluator.process import PIDNS, WorkerProcess
from kevolve.judge.sandbox import clean_env


def relayed(code: str, env: dict | None = None, python: str = sys.executable, prefix=()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, python, "-s", PIDNS, python, "-c", code], capture_output=True, text=True,
                          env=env or clean_env(), timeout=60)


SEES = ("import os; print(os.environ['KEVOLVE_PIDNS']); "
        "print(os.getpid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")


def holds() -> bool:
    return relayed(SEES).stdout.startswith(pidns.HOLDS + "\n")


needs_namespace = pytest.mark.skipif(not holds(), reason="this machine grants no PID namespace with its own /proc")


@needs_namespace
def test_the_worker_sees_itself_and_its_init_alone():
    """Beside it run this test's process and its parent; inside, /proc holds the init (1) and the worker (2)."""
    out = relayed(SEES)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [pidns.HOLDS, "2 [1, 2]"]


@pytest.mark.parametrize("code, status", [("import sys; sys.exit(7)", 7), ("pass", 0),
                                          ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", -signal.SIGSEGV),
                                          ("import os; os.abort()", -signal.SIGABRT),
                                          ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL)])
def test_the_relay_ends_as_the_worker_ended(code, status):
    """The evaluator reads the relay's end as the worker's: the same exit status, or the same signal (a crash
    verdict names it) — also its own `abort`, which the init of a namespace would have ignored."""
    assert relayed(code).returncode == status


@needs_namespace
def test_a_child_that_left_the_session_dies_with_the_worker():
    """A grandchild that left the worker's session and process group (as a kernel's child can where seccomp is
    missing) is killed when the worker ends: the init exits with it, and the kernel ends its namespace."""
    code = ("import os, sys, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid(); time.sleep(120); os._exit(0)\n"
            "time.sleep(0.3); print(os.readlink('/proc/self/ns/pid'), flush=True)\n")
    out = relayed(code)
    assert out.returncode == 0, out.stderr
    ns = out.stdout.strip()
    assert ns.startswith("pid:[")
    left = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.readlink(f"/proc/{name}/ns/pid") == ns:
                left.append(name)
        except OSError:
            pass
    assert not left, f"processes of the worker's namespace outlived it: {left}"


def test_turned_off_the_relay_becomes_the_worker():
    out = relayed(SEES, env=clean_env({pidns.ENV: "off"}))
    assert out.returncode == 0, out.stderr
    said, seen = out.stdout.splitlines()
    assert said == "none: turned off (KEVOLVE_PIDNS=off)"
    assert int(seen.split()[0]) > 2 and len(seen.split(", ")) > 2     # the machine's pid, and many processes


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
                    reason="needs root to become another user, setpriv and a system python")
def test_an_unprivileged_user_gets_it_through_a_user_namespace():
    """Without CAP_SYS_ADMIN the relay asks for a user namespace mapping the user to itself; where the kernel
    grants unprivileged ones the worker gets its namespace and its /proc as root's does, as the same uid; where
    not, it says why and runs as before."""
    if not os.access(PIDNS, os.R_OK) or not all(os.access(d, os.X_OK) for d in _parents(PIDNS)):
        pytest.skip("the checkout is not readable by another user")
    out = relayed("import os; print(os.environ['KEVOLVE_PIDNS']); print(os.getuid(), os.getpid(), "
                  "sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))",
                  python="/usr/bin/python3",
                  prefix=("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"))
    assert out.returncode == 0, out.stderr
    said, seen = out.stdout.splitlines()
    if said.startswith("none:"):
        assert "user namespace" in said                  # the reason names both refusals
        return
    assert said == pidns.HOLDS and seen == "65534 2 [1, 2]", out.stdout


def _parents(path: str) -> list[str]:
    out, p = [], os.path.dirname(path)
    while p and p != "/":
        out.append(p)
        p = os.path.dirname(p)
    return out


def test_worker_process_reports_the_workers_own_pid():
    """`WorkerProcess.pid` is the worker (for its CPU clocks), not the relay that leads its process group."""
    w = WorkerProcess(Options())
    try:
        w.call(protocol.SetExchange(False), 120)                  # it answered: the worker exists
        with open(f"/proc/{w.pid}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[1:3] == [b"-m", b"kevolve.judge.worker"]
        if holds():
            assert w.pid != w.proc.pid
            with open(f"/proc/{w.pid}/status") as f:
                assert next(line for line in f if line.startswith("NSpid:")).split()[-1] == "2"
    finally:
        assert w.close() is None
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{w.pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{w.pid}")


def test_a_worker_dies_with_its_evaluator():
    """An evaluator killed outright (SIGKILL: no `close`, no process-group kill) takes its worker with it, even one
    busy in a call (so not ended by its stdin's end): the relay dies with the evaluator, the init with the relay,
    and the namespace with the init (parent-death signals)."""
    code = ("import time\n"                     # a worker busy in a call (a hung kernel), not reading its stdin
            "from kevolve.judge.options import Options\n"
            "from kevolve.judge.evaluator.process import WorkerProcess\n"
            "class Busy(WorkerProcess):\n"
            "    def command(self): return ['-c', 'import time; time.sleep(120)']\n"
            "w = Busy(Options()); time.sleep(1.5)\n"
            "print(w.pid, w.proc.pid, flush=True); time.sleep(120)\n")
    evaluator = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        worker, relay = (int(p) for p in evaluator.stdout.readline().split())
        assert os.path.exists(f"/proc/{worker}") and os.path.exists(f"/proc/{relay}")
    finally:
        evaluator.kill()
        evaluator.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in (worker, relay)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(worker) and not _alive(relay), "the worker outlived its evaluator"


def _alive(pid: int) -> bool:
    """A process that exists and is no zombie (a dead child of init not reaped yet is no longer running)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
