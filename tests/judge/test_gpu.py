"""The harness on a CUDA GPU: seeds are correct, timed on the graph clock with the synced latency beside
it; work hidden on a side stream, skipped on some calls, skipped while captured, or memoised is rejected;
the paired comparison tells kernels apart; an illegal address or a GPU hang is a verdict (and the next
evaluation is judged normally); robust-kbench's torch-extension format meets the same checks. Skipped
where torch sees no GPU."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from kevolve.judge import build as builder
from kevolve.judge import protocol
from kevolve.judge.evaluator.harness import compare, evaluate, judge
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


@pytest.mark.parametrize("name,fname", [(n, f) for n in list_tasks() for f in load_task(n).seeds.get("cuda", ())[1:]])
def test_every_further_cuda_seed_is_correct(name, fname):
    """The seeds beyond the plain one, on the whole small set: the paths the CPU emulator of test_seeds cannot
    run (thread-block clusters, occupancy queries) run here."""
    task = load_task(name)
    ev = evaluate(task, (task.dir / "seeds" / fname).read_text(), CHECK)
    assert ev.correct, ev.failure


@pytest.mark.parametrize("name", [n for n in list_tasks() if "cuda" in load_task(n).best])
def test_every_best_cuda_kernel_is_correct(name):
    """A task's best/cuda.cu (kevolve.report.best), on the whole small set: a search judged it on bench only."""
    task = load_task(name)
    ev = evaluate(task, task.best_paths("cuda")[0].read_text(), CHECK)
    assert ev.correct, ev.failure


# (b) work on a side stream must not look faster ------------------------------------------------------
TIMING = Options(target="cuda", baselines=("eager",), reps=100, budget_s=0.5, timeout=60)


def test_side_stream_work_is_timed_or_rejected():
    """A kernel that launches on a stream of its own and returns at once: captured in a CUDA graph its work
    runs once, at capture, and never on replay — so it is rejected (outputs left poisoned); if it is timed
    at all (a clock that cannot capture it), it times like its twin on the given stream (B=8, N=4M)."""
    task = load_task(TIMING_TASK)
    options = Options(**{**TIMING.__dict__, "shapes": "long"})
    given = evaluate(task, kernel("given_stream.cu"), options)
    side = evaluate(task, kernel("side_stream.cu"), options)
    assert given.correct, given.failure
    assert given.measurements[0].clock["kernel"] == "graph"
    print(f"given stream {given.measurements[0].kernel}; side stream: {side.failure or side.measurements[0].kernel}")
    if side.correct:
        g, s = given.measurements[0].kernel, side.measurements[0].kernel
        assert s.median >= 0.8 * g.median, f"side stream {s} vs given stream {g}"
    else:
        assert side.stage == "timing" and NAMES_THE_CALL.search(side.failure), side.failure


# (b2) timed calls are verified, not trusted ---------------------------------------------------------------
NAMES_THE_CALL = re.compile(r"\((timed call, (round \d+ of \d+|outside-clock probe without [a-z ]+), "
                            r"(call \d+ of \d+|the synced latency call)|"
                            r"warm-up, (call \d+ of \d+|the synced latency call))\)")
CUDA_CHEATS = [("timing_every_other.cu", "NaN"),        # works on some calls only (host-side count)
               ("timing_skip_in_graph.cu", "NaN"),      # launches nothing while captured: replays are free
               ("timing_device_counter.cu", "NaN"),     # counts calls on the device, skips every other replay
               ("timing_memo_pointer.cu", "outside tolerance")]  # replays answers memoised by address
SHORT = Options(target="cuda", shapes="short", baselines=("eager",), reps=30, timeout=60)


@pytest.mark.parametrize("name, says", CUDA_CHEATS, ids=[c[0] for c in CUDA_CHEATS])
def test_a_kernel_that_cheats_while_timed_is_rejected_on_gpu(name, says):
    task = load_task(TIMING_TASK)
    ev = evaluate(task, kernel(name), SHORT)
    assert not ev.correct and ev.stage == "timing", (ev.stage, ev.failure)
    assert says in ev.failure and NAMES_THE_CALL.search(ev.failure), ev.failure


def test_a_kernel_that_cannot_be_captured_is_timed_queued_and_says_so():
    task = load_task(TIMING_TASK)
    ev = evaluate(task, kernel("sync_inside.cu"), SHORT)
    assert ev.correct, ev.failure
    m = ev.measurements[0]
    assert m.clock["kernel"] == "queued" and m.clock["eager"] == "graph", m.clock
    assert "not capturable" in (m.failure or ""), m.failure
    assert m.kernel.median > 0 and m.checked_calls >= 30


def test_seed_is_timed_on_the_graph_clock_with_latency_beside_it(layernorm):
    """Every contender is captured (clock "graph"), the synced latency column is there and not below the
    device time, every timed call was checked, and the speedup carries its interval."""
    options = Options(target="cuda", shapes="small", reps=30, timeout=120, time_inits="first")
    ev = evaluate(layernorm, layernorm.seed_path("cuda").read_text(), options)
    assert ev.correct, ev.failure
    timed = [m for m in ev.measurements if m.kernel is not None]
    for m in timed:
        print(m.config, m.clock, m.kernel.median, {k: v.median for k, v in m.latency.items()}, m.launch_bound)
        assert m.clock == {"kernel": "graph", "eager": "graph", "compile": "graph"}, m.clock
        assert set(m.latency) == {"kernel", "eager", "compile"}
        assert m.latency["kernel"].median >= 0.9 * m.kernel.median
        assert m.checked_calls >= 30 and m.kernel.n >= 3
    assert ev.speedup_ci and ev.speedup_ci[0] <= ev.speedup_ci[1]
    assert any(m.launch_bound for m in timed)          # the small set's shapes take a few µs


def test_max_autotune_baseline_is_timed(layernorm):
    task = load_task(TIMING_TASK)
    options = Options(**{**SHORT.__dict__, "baselines": ("eager", "compile", "compile-max-autotune")})
    ev = evaluate(task, kernel("given_stream.cu"), options)
    assert ev.correct, ev.failure
    m = ev.measurements[0]
    assert m.autotune is not None and m.compile is not None and m.eager is not None, m
    assert m.best_torch == min(m.eager.median, m.compile.median, m.autotune.median)


def test_compare_on_gpu_tells_a_slower_kernel_from_an_equal_one():
    task = load_task(TIMING_TASK)
    options = Options(target="cuda", shapes="long", reps=50, timeout=60)
    built = {n: builder.build(kernel(n), "cuda") for n in ("given_stream.cu", "timing_twice.cu")}
    assert all(b.ok for b in built.values()), [b.error for b in built.values()]
    a, b = built["given_stream.cu"].lib_path, built["timing_twice.cu"].lib_path
    slower = compare(task, a, b, options)
    print(slower)
    assert slower.failure is None and slower.faster == "a" and slower.ratio < 0.7, slower
    same = compare(task, a, a, options)
    print(same)
    assert same.failure is None and 0.9 < same.ratio < 1.1, same
    assert same.clock[same.configs[0]] == {"a": "graph", "b": "graph"}
    bad = compare(task, a, builder.build(kernel("timing_skip_in_graph.cu"), "cuda").lib_path, options)
    assert bad.failure and "kernel b: " in bad.failure, bad


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


TORCH_TIMED = Options(target="cuda", abi="torch", shapes="small", baselines=("eager",), reps=20, budget_s=0.2,
                      timeout=120)


def test_torch_extension_on_the_default_stream_is_timed_queued(layernorm, torch_cuda_home):
    """robust-kbench's kernels launch with `<<<grid, block>>>`, on the legacy default stream. Graphs are
    captured on a blocking stream, so such a launch fails the capture (rather than running once, eagerly,
    outside the graph, which left every replay's outputs stale): the kernel is timed queued, says so, and every
    timed call is correct."""
    options = Options(**{**TORCH_TIMED.__dict__, "time_inits": "first"})
    ev = evaluate(layernorm, kernel("rkb_layernorm_fwd.cu"), options)
    assert ev.correct, ev.failure
    timed = [m for m in ev.measurements if m.kernel is not None]
    assert timed and all(m.clock["kernel"] == "queued" and m.clock["eager"] == "graph" for m in timed), \
        [m.clock for m in timed]
    assert all("not capturable" in (m.failure or "") for m in timed)


def test_class_labels_are_valid_in_every_replay():
    """A task with integer inputs (class labels) timed on the graph clock: the graphs' first, untimed replay
    runs over every input set, so the sets the warm-up did not fill hold valid labels too (they once held
    whatever the allocator left: an illegal address in the seed, a device-side assert in torch's baseline)."""
    task = load_task("cross_entropy_fwd")
    ev = evaluate(task, task.seed_path("cuda").read_text(),
                  Options(target="cuda", shapes="small", reps=20, budget_s=0.2, timeout=120, time_inits="first"))
    assert ev.correct, ev.failure
    assert all(m.clock.get("kernel") == "graph" for m in ev.measurements if m.kernel is not None)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in list_tasks() if "torch-cuda" in load_task(n).seeds])
def test_torch_abi_seed_is_correct_on_every_timed_call(name, torch_cuda_home):
    """robust-kbench's arguments (0-dim gradients, normalized_shape, 4-D views) reach the seed on every call;
    what a timed call returns (on replay, tensors of the CUDA graph's pool) reaches the checked buffers after
    the round, outside the timed interval."""
    t = load_task(name)
    ev = evaluate(t, t.seed_path("cuda", "torch").read_text(), TORCH_TIMED)
    assert ev.correct, ev.failure
    timed = [m for m in ev.measurements if m.kernel is not None]
    assert timed and all(m.checked_calls > 0 for m in timed)
    assert all(m.clock.get("kernel") == "graph" for m in timed), [m.clock for m in timed]


# (e) a kernel that never finishes on the GPU ------------------------------------------------------------
def test_gpu_hang_is_a_timeout_then_the_next_evaluation_is_normal(layernorm):
    ev = evaluate(layernorm, kernel("hang.cu"), Options(**{**CHECK.__dict__, "timeout": 20}))
    assert not ev.correct and ev.stage == "correctness"
    assert "timeout" in ev.failure, ev.failure
    assert_seed_correct(layernorm)


def test_outputs_go_by_cuda_ipc_under_the_default_confinement(layernorm):
    """The exchange's probe decides once per worker and falls back to files without a word; under the confinement
    as shipped (`strict_cuda`: the driver started inside Landlock) it must still find CUDA IPC, and the verdict says
    which it used (`work["cuda_ipc"]`)."""
    ev = evaluate(layernorm, layernorm.seed_path("cuda").read_text(), CHECK)
    assert ev.correct, ev.failure
    assert ev.work.get("cuda_ipc") == 1, ev.work
    files = evaluate(layernorm, layernorm.seed_path("cuda").read_text(),
                     Options(**{**CHECK.__dict__, "exchange": "files"}))
    assert files.correct and files.work.get("cuda_ipc") == 0, (files.failure, files.work)


# (f) an evaluator's Reuse across candidates on the GPU ---------------------------------------------------
def test_reuse_across_candidates_keeps_verdicts_on_gpu(layernorm):
    """A search's evaluator judges many libraries with one Reuse: after an illegal address (a dead CUDA
    context in that worker) the spare worker judges the next candidate normally, and cached references
    and baselines give the verdicts a fresh judgement gives."""
    from kevolve.judge.evaluator.reuse import Reuse
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


def test_compiled_checks_on_gpu_agree_and_give_eager_verdicts(layernorm, monkeypatch):
    """A search's evaluator on CUDA compiles its float64 reference and comparison (`judge.evaluator.fused`, auto): every
    configuration's compiled reference agrees with eager's, nothing is turned off, an honest kernel passes with
    its timed calls checked that way, and a hostile one gets the verdict eager checks give (same inputs)."""
    from kevolve.judge.worker import confine
    from kevolve.judge.evaluator import fused as fused_module
    from kevolve.judge.evaluator.reuse import SALT_ENV, Reuse
    if not confine.landlock_abi():
        pytest.skip("compiled checks need a Landlock-confined worker (judge.evaluator.startup.fused)")
    monkeypatch.setenv(SALT_ENV, "4398046511104")
    monkeypatch.setattr(fused_module, "MIN_ELEMENTS", 0)      # the small set's calls too
    verdicts = {}
    for mode in ("auto", "off"):
        options = Options(target="cuda", shapes="small", reps=10, budget_s=0.05, timeout=60, time_inits="first",
                          compiled_checks=mode)
        reuse = Reuse(options, 4 << 30, 3600)
        try:
            for name, src in (("seed", layernorm.seed_path("cuda").read_text()),
                              ("hostile", kernel("unwritten_last_row.cu"))):
                built = builder.build(src, "cuda")
                assert built.ok, built.error
                verdicts[mode, name] = judge(layernorm, built.lib_path, options, reuse=reuse)
            fused = reuse.fused(layernorm, "cuda")
        finally:
            reuse.close()
        if mode == "auto":
            assert len(fused.agreed) == len(layernorm.configs("small")) and not fused.off, fused.off
    assert verdicts["auto", "seed"].correct, verdicts["auto", "seed"].failure
    a, b = verdicts["auto", "hostile"], verdicts["off", "hostile"]
    assert not a.correct and (a.stage, a.failure) == (b.stage, b.failure)


# (g) outputs read through CUDA IPC or through files: the same verdicts -------------------------------------
@pytest.mark.parametrize("exchange", ["ipc", "files"])
@pytest.mark.parametrize("name, expected", [("unwritten_last_row.cu", "NaN"),
                                            ("overrun.cu", "wrote outside out (past its end)")])
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
    from kevolve.judge.evaluator.process import WorkerProcess
    built = builder.build(layernorm.seed_path("cuda").read_text(), "cuda")
    worker = WorkerProcess(CHECK)
    try:
        info = worker.call(protocol.Init(task_dir=layernorm.ref, lib=built.lib_path, abi="c", target="cuda",
                                         module=None, exchange="/tmp", threads=None), 300)
        assert isinstance(info, protocol.Started), info
        assert exchange.ipc_works(lambda: worker.call(protocol.IpcProbe(), 60).probe, info.uuid)
    finally:
        worker.close()


def test_first_calls_buffers_start_aligned_and_end_near_unmapped_device_memory(layernorm):
    """The first two calls' inputs and outputs (`buffers.allocate(edge="aligned")`) start 16-byte aligned and end one
    element to 16 bytes before the end of their mapping (the next granule is unmapped), those bytes a guard zone;
    they work as tensors and poison and check as the others."""
    from kevolve.judge.worker import buffers, vmm
    for cfg in layernorm.configs("small")[:4]:
        buf = buffers.allocate(layernorm, "cuda", cfg.size_dict, edge="aligned")
        assert buf["layout"] == "aligned, page-ended", buf["layout"]
        for t in list(buf["inputs"].values()) + list(buf["outputs"].values()):
            size = t.numel() * t.element_size()
            assert vmm.owns(t) and t.data_ptr() % 16 == 0
            assert vmm.region(t)[1] == t.data_ptr() + (size // 16 + 1) * 16, (cfg.id, hex(t.data_ptr()), vmm.region(t))
            t.fill_(1.5)
            assert float(t.sum()) == 1.5 * t.numel()
        buffers.poison_all([buf])
        assert buffers.overruns(buf) == []
        del buf
    torch.cuda.synchronize()


def test_edge_buffers_end_against_unmapped_device_memory(layernorm):
    """The third call's inputs and outputs (`buffers.allocate(edge="misaligned")`) each end where mapped device memory
    ends (`judge.worker.vmm`: the next byte lies in a reserved, unmapped granule), start only element-aligned, work as
    tensors, and are exported as copies (CUDA IPC cannot share them); the workspace stays skewed between guards."""
    from kevolve.judge.worker import buffers, vmm
    cfg = layernorm.configs("small")[0]
    buf = buffers.allocate(layernorm, "cuda", cfg.size_dict, edge="misaligned")
    assert buf["layout"] == "edge", buf["layout"]
    for t in list(buf["inputs"].values()) + list(buf["outputs"].values()):
        assert vmm.owns(t) and t.data_ptr() % 16 != 0
        end = t.data_ptr() + t.numel() * t.element_size()        # the mapped end, or one element (a guard) short
        assert vmm.region(t)[1] in (end, end + t.element_size()), (hex(end), vmm.region(t))
        t.fill_(1.5)
        assert float(t.sum()) == 1.5 * t.numel()
    assert not vmm.owns(buf["workspace"])
    buffers.poison_all([buf])
    assert buffers.overruns(buf) == []
    del buf
    torch.cuda.synchronize()
