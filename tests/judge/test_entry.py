"""The entry point against the task's signature (kevolve/judge/static/entry.py), before any build: a missing,
extra, reordered or mistyped argument is a static rejection naming it (rule `entry-point`), not a judgement of
garbage ("4096 of 4096 elements NaN — not written?"); spellings that pass the same arguments are accepted."""
from __future__ import annotations

from pathlib import Path

import pytest

from kevolve.judge.evaluator.harness import evaluate
from kevolve.judge.options import Options
from kevolve.judge.static import rules
from kevolve.task.load import load_task

ROOT = Path(__file__).resolve().parents[2]
TASK = load_task("layernorm_fwd")
SEED = (ROOT / "tasks" / "layernorm_fwd" / "seeds" / "cpu.cpp").read_text()
CUDA = (ROOT / "tasks" / "layernorm_fwd" / "seeds" / "cuda.cu").read_text()
HEAD = 'extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,'
assert HEAD in SEED


def reason(source: str, target: str = "cpu") -> str | None:
    return rules.check(source, target, task=TASK).reason


@pytest.mark.parametrize("change,said", [
    (lambda s: s.replace("const float* bias, ", ""),
     "`forward` takes 8 arguments, the task passes 9: missing `const float* bias`"),
    (lambda s: s.replace("float* out,", "float* out, float* extra,"),
     "`forward` argument 5 is `float * extra` where the task passes `int64_t B`"),
    (lambda s: s.replace("float eps,", "double eps,"),
     "`forward` argument 7 is `double eps` where the task passes `float eps`"),
    (lambda s: s.replace("const float* x, const float* weight", "const double* x, const float* weight"),
     "`forward` argument 1 is `const double * x` where the task passes `const float* x`"),
    (lambda s: s.replace("forward(", "forwards("), "no `forward(...)` entry point found"),
])
def test_a_signature_that_differs_is_refused_naming_the_difference(change, said):
    bad = change(SEED)
    assert bad != SEED
    why = reason(bad)
    assert why is not None and "entry-point" in why and said in why, why
    assert 'write `extern "C" int forward(const float* x, const float* weight, const float* bias' in why or \
        "no `forward" in why


@pytest.mark.parametrize("change", [
    lambda s: s.replace(HEAD, 'extern "C" int forward(const float* __restrict__ x, const float* w, const float* b, '
                              'float* __restrict__ out,'),                       # names and qualifiers of its own
    lambda s: s.replace("const float* x,", "float const* x,"),
    lambda s: s.replace("int64_t B, int64_t N", "long B, long long N"),          # any integer for a size
    lambda s: s.replace("void* workspace", "char* workspace"),
    lambda s: s.replace(HEAD, "#define ARGS const float* x, const float* weight, const float* bias, float* out,\n"
                              'extern "C" int forward(ARGS'),                    # read after the preprocessor
])
def test_spellings_that_pass_the_same_arguments_are_accepted(change):
    ok = change(SEED)
    assert ok != SEED and reason(ok) is None, reason(ok)


def test_cuda_needs_the_stream_last():
    assert reason(CUDA, "cuda") is None
    without = CUDA.replace(",\n                       cudaStream_t stream)", ")").replace(", 0, stream>>>", ">>>")
    assert without != CUDA
    why = reason(without, "cuda")
    assert why is not None and "missing `cudaStream_t stream`" in why, why


@pytest.mark.slow                   # ~15 s: every seed of every task preprocessed
def test_every_shipped_seed_and_best_kernel_passes():
    from kevolve.config.tasks import list_tasks
    for name in list_tasks():
        task = load_task(name)
        for target in ("cpu", "cuda"):
            paths = list(task.best_paths(target, "c"))
            try:
                paths += list(task.seed_paths(target, "c"))
            except Exception:
                pass
            for p in paths:
                assert rules.check(p.read_text(), target, task=task).ok, (name, p.name)


def test_the_judge_says_so_instead_of_judging_garbage():
    ev = evaluate(TASK, SEED.replace("const float* bias, ", ""), Options(target="cpu", shapes="small"))
    assert not ev.correct and ev.stage == "verify" and not ev.compiled
    assert ev.failure.startswith("static rule: line ") and "missing `const float* bias`" in ev.failure
    assert "NaN" not in ev.failure


def test_a_helper_of_the_same_name_is_not_taken_for_the_entry_point():
    helper = ("namespace impl {\nstatic int forward(const float* x, float* y) { return 0; }\n}\n"
              + SEED.replace(HEAD, 'extern "C" {\nint forward(const float* x, const float* weight, const float* bias, '
                                   'float* out,') + "}\n")
    assert reason(helper) is None, reason(helper)
