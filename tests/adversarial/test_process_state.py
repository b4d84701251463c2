"""An attempt, and a failure, is charged only to the kernel that made it (issue 49): what a kernel sets for its own
process — the OpenMP thread count it shares with torch, the rounding mode, flush-to-zero and denormals-are-zero — is
its own business inside its call, and never turns into torch's recompile (a vfork the confinement refuses, once
charged to the kernel), into inputs the harness drew under the kernel's rounding mode (a kernel rejected for
"modifying" them), or into baseline times that moved.

Two layers hold it: torch's baselines are compiled and timed in the evaluator's clean baseline worker
(`judge.evaluator.baseline_worker`), and the kernel's worker puts its own process state back after every call of
candidate code (`judge.worker.state`). Each kernel here checks at entry that its call starts in the harness's state
and prints a `PROBE` line where it does not.
"""
from __future__ import annotations

import ctypes
import dataclasses
import subprocess
from pathlib import Path

import pytest

from kevolve.judge.evaluator.harness import evaluate, judge
from kevolve.judge import build as builder
from kevolve.judge.evaluator.reuse import Reuse
from kevolve.judge.options import Options

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parent / "kernels" / "cpu"
# both baselines: the vfork of issue 49 was torch.compile's recompile, on a thread count the kernel had changed
TIMED = Options(target="cpu", shapes="small", baselines=("eager", "compile"), reps=5, budget_s=0.05, timeout=60)
FAST = Options(target="cpu", shapes="small", time_kernel=False, timeout=30)
HONEST = ("good_threads_small.cpp", "good_rounding_upward.cpp", "good_ftz_daz.cpp")

pytestmark = pytest.mark.usefixtures("private_build_cache")   # tests/conftest.py


@pytest.mark.parametrize("name", HONEST)
def test_kernels_that_change_their_process_state_are_checked_on_their_own_work(tiny, name):
    """Each kernel sets its state and leaves it set; each is correct on every configuration, and each of its calls
    started in the harness's state (no `PROBE` line). Without the restore the thread count and the FPU flags showed
    at the next call's entry, and the rounding mode made the worker draw other inputs than the evaluator."""
    ev = evaluate(tiny, (KERNELS / name).read_text(), FAST)
    assert ev.correct, ev.failure
    assert "PROBE" not in ev.log, [ln for ln in ev.log.splitlines() if "PROBE" in ln][:3]


@pytest.mark.slow     # torch.compile's baselines compiled from an empty cache: 1-3 minutes on 2 cores
def test_kernels_that_change_their_process_state_are_judged_on_their_own_work(tiny_one_per_shape):
    """Each kernel sets its state and leaves it set; each is accepted, timed against both baselines (torch.compile's
    recompile on a changed thread count was the vfork of issue 49), with no attempt charged to it, and each of its
    calls started in the harness's state (no `PROBE` line)."""
    reuse = Reuse(TIMED, reference_bytes=1 << 28, baseline_refresh_s=0)
    try:
        for name in HONEST:
            built = builder.build((KERNELS / name).read_text(), "cpu")
            assert built.ok, built.error
            ev = judge(tiny_one_per_shape, built.lib_path, TIMED, reuse=reuse)
            assert ev.correct and ev.stage == "done", (name, ev.stage, ev.failure)
            timed = [m for m in ev.measurements if m.kernel is not None]
            assert timed and all(m.eager is not None and m.compile is not None for m in timed), (name, ev.failure)
            assert "PROBE" not in ev.log, (name, [ln for ln in ev.log.splitlines() if "PROBE" in ln])
    finally:
        reuse.close()


def test_a_setting_that_makes_its_answer_wrong_is_rejected_for_the_wrong_answer(tiny):
    """Flush-to-zero under its own float32 arithmetic through denormals: its variance is 0 — the wrong answer, and
    the verdict says so (the output outside tolerance), nothing else."""
    ev = evaluate(tiny, (KERNELS / "ftz_scaled_variance.cpp").read_text(), FAST)
    assert not ev.correct and ev.stage == "correctness", (ev.stage, ev.failure)
    assert "outside tolerance" in ev.failure, ev.failure
    twin = (KERNELS / "ftz_scaled_variance.cpp").read_text().replace("_mm_setcsr(_mm_getcsr() | 0x8040);", "")
    # the twin is right on the listed configurations, not on the whole domain (its 2^-70 scale leaves small
    # deviations' squares in the denormals, a few bits short): compared on the listed ones, where the flags alone
    # make the difference
    listed = dataclasses.replace(FAST, domain="off")
    assert evaluate(tiny, twin, listed).correct, "its twin without the flags must be right, or this proves nothing"
    assert not evaluate(tiny, (KERNELS / "ftz_scaled_variance.cpp").read_text(), listed).correct


POOL = r"""
#include <fenv.h>
#include <omp.h>
#include <xmmintrin.h>
/* Upward rounding and FTZ|DAZ on `n` threads of the pool, and one thread for the next regions. */
void set_everywhere(int n) {
    #pragma omp parallel num_threads(n)
    { fesetround(FE_UPWARD); _mm_setcsr(_mm_getcsr() | 0x8040); }
    omp_set_num_threads(1);
}
/* How many of `n` threads of the pool are not in the default state (to-nearest, no FTZ/DAZ). */
int off_state(int n) {
    int off = 0;
    #pragma omp parallel num_threads(n) reduction(+ : off)
    off = fegetround() != FE_TONEAREST || (_mm_getcsr() & 0x8040);
    return off;
}
"""


def test_the_worker_puts_the_fpu_state_and_thread_count_back_on_the_pool(tmp_path):
    """`judge.worker.state` with the evictor's library: what a kernel set on the calling thread and on the OpenMP
    pool's threads (one libgomp, shared with torch) is put back by one `restore`; torch's thread count too."""
    import torch
    from kevolve.judge.worker import evict
    from kevolve.judge.worker.state import HarnessState
    path = evict.library()
    assert path, "no evictor library here"
    threads = torch.get_num_threads()
    state = HarnessState(evict.Evictor(path).lib)
    assert state.native is not None, "the evictor's library was built without OpenMP"
    src, lib = tmp_path / "pool.c", tmp_path / "pool.so"
    src.write_text(POOL)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-fopenmp", "-o", str(lib), str(src), "-lm"], check=True)
    pool = ctypes.CDLL(str(lib))
    try:
        pool.set_everywhere(threads)             # the harness's pool: the threads torch's regions use
        assert torch.get_num_threads() == 1 and pool.off_state(threads) == threads
        state.restore()
        assert torch.get_num_threads() == threads and pool.off_state(threads) == 0
    finally:
        torch.set_num_threads(threads)
        ctypes.CDLL(None).fesetround(0)
