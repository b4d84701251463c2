"""The outside clock's contract (`kevolve.judge.evaluator.outside`): whatever times the worker reports, the evaluator's
own clocks refute the ones that cannot be true, naming the bound, and accept honest ones.

A kernel that rewrites the worker's timing results in memory is impractical to write, so the evaluator's layer is
tested on its own: the real worker, started through `forging_worker.py` (test support, never imported by kevolve),
forges the times its session reports — the kernel's shrunk tenfold, the kernel's time moved onto other contenders,
more time than passed — and each forgery is rejected at stage `timing` by the bound that sees it. The same
worker forging nothing is accepted, as are the honest kernels of test_clock.py, which run with the outside clock
on. `layernorm_heavy` is a one-configuration task whose baseline and seed repeat the operation, so that the
contenders' calls, not the harness's own work, fill a round (see the module's limits).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kevolve.judge.evaluator import compare as comparison
from kevolve.judge.evaluator import harness, outside, timed
from kevolve.judge import build as builder
from kevolve.judge.evaluator.harness import compare, evaluate
from kevolve.judge.options import Options
from kevolve.judge.worker.session import WARMUP_SETS
from kevolve.task import load_task

HERE = Path(__file__).resolve().parent
HEAVY = HERE.parent / "kernels" / "tasks" / "layernorm_heavy"
# the timing layer alone: the configurations a judgement draws from the domain (a layer of their own,
# tests/adversarial/test_domain_attacks.py) catch some of these kernels first, at correctness
TIMED = Options(target="cpu", shapes="small", baselines=("eager",), reps=5, budget_s=5.0, timeout=60, domain="off")

pytestmark = pytest.mark.usefixtures("private_build_cache")   # tests/conftest.py


@pytest.fixture(scope="module")
def heavy():
    return load_task(HEAVY)


def forging(monkeypatch, spec: str):
    from forging_worker import ForgingWorker
    monkeypatch.setattr(harness, "WorkerProcess", ForgingWorker.of(spec))
    monkeypatch.setattr(comparison, "WorkerProcess", ForgingWorker.of(spec))


# ---------------------------------------------------------------------- the worker lies: end to end
def test_a_worker_that_forges_nothing_is_accepted(heavy, monkeypatch):
    """The fault-injecting worker itself changes no verdict: forging nothing, the heavy seed is accepted, its
    probes are not counted and every timed call is still checked."""
    forging(monkeypatch, "")
    ev = evaluate(heavy, heavy.seed_path("cpu").read_text(), TIMED)
    assert ev.correct, ev.failure
    m = ev.measurements[0]
    # warm-up, counted, and the canary's calls (every call checked, none counted): probes check none
    assert m.kernel.n + m.canary_calls >= TIMED.reps
    assert m.checked_calls == WARMUP_SETS + m.kernel.n + m.canary_calls


FORGERIES = [                      # spare=canary: the canary's calls left alone, so that the outside clock is tried
    ("kernel=0.1,spare=canary", r"outside clock, under bound: .* for the kernel"),     # its own times ÷10
    ("kernel=shift,spare=canary", r"outside clock, under bound: .* for the kernel"),   # ÷10, the rest onto others
    # every call (5 calls: too few to mark, so no canary here: tests/adversarial/test_impossible.py has it)
    pytest.param("kernel=0.1", r"outside clock, under bound: .* for the kernel", marks=pytest.mark.slow),
    # more time than the round took (the sum bound: a law for any worker)
    pytest.param("kernel=1000", r"outside clock, sum bound: the worker reported [\d.]+ ms of timed intervals in a "
                 r"round", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("spec, says", FORGERIES, ids=[(f.values if hasattr(f, "values") else f)[0] for f in FORGERIES])
def test_forged_times_are_rejected_naming_the_bound(heavy, monkeypatch, spec, says):
    forging(monkeypatch, spec)
    ev = evaluate(heavy, heavy.seed_path("cpu").read_text(), TIMED)
    assert not ev.correct and ev.stage == "timing", (ev.stage, ev.failure)
    assert re.search(says, ev.failure), ev.failure
    assert ev.speedup is None and ev.fitness == 0.0


def test_torchs_times_are_not_the_kernels_worker_to_forge(heavy, monkeypatch):
    """Issue 49: torch's baselines are timed in the evaluator's clean baseline worker, which never loads candidate
    code; the kernel's worker times no baseline, so a worker that inflates the baselines' times (×1000, which the
    sum bound refuted when they were timed beside the kernel) has none to inflate: the verdict stands on the clean
    worker's times."""
    forging(monkeypatch, "eager=1000")
    ev = evaluate(heavy, heavy.seed_path("cpu").read_text(), TIMED)
    assert ev.correct, ev.failure
    m = ev.measurements[0]
    assert m.eager is not None and m.clock == {"eager": "wall", "kernel": "wall"}
    assert ev.speedup < 10, ev.speedup          # the heavy seed repeats torch's operation: about 1x, never 1000x


@pytest.mark.parametrize("spec", ["rounds=0", pytest.param("rounds=1000", marks=pytest.mark.slow),
                                  pytest.param("calls=1", marks=pytest.mark.slow)])
def test_a_forged_timing_plan_is_refused(heavy, monkeypatch, spec):
    """The rounds and calls a worker says it will time are the evaluator's to decide: a plan rewritten in the
    worker (no rounds at all: no timed call to check) is a rejection at stage timing, not obeyed."""
    forging(monkeypatch, spec)
    ev = evaluate(heavy, heavy.seed_path("cpu").read_text(), TIMED)
    assert not ev.correct and ev.stage == "timing", (ev.stage, ev.failure)
    assert "the worker's timing plan" in ev.failure and "rewritten in the worker" in ev.failure, ev.failure


def test_a_paired_comparison_refutes_a_forged_kernel(heavy, monkeypatch):
    """In `harness.compare` each kernel is the other's baseline: kernel a shrinking its own times is refuted."""
    forging(monkeypatch, "kernel=0.1")
    a = builder.build(heavy.seed_path("cpu").read_text(), "cpu")
    b = builder.build((HERE.parent / "kernels" / "cpu" / "timing_once.cpp").read_text(), "cpu")
    assert a.ok and b.ok, (a.error, b.error)
    c = compare(heavy, a.lib_path, b.lib_path, Options(target="cpu", shapes="small", reps=5, timeout=60))
    assert c.failure and re.search(r"outside clock, under bound: .* for kernel a", c.failure), c.failure
    assert c.faster is None and c.ratio is None


def test_the_production_worker_has_no_forging_switch():
    """Only tests reach forging_worker.py: no module of the package names it, and the worker the evaluator starts
    is `python -m kevolve.judge.worker`."""
    from kevolve import ROOT
    from kevolve.judge.evaluator.process import WorkerProcess
    assert not [p for p in (ROOT / "kevolve").rglob("*.py") if "forging" in p.read_text()]
    assert WorkerProcess.command(None) == ["-m", "kevolve.judge.worker"]


# ---------------------------------------------------------------------- the bounds, as arithmetic
def rnd(wall, cpu, main, reported=0.0, hollow=(), user=None):
    return outside.Round(wall, cpu, main, reported, hollow, user)


def test_sum_bound_holds_to_the_round_and_no_further():
    assert outside.sum_bound(rnd(100.0, None, None, 100.9), "r") is None          # clock granularity
    why = outside.sum_bound(rnd(100.0, None, None, 110.0), "round 1 of 1")
    assert why and why.startswith("outside clock, sum bound:") and "round 1 of 1" in why
    assert outside.reported_ms({"kernel": [1.0, 2.0], "_null_graph": [(1.0, 1.5)], "latency:kernel": [(0.5, 0.25)]}) \
        == pytest.approx(5.0)


def test_under_bound_uses_the_cpu_the_calls_burned():
    counted = [rnd(500, 400, 300)]
    probe = {"the kernel": rnd(400, 240, 140, hollow=("kernel",))}             # 160 ms of main-thread CPU gone
    under = {"the kernel": ("under",)}
    slack = outside.CPU_NOISE * 140 + outside.SLACK_MS                        # half the probe's main-thread CPU
    honest = outside.check(counted, probe, {"the kernel": 160.0}, under, 2)
    assert honest.failure is None and honest.near is None
    slowed = outside.check(counted, probe, {"the kernel": 250.0}, under, 2)
    assert slowed.failure is None                                              # preempted: wall above CPU is fine
    forged = outside.check(counted, probe, {"the kernel": 16.0}, under, 2)
    assert forged.failure and forged.failure.startswith("outside clock, under bound:")
    near = outside.check(counted, probe, {"the kernel": 160 - 0.75 * slack}, under, 2)
    assert near.failure is None and near.near                                  # within the slack's far half: re-time
    threads = [rnd(500, 400, 210)]                                             # work on other threads: all / cores
    spread = outside.check(threads, {"p": rnd(400, 200, 200)}, {"p": 100 - 1.25 * (outside.CPU_NOISE * 100 + 2)},
                           {"p": ("under",)}, 2)
    assert spread.failure and "200.00 ms of CPU on all its threads (2 cores)" in spread.failure
    blind = outside.check([rnd(500, None, None)], {"p": rnd(400, None, None)}, {"p": 1.0}, {"p": ("under",)}, 2)
    assert blind.failure is None and blind.checks == ()                        # no CPU clock: the bound is skipped


def test_an_excess_in_system_time_alone_is_re_timed_not_rejected():
    """Rounds of the same honest harness work burned 60–430 ms of system time for the same 34,000 page faults on a
    2-core VM (the quick start's first seeds were rejected so, by the side-work and the under bound): the main
    thread's user time must show an excess too. A probe or a counted round heavier in system time only is near
    (timed again; a second near passes); one heavier in user time is rejected as before, and where user time is
    unknown the total decides, as before."""
    tick = 1e3 / outside.TICK_HZ
    clean = (rnd(200, 200, 190, hollow=("kernel", "eager"), user=140), rnd(170, 170, 160, hollow=("kernel", "eager"),
                                                                            user=130))
    counted = [rnd(300, 300, 290, user=200)]
    faulted = rnd(600, 590, 580, hollow=("kernel", "eager"), user=150)        # +390 ms, all of it system time
    parties = {"all contenders": ("over",)}
    sys_only = outside.check(counted, {"all contenders": faulted}, {"all contenders": 10.0}, parties, 2,
                             {"all contenders": clean})
    assert sys_only.failure is None and sys_only.near and "system time only" in sys_only.near
    worked = rnd(600, 590, 580, hollow=("kernel", "eager"), user=150 + 200 + 5 * tick)   # side work: computation
    side = outside.check(counted, {"all contenders": worked}, {"all contenders": 10.0}, parties, 2,
                         {"all contenders": clean})
    assert side.failure and side.failure.startswith("outside clock, side-work bound:")
    unknown = rnd(600, 590, 580, hollow=("kernel", "eager"))
    unread = tuple(rnd(r.wall_ms, r.cpu_ms, r.main_ms, hollow=r.hollow) for r in clean)
    blind = outside.check(counted, {"all contenders": unknown}, {"all contenders": 10.0}, parties, 2,
                          {"all contenders": unread})
    assert blind.failure and "side-work bound" in blind.failure

    probe = {"the kernel": rnd(400, 240, 140, hollow=("kernel",), user=100)}   # 160 ms of main-thread CPU gone
    under = {"the kernel": ("under",)}
    faulted_rounds = [rnd(500, 400, 300, user=110)]                            # ... of which 10 ms user time
    assert outside.check(faulted_rounds, probe, {"the kernel": 16.0}, under, 2).failure is None
    shrunk = [rnd(500, 400, 300, user=100 + 150)]                              # 150 ms of it computation
    forged = outside.check(shrunk, probe, {"the kernel": 16.0}, under, 2)
    assert forged.failure and forged.failure.startswith("outside clock, under bound:")


def test_under_bound_takes_the_heavier_of_the_probes_that_leave_the_kernel_out():
    """A probe that ran light (the shared work's noise) does not charge the difference to the kernel: the probe
    without any call is a second sample of the work without its calls; a probe that keeps its calls is not."""
    counted = [rnd(500, 400, 300)]
    light = rnd(400, 240, 140, hollow=("kernel",))                             # 160 ms of main-thread CPU gone
    under = {"the kernel": ("under",), "all contenders": ("over",)}
    shares = {"the kernel": 60.0, "all contenders": 110.0}
    alone = outside.check(counted, {"the kernel": light}, {"the kernel": 60.0}, {"the kernel": ("under",)}, 2)
    assert alone.failure and alone.failure.startswith("outside clock, under bound:")
    heavy = rnd(420, 330, 230, hollow=("kernel", "eager"))                    # the other sample: 70 ms gone
    both = outside.check(counted, {"the kernel": light, "all contenders": heavy}, shares, under, 2)
    assert both.failure is None and both.checks[0][:4] == ("the kernel", "under", 60.0, 70.0)
    other = rnd(420, 330, 230, hollow=("other",))                             # keeps the kernel's calls: no sample
    mixed = outside.check(counted, {"the kernel": light, "the other kernel": other},
                          {"the kernel": 60.0, "the other kernel": 70.0},
                          {"the kernel": ("under",), "the other kernel": ("under",)}, 2)
    assert mixed.failure and "for the kernel" in mixed.failure


def test_the_cpu_flush_runs_on_the_calling_thread_alone():
    """The CPU clock's cache flush is the calling thread's work, whatever torch's thread pool: a pool's barrier
    spins put up to 17 ms of main-thread CPU on a 2 ms flush on a loaded machine (`timing.CpuClock`)."""
    import os
    import threading
    import time

    import torch

    from kevolve.judge.worker import timing

    def others_ms() -> float:                   # CPU of this process's threads but the calling one
        me, total = threading.get_native_id(), 0.0
        for tid in os.listdir("/proc/self/task"):
            if int(tid) != me:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0]) / 1e6
        return total

    threads = torch.get_num_threads()
    torch.set_num_threads(2)                     # a pool that would share a parallel fill
    try:
        # the rewrite of 2 x LLC (the `llc` knob) is the one a pool would split
        clock = timing.CpuClock(None, "llc")
        torch.ones(1 << 22).add_(1.0)            # the pool exists (and has stopped spinning) before the count
        time.sleep(0.5)
        before = others_ms()
        for _ in range(5):
            clock.wall(lambda: None)
        assert others_ms() - before < 1.0
    finally:
        torch.set_num_threads(threads)
    assert clock.flush.nbytes >= 2 << 20 and (clock.flush == 1.0).all()


def test_over_bound_uses_the_wall_difference():
    counted = [rnd(1000, 0, 0), rnd(1040, 0, 0), rnd(980, 0, 0)]               # median 1000 ms
    probe = {"baselines": rnd(600, 0, 0, hollow=("eager",))}                   # 400 ms of calls gone
    ok = outside.check(counted, probe, {"baselines": 420.0}, {"baselines": ("over",)}, 2)
    assert ok.failure is None and ok.near is None
    slack = outside.WALL_NOISE * 1000 + outside.SLACK_MS                       # half the longer wall
    forged = outside.check(counted, probe, {"baselines": 400 + 1.25 * slack}, {"baselines": ("over",)}, 2)
    assert forged.failure and forged.failure.startswith("outside clock, over bound:")
    assert outside.check(counted, probe, {"baselines": 400 + 0.75 * slack}, {"baselines": ("over",)}, 2).near


def test_the_cpu_clock_reads_another_process():
    """The evaluator reads a worker's CPU time (all threads, and its main thread) from the kernel's accounting:
    what a busy child burned shows, and never more than the wall time times its cores."""
    import subprocess
    import sys
    import time
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline(); x = sum(range(20_000_000))"],
                         stdin=subprocess.PIPE)
    try:
        span = outside.Span(outside.CpuClock(p.pid))
        p.stdin.write(b"go\n")
        p.stdin.flush()
        time.sleep(0.5)
        span.replied()
        seen = span.round({"kernel": [1.0]})
        assert seen.wall_ms >= 500 and seen.reported_ms == 1.0
        assert seen.cpu_ms is not None and seen.main_ms is not None and seen.main_ms > 50
        assert seen.main_ms <= seen.cpu_ms + 5 and seen.cpu_ms <= seen.wall_ms * outside.cores(p.pid) + 5
    finally:
        p.kill()
        p.wait()


# ---------------------------------------------------------------------- on a GPU: the graph clock's probes
@pytest.mark.gpu
@pytest.mark.parametrize("spec, says", [("", None), ("kernel=100000", r"outside clock, sum bound"),
                                         ("kernel=0.2", r"canary: the kernel's calls with [\d.]+ us of known work")])
def test_on_gpu_probes_replay_graphs_of_flushes_and_the_sum_bound_holds(monkeypatch, spec, says):
    """CUDA: a probe replays the graph of flushes in place of the hollow contender's graph; the forging worker
    forging nothing is accepted, device times beyond the round's wall are refuted, and the kernel's graph times
    divided by 5 are caught by the canary's extra rounds. (Since issue 49 torch's baselines are timed in the clean
    baseline worker, so the times inflated here are the kernel's own.) (On CUDA a round's host work dwarfs a graph of
    microsecond calls, so bounds 2 and 3 are decisive only on large configurations.)"""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    task = load_task(HERE.parent / "kernels" / "tasks" / "layernorm_gpu_timing")
    forging(monkeypatch, spec)
    ev = evaluate(task, task.seed_path("cuda").read_text(),
                  Options(target="cuda", shapes="short", baselines=("eager",), reps=30, timeout=60))
    if says is None:
        assert ev.correct, ev.failure
        assert ev.measurements[0].clock == {"kernel": "graph", "eager": "graph"}
    else:
        assert not ev.correct and ev.stage == "timing" and re.search(says, ev.failure), (ev.stage, ev.failure)


@pytest.mark.parametrize("injected, times, correct", [
    pytest.param(["outside clock, under bound: injected"], 2, True,      # a busy machine, once: timed again, fine
                 marks=pytest.mark.slow),
    pytest.param(["outside clock, over bound: injected"] * 2, 2, False,  # twice: the verdict stands
                 marks=pytest.mark.slow),
    (["outside clock, sum bound: injected"], 1, False),                  # a law for any honest worker: no retry
])
def test_a_noisy_bound_is_timed_again_before_it_is_a_verdict(heavy, monkeypatch, injected, times, correct):
    """Bounds 2 and 3 rest on two rounds' CPU or wall times agreeing, which a loaded machine can break for an
    honest worker: their violation is confirmed by a second timing of the configuration (`measure.noisy_bound`).
    Here the first timings of the kernel report the violation instead of their real result."""
    import dataclasses
    real, seen = timed.time_config, []

    def flaky(*args, **kwargs):
        t = real(*args, **kwargs)
        if kwargs.get("kernel", True):
            seen.append(t)
            if len(seen) <= len(injected):
                return dataclasses.replace(t, failure=injected[len(seen) - 1])
        return t
    monkeypatch.setattr(timed, "time_config", flaky)
    ev = evaluate(heavy, (heavy.dir / "seeds" / "cpu.cpp").read_text(), TIMED)
    assert len(seen) == times and ev.correct == correct, (len(seen), ev.failure)
    if not correct:
        assert ev.failure.endswith(injected[-1]), ev.failure


def test_what_a_cuda_worker_may_write_under_proc_leaves_the_outside_clock_alone():
    """A CUDA worker may write its own threads' files under /proc (`confine.OWN_THREADS`: the driver names its
    threads there). The attack that grant invites: reset the CPU time the outside clock reads, by writing each
    thread's `sched` (which zeroes its scheduler statistics) and renaming it. The run time the clock reads
    (`schedstat`'s first field, and the process's CPU clock) is not among what that resets."""
    import subprocess
    import sys
    code = ("import os, sys, time\n"
            "t = time.process_time()\n"
            "while time.process_time() - t < 0.3: pass\n"
            "print('ready', flush=True); sys.stdin.readline()\n"
            "for tid in os.listdir('/proc/self/task'):\n"
            "    for name, text in (('sched', '0'), ('comm', 'idle')):\n"
            "        try: open(f'/proc/self/task/{tid}/{name}', 'w').write(text)\n"
            "        except FileNotFoundError: pass  # sched: a kernel without CONFIG_SCHED_DEBUG\n"
            "print('written', flush=True); sys.stdin.readline()\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        clock = outside.CpuClock(p.pid)
        total, main = clock.ms()
        assert total is not None and main is not None and main >= 250, (total, main)
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "written"
        after_total, after_main = clock.ms()
        assert after_total >= total and after_main >= main, ((total, main), (after_total, after_main))
    finally:
        p.kill()
        p.wait()
