"""The harness on a CUDA GPU: seeds are correct, work hidden on a side stream is timed, an illegal address
or a GPU hang is a verdict (and the next evaluation is judged normally), and robust-kbench's torch-extension
format meets the same checks. Skipped where torch sees no GPU."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kevolve.judge import build as builder
from kevolve.judge.harness import evaluate, judge
from kevolve.judge.options import Options
from kevolve.task import list_tasks, load_task

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

HERE = Path(__file__).resolve().parent.parent          # tests/
CUDA_KERNELS = HERE / "kernels" / "cuda"
TIMING_TASK = HERE / "kernels" / "tasks" / "layernorm_gpu_timing"
CHECK = Options(target="cuda", shapes="small", time_kernel=False, timeout=60)


def kernel(name: str) -> str:
    return (CUDA_KERNELS / name).read_text()


@pytest.fixture(scope="module")
def layernorm():
    return load_task("layernorm_fwd")


@pytest.fixture
def torch_cuda_home(monkeypatch):
    """torch-ABI builds need a CUDA_HOME holding include/ and lib64/ (see test_build: cuda_home behind a wrapper)."""
    if not (Path(builder.cuda_home()) / "include" / "cuda_runtime.h").exists():
        monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda")


def assert_seed_correct(task) -> None:
    ev = evaluate(task, task.seed_path("cuda").read_text(), CHECK)
    assert ev.correct, ev.failure
    assert ev.stage == "done" and len(ev.measurements) == len(task.configs("small"))


# (a) every task's CUDA seed ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list_tasks())
def test_cuda_seed_is_correct(name):
    task = load_task(name)                       # a task that does not load is a failure here, not a skip
    if "cuda" not in task.seeds:
        pytest.skip(f"task {name} has no CUDA seed")
    assert_seed_correct(task)


# (b) work on a side stream must not look faster ------------------------------------------------------
TIMING = Options(target="cuda", baselines=("eager",), reps=100, budget_s=0.5, timeout=60)


def test_side_stream_work_is_timed():
    """A kernel that launches on a stream of its own and returns at once is timed like its twin on the given
    stream (B=8, N=4M: milliseconds, far longer than the harness's L2 flush)."""
    task = load_task(TIMING_TASK)
    options = Options(**{**TIMING.__dict__, "shapes": "long"})
    given = evaluate(task, kernel("given_stream.cu"), options)
    side = evaluate(task, kernel("side_stream.cu"), options)
    assert given.correct, given.failure
    assert side.correct, side.failure            # the harness synchronises the device before reading outputs
    g, s = given.measurements[0].kernel, side.measurements[0].kernel
    assert g is not None and s is not None
    print(f"given stream {g}, side stream {s}")
    assert s.median >= 0.8 * g.median, f"side stream {s} vs given stream {g}"


# (c) an illegal address is a verdict -------------------------------------------------------------------
def test_illegal_address_is_a_crash_then_the_next_evaluation_is_normal(layernorm):
    ev = evaluate(layernorm, kernel("illegal_address.cu"), CHECK)
    assert not ev.correct and ev.stage == "correctness"
    assert "crash" in ev.failure or "illegal" in ev.failure, ev.failure
    assert_seed_correct(layernorm)


# (d) robust-kbench's torch-extension format -------------------------------------------------------------
@pytest.mark.slow
def test_torch_extension_kernel_is_correct(layernorm, torch_cuda_home):
    ev = evaluate(layernorm, kernel("rkb_layernorm_fwd.cu"), Options(**{**CHECK.__dict__, "abi": "torch"}))
    assert ev.correct, ev.failure
    assert ev.abi == "torch" and len(ev.measurements) == len(layernorm.configs("small"))


@pytest.mark.slow
def test_torch_extension_unwritten_output_is_nan(layernorm, torch_cuda_home):
    ev = evaluate(layernorm, kernel("rkb_layernorm_fwd_unwritten.cu"), Options(**{**CHECK.__dict__, "abi": "torch"}))
    assert not ev.correct and ev.stage == "correctness"
    assert "NaN" in ev.failure and "not written" in ev.failure, ev.failure


# (e) a kernel that never finishes on the GPU ------------------------------------------------------------
def test_gpu_hang_is_a_timeout_then_the_next_evaluation_is_normal(layernorm):
    ev = evaluate(layernorm, kernel("hang.cu"), Options(**{**CHECK.__dict__, "timeout": 20}))
    assert not ev.correct and ev.stage == "correctness"
    assert "timeout" in ev.failure, ev.failure
    assert_seed_correct(layernorm)


# (f) an evaluator's Reuse across candidates on the GPU ---------------------------------------------------
def test_reuse_across_candidates_keeps_verdicts_on_gpu(layernorm):
    """A search's evaluator judges many libraries with one Reuse: after an illegal address (a dead CUDA
    context in that worker) the spare worker judges the next candidate normally, and cached references
    and baselines give the verdicts a fresh judgement gives."""
    from kevolve.judge.reuse import Reuse
    options = Options(target="cuda", shapes="small", reps=10, budget_s=0.05, timeout=60, time_inits="first")
    reuse = Reuse(options, 4 << 30, 3600)

    def judged(src: str):
        built = builder.build(src, "cuda")
        assert built.ok, built.error
        return judge(layernorm, built.lib_path, options, reuse=reuse)
    try:
        seed = layernorm.seed_path("cuda").read_text()
        first = judged(seed)
        bad = judged(kernel("illegal_address.cu"))
        again = judged(seed)
    finally:
        reuse.close()
    assert first.correct, first.failure
    assert not bad.correct and ("crash" in bad.failure or "illegal" in bad.failure), bad.failure
    assert again.correct, again.failure
    assert "baselines" not in again.phases                  # timed by the first judgement, reused


# (g) outputs read through CUDA IPC or through files: the same verdicts -------------------------------------
@pytest.mark.parametrize("exchange", ["ipc", "files"])
@pytest.mark.parametrize("name, expected", [("unwritten_last_row.cu", "NaN"), ("overrun.cu", "wrote past the end of out")])
def test_hostile_outputs_are_caught_through_either_exchange(layernorm, monkeypatch, exchange, name, expected):
    if exchange == "files":
        monkeypatch.setenv("KEVOLVE_EXCHANGE", "files")
    ev = evaluate(layernorm, kernel(name), CHECK)
    assert not ev.correct and ev.stage == "correctness" and expected in ev.failure, ev.failure
    if exchange == "ipc":                              # and an honest kernel still passes this way
        assert_seed_correct(layernorm)


def test_outputs_travel_by_cuda_ipc_here(layernorm):
    """Where the evaluator and its worker share the GPU, the probe succeeds, so (g)'s "ipc" case is IPC."""
    from kevolve.judge import exchange
    from kevolve.judge.process import WorkerProcess
    built = builder.build(layernorm.seed_path("cuda").read_text(), "cuda")
    worker = WorkerProcess(CHECK)
    try:
        info = worker.call("init", 300, task_dir=layernorm.ref, lib=built.lib_path, abi="c", target="cuda",
                           module=None, exchange="/tmp", threads=None)
        assert "error" not in info, info
        assert exchange.ipc_works(lambda cmd: worker.call(cmd, 60), info["uuid"])
    finally:
        worker.close()
