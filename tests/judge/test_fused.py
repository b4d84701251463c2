"""The compiled checks (`judge.evaluator.fused`), on the CPU: the compiled float64 reference agrees with eager's on real
tasks, the compiled comparison gives eager's verdicts (NaN, Inf, non-finite references, the tolerance's edge),
a compiled part that disagrees or fails is turned off and eager used, and hostile kernels judged with compiled
checks are rejected with the same verdicts as with eager ones.

Inductor compiles C++ here (a few seconds per graph, cached on disk afterwards); on a GPU the same code
compiles Triton kernels (tests/judge/test_gpu.py runs the harness with them, `resources.compiled_checks: auto`).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kevolve.judge import build as builder
from kevolve.judge.worker import confine
from kevolve.judge.evaluator import fused as fused_module
from kevolve.judge.evaluator.checks import Checker
from kevolve.judge.evaluator.fused import Fused
from kevolve.judge.evaluator.harness import judge
from kevolve.judge.options import Options
from kevolve.judge.evaluator.reuse import SALT_ENV, Reuse
from kevolve.task import load_task

HERE = Path(__file__).resolve().parent.parent          # tests/
TINY = HERE / "kernels" / "tasks" / "layernorm_tiny"
landlocked = pytest.mark.skipif(not confine.landlock_abi(),
                                reason="compiled checks need a Landlock-confined worker "
                                       "(judge.evaluator.startup.fused)")

pytestmark = pytest.mark.usefixtures("private_build_cache")   # tests/conftest.py


@pytest.mark.parametrize("name", ["layernorm_bwd", "cross_entropy_fwd"])   # cross_entropy: int64 targets
def test_the_compiled_reference_agrees_with_eager_on_every_small_configuration(name):
    task = load_task(name)
    checker, fused = Checker(task, Options()), Fused(task, "cpu", min_elements=0)
    for cfg in task.configs("small"):
        inputs = task.make_inputs(cfg, "cpu", 7)
        eager = checker._expected(cfg, inputs)
        assert fused._disagree(fused._run_reference(cfg, inputs), eager) is None, cfg.id
        assert fused.reference(cfg, inputs, lambda: eager) is eager       # the first one is eager's, then agreed
        assert cfg.id in fused.agreed
    assert not fused.off


@pytest.fixture(scope="module")
def tiny():
    return load_task(TINY)


def stats(fused: Fused, out, ref, finite=None) -> tuple[int, float, float]:
    bad, ratio, err = fused.compare(out, ref, finite).tolist()
    return int(bad), ratio, err


def test_the_compiled_comparison_counts_what_eager_rejects(tiny):
    fused = Fused(tiny, "cpu", min_elements=0)                  # atol 1e-4, rtol 1e-4 (layernorm_tiny)
    tol = lambda r: tiny.atol + tiny.rtol * abs(r)      # noqa: E731
    ref = torch.tensor([1.0, -2.0, 0.0, 3.0, 100.0], dtype=torch.float64)
    assert stats(fused, ref.float(), ref)[0] == 0
    inside = ref.clone()
    inside[4] += 0.9 * tol(100.0)
    bad, worst, err = stats(fused, inside.float(), ref)
    assert bad == 0 and worst == pytest.approx(0.9, rel=1e-3) and err == pytest.approx(0.9 * tol(100.0), rel=1e-3)
    outside = ref.clone()
    outside[1] -= 1.5 * tol(2.0)
    outside[3] += 2 * tol(3.0)
    assert stats(fused, outside, ref)[0] == 2
    for odd in (float("nan"), float("inf"), float("-inf")):     # where the reference is finite: each one fails
        out = ref.clone()
        out[2] = odd
        assert stats(fused, out, ref)[0] == 1, odd
    ref_odd = ref.clone()
    ref_odd[0], ref_odd[1] = float("nan"), float("inf")       # not finite there: any value passes
    out = ref_odd.clone()
    out[0], out[1] = 5.0, float("nan")
    assert stats(fused, out, ref_odd, torch.isfinite(ref_odd))[0] == 0
    out[3] = float("nan")
    assert stats(fused, out, ref_odd, torch.isfinite(ref_odd))[0] == 1
    assert not fused.off


def test_the_compiled_comparison_passes_its_self_test_and_a_miscounting_one_is_turned_off(tiny):
    fused = Fused(tiny, "cpu", min_elements=0)
    for masked in (False, True):
        for dtype in (torch.float32, torch.float64):
            assert fused._compiled_compare(masked, dtype) is not None
    assert fused.tested == {(m, d) for m in (False, True) for d in (torch.float32, torch.float64)}
    assert not fused.off

    def nan_blind(out, ref, atol, rtol):        # (ratio > 1).sum(): a NaN compares false, so it slips through
        ratio = (out.double() - ref).abs() / (ref.abs() * rtol + atol)
        ok = ~(ratio > 1)
        return torch.stack([(ratio > 1).sum().double(), torch.where(ok, ratio, 0).nan_to_num(0).amax(),
                            torch.zeros((), dtype=torch.float64)])
    blind = Fused(tiny, "cpu", min_elements=0)
    blind._compare = nan_blind
    ref = torch.ones(8, dtype=torch.float64)
    assert blind.compare(ref.float(), ref, None) is None
    assert "self-test (torch.float32): counted 7 of 8 planted elements" in blind.off["compare"]


def test_a_compiled_reference_that_disagrees_with_eager_is_turned_off(tiny):
    fused, checker = Fused(tiny, "cpu", min_elements=0), Checker(tiny, Options())
    cfg = tiny.configs("small")[0]
    inputs = tiny.make_inputs(cfg, "cpu", 3)
    eager = checker._expected(cfg, inputs)
    compiled = fused._run_reference

    def off_by_a_tenth_of_the_tolerance(cfg, inputs):
        return tuple((r + 0.1 * tiny.atol, f) for r, f in compiled(cfg, inputs))
    fused._run_reference = off_by_a_tenth_of_the_tolerance
    assert fused.reference(cfg, inputs, lambda: eager) is eager
    assert "differs from eager's by more than" in fused.off["reference"]
    assert fused.reference(cfg, inputs, lambda: eager) is None           # off: the Checker computes eagerly
    checker.fused = fused
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(checker.expected(cfg, inputs), eager))


def test_agreement_takes_nan_and_inf_where_eager_has_them(tiny):
    fused = Fused(tiny, "cpu", min_elements=0)
    w = torch.tensor([[1.0, float("nan"), float("inf"), -2.0]], dtype=torch.float64).expand(2, 4).contiguous()
    same = (w.clone(), torch.isfinite(w))
    assert fused._disagree((same,), ((w, torch.isfinite(w)),)) is None
    flipped = w.clone()
    flipped[0, 2] = float("-inf")
    assert "NaN or Inf values differ" in fused._disagree(((flipped, torch.isfinite(flipped)),),
                                                         ((w, torch.isfinite(w)),))
    moved = w.clone()
    moved[0, 1], moved[0, 0] = 1.0, float("nan")
    assert "NaN or Inf where eager's is finite" in fused._disagree(((moved, torch.isfinite(moved)),),
                                                                   ((w, torch.isfinite(w)),))


def test_a_compiled_part_that_fails_is_turned_off_and_eager_used(tiny):
    fused = Fused(tiny, "cpu", min_elements=0)
    cfg = tiny.configs("small")[0]

    def broken(*args):
        raise RuntimeError("no compiler")
    fused._run_reference, fused._compare = broken, broken
    inputs = tiny.make_inputs(cfg, "cpu", 1)
    assert fused.reference(cfg, inputs, lambda: None) is None
    ref = torch.ones(4, dtype=torch.float64)
    assert fused.compare(ref.float(), ref, None) is None
    assert fused.off == {"reference": "RuntimeError: no compiler", "compare": "RuntimeError: no compiler"}


def test_running_out_of_memory_in_compiled_code_goes_on_to_the_harness(tiny):
    fused = Fused(tiny, "cpu", min_elements=0)

    def out_of_memory(*args):
        raise torch.OutOfMemoryError("CUDA out of memory")
    fused._run_reference = fused._compare = out_of_memory
    cfg = tiny.configs("small")[0]
    with pytest.raises(torch.OutOfMemoryError):
        fused.reference(cfg, tiny.make_inputs(cfg, "cpu", 1), lambda: None)
    ref = torch.ones(4, dtype=torch.float64)
    with pytest.raises(torch.OutOfMemoryError):
        fused.compare(ref.float(), ref, None)
    assert not fused.off                        # still on: the evaluator frees memory and judges again


@pytest.fixture
def every_size(monkeypatch):
    """Compiled checks on every call, however small (layernorm_tiny's calls are all under `MIN_ELEMENTS`)."""
    monkeypatch.setattr(fused_module, "MIN_ELEMENTS", 0)


def test_small_calls_stay_eager(tiny):
    fused, cfg = Fused(tiny, "cpu"), tiny.configs("small")[0]
    inputs = tiny.make_inputs(cfg, "cpu", 2)
    assert sum(t.numel() for t in inputs.values()) < fused.min_elements
    assert fused.reference(cfg, inputs, lambda: pytest.fail("eager asked")) is None and not fused.agreed
    ref = torch.ones(1000, dtype=torch.float64)
    assert fused.compare(ref.float(), ref, None) is None
    assert fused._reference is None and fused._compare is None       # nothing compiled


def judge_with(task, path: Path, options: Options):
    """The verdict on the kernel at `path` by an evaluator of its own, and that evaluator's compiled checks."""
    reuse = Reuse(options, 1 << 30, 3600)
    try:
        built = builder.build(path.read_text(), "cpu", "c")
        assert built.ok, built.error
        return judge(task, built.lib_path, options, reuse=reuse), reuse.fused(task, "cpu")
    finally:
        reuse.close()


CHECKS = dict(target="cpu", shapes="small", time_kernel=False, timeout=30)


@landlocked
@pytest.mark.parametrize("name", ["unwritten_tail.cpp", "eps_wrong.cpp", "cache_pointer.cpp",
                                  "init_specialised.cpp"])
def test_hostile_kernels_get_eager_verdicts_from_compiled_checks(tiny, name, monkeypatch, every_size):
    monkeypatch.setenv(SALT_ENV, "4398046511104")             # both evaluators check on the same inputs
    path = HERE / "kernels" / "cpu" / name
    ev, fused = judge_with(tiny, path, Options(**CHECKS, compiled_checks="on"))
    assert fused.agreed and not fused.off                    # the compiled reference ran, and agreed
    eager, unused = judge_with(tiny, path, Options(**CHECKS, compiled_checks="off"))
    assert not unused.agreed                                  # off: never asked
    assert not ev.correct and (ev.stage, ev.failure) == (eager.stage, eager.failure)


@landlocked
def test_an_honest_kernel_passes_compiled_checks_timed_calls_included(tiny, every_size):
    options = Options(target="cpu", shapes="small", baselines=("eager",), reps=5, budget_s=0.02, timeout=30,
                      compiled_checks="on")
    ev, fused = judge_with(tiny, tiny.dir / "seeds" / "cpu.cpp", options)
    assert ev.correct, ev.failure
    assert any(m.kernel is not None for m in ev.measurements)     # timed, every timed call checked compiled
    assert len(fused.agreed) == len(tiny.configs("small")) and not fused.off


def test_auto_compiles_checks_on_cuda_for_an_evaluator_that_keeps_them(tiny):
    from kevolve.judge import protocol
    from kevolve.judge.evaluator.startup import fused as _fused

    def started(landlock: int) -> protocol.Started:
        return protocol.Started(device="x", bandwidth_gbs=1.0, confinement={"landlock": landlock})
    landlock = started(7)
    reuse = Reuse(Options(), 0, 0)
    assert _fused(tiny, Options(target="cuda"), reuse, landlock) is reuse.fused(tiny, "cuda")
    assert _fused(tiny, Options(target="cuda"), None, landlock) is None       # one judgement: eager
    assert _fused(tiny, Options(target="cpu"), reuse, landlock) is None
    assert _fused(tiny, Options(target="cpu", compiled_checks="on"), None, landlock) is not None
    assert _fused(tiny, Options(target="cuda", compiled_checks="off"), reuse, landlock) is None
    assert _fused(tiny, Options(target="cuda"), reuse, started(0)) is None


def test_the_cli_takes_compiled_checks():
    from kevolve.cli.evaluate import UsageError, options_from
    task = load_task("layernorm_fwd")
    assert options_from({"target": "cpu"}, task).compiled_checks == "auto"
    assert options_from({"target": "cpu", "compiled_checks": "on"}, task).compiled_checks == "on"
    with pytest.raises(UsageError, match="compiled_checks"):
        options_from({"target": "cpu", "compiled_checks": "yes"}, task)
