"""The clean baseline worker (`judge.evaluator.baseline_worker`, issue 49): torch's baselines compiled and timed in a
worker no candidate code reaches, on the kernel worker's CPUs, with the kernel's worker stopped meanwhile — and a
worker that burns CPU while it should be stopped named by the quiet bound."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kevolve.judge import build as builder
from kevolve.judge import protocol
from kevolve.judge.cpus import Claim
from kevolve.judge.evaluator import baseline_worker
from kevolve.judge.evaluator.baseline_worker import BaselineWorker, frozen, quiet_bound
from kevolve.judge.evaluator.harness import judge
from kevolve.judge.evaluator.process import WorkerProcess
from kevolve.judge.evaluator.reuse import Reuse
from kevolve.judge.options import Options
from kevolve.task import load_task

HERE = Path(__file__).resolve().parent
TINY = HERE.parent / "kernels" / "tasks" / "layernorm_tiny"
TIMED = Options(target="cpu", shapes="small", baselines=("eager",), reps=5, budget_s=0.05, timeout=60)


class Spinner:
    """A process that spins on its main thread, in a session of its own (what a worker's group looks like)."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        self.pid = self.pgid = self.proc.pid
        time.sleep(0.2)

    def close(self):
        os.killpg(self.pgid, signal.SIGKILL)
        self.proc.wait()


def test_a_stopped_worker_burns_nothing_and_one_left_running_is_named(monkeypatch):
    spinner = Spinner()
    try:
        with frozen(spinner) as burned:
            time.sleep(0.3)
            still = burned()
        assert still < baseline_worker.QUIET_MS and quiet_bound(still, "round 1") is None
        assert spinner.proc.poll() is None                           # and it runs again after
        real = os.killpg
        monkeypatch.setattr(os, "killpg", lambda g, s: None if s == signal.SIGSTOP else real(g, s))
        monkeypatch.setattr(baseline_worker, "STOP_WAIT_S", 0.0)
        with frozen(spinner) as burned:                              # the stop fails: its thread runs beside torch
            time.sleep(0.3)
            running = burned()
        why = quiet_bound(running, "round 1")
        assert running > 100 and why and why.startswith("outside clock, quiet bound:"), (running, why)
    finally:
        spinner.close()


def test_the_baseline_worker_is_pinned_to_the_kernel_workers_cpus():
    sleeper = subprocess.Popen([sys.executable, "-c", "import threading, time; "
                                "[threading.Thread(target=time.sleep, args=(30,)).start() for _ in range(2)]; "
                                "time.sleep(30)"])
    try:
        time.sleep(0.3)
        bw = BaselineWorker()
        bw.worker = type("W", (), {"pid": sleeper.pid})()
        kernel_worker = type("K", (), {"cpus": Claim((min(os.sched_getaffinity(0)),), False)})()
        bw.pin(kernel_worker)
        for tid in os.listdir(f"/proc/{sleeper.pid}/task"):
            assert os.sched_getaffinity(int(tid)) == {min(os.sched_getaffinity(0))}
        bw.worker = None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_no_candidate_code_reaches_the_baseline_worker(private_build_cache, monkeypatch):
    """A judgement with baselines timed: the baseline worker is never sent a library or a kernel's call, and the
    kernel's worker compiles no baseline; the baseline worker outlives the judgement (kept warm) and not the Reuse."""
    sent: list[tuple[int, str]] = []
    real = WorkerProcess.call

    def spy(self, command, timeout):
        sent.append((id(self), command.name))
        return real(self, command, timeout)
    monkeypatch.setattr(WorkerProcess, "call", spy)
    task = load_task(TINY)
    built = builder.build((TINY / "seeds" / "cpu.cpp").read_text(), "cpu")
    assert built.ok, built.error
    reuse = Reuse(TIMED, 1 << 28, 0)
    try:
        ev = judge(task, built.lib_path, TIMED, reuse=reuse)
        assert ev.correct and all(m.eager is not None for m in ev.measurements if m.kernel is not None), ev.failure
        bw = reuse.baseline.worker
        assert bw is not None and bw.proc.poll() is None
        theirs = {name for who, name in sent if who == id(bw)}
        loaded = {who for who, name in sent if name == "load"}               # the kernel's worker
        kernels = {name for who, name in sent if who in loaded}
        candidate = {c.name for c in (protocol.Load, protocol.LoadOther, protocol.Check, protocol.Describe,
                                      protocol.LoadDevice)}
        assert theirs and not theirs & candidate, theirs
        assert {"prepare", "time_setup", "time_round"} <= theirs
        assert len(loaded) == 1 and "prepare" not in kernels, kernels
    finally:
        reuse.close()
    assert reuse.baseline.worker is None


@pytest.mark.parametrize("failure", ["outside clock, quiet bound: x"])
def test_a_quiet_bound_is_timed_again_before_it_is_a_verdict(failure):
    from kevolve.judge.evaluator.measure import noisy_bound
    assert noisy_bound(failure)
