"""Fixtures for the LLM operators' tests: the loopback LLM server of tests/llm (imported, not copied), a
layernorm_fwd context on an H200, and a judged parent whose evaluation covers held-out configurations too."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

LLM_TESTS = Path(__file__).resolve().parent.parent / "llm"
if str(LLM_TESTS) not in sys.path:
    sys.path.insert(0, str(LLM_TESTS))
_spec = importlib.util.spec_from_file_location("llm_tests_conftest", LLM_TESTS / "conftest.py")
_llm_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_llm_conftest)
server = _llm_conftest.server          # the scripted loopback server fixture of tests/llm
sleeps = _llm_conftest.sleeps

from kevolve.judge.results import Evaluation, Measurement, Stats  # noqa: E402
from kevolve.messages import Candidate  # noqa: E402
from kevolve.operators.context import Context  # noqa: E402
from kevolve.task.load import load_task  # noqa: E402

H200 = "NVIDIA H200, sm_90a"


@pytest.fixture(scope="session")
def task():
    return load_task("layernorm_fwd")


@pytest.fixture(scope="session")
def ctx(task):
    return Context(task, "cuda", H200, "bench")


@pytest.fixture(scope="session")
def parent(task):
    return Candidate(id="parent", source=task.seed_path("cuda").read_text())


def judged(task, shape_set: str = "bench", fail_heldout: bool = False) -> Evaluation:
    """An evaluation of every configuration of the set (held-out ones included, as the judge produces);
    with `fail_heldout`, wrong on the last held-out configuration, with the harness's wording."""
    ms, failure = [], None
    cases = task.configs(shape_set)
    for i, c in enumerate(cases):
        s = lambda ms_: Stats(ms_, ms_ * 0.98, ms_ * 1.02, 50)  # noqa: E731
        wrong = fail_heldout and c is cases[-1]
        why = ("output out: 7 of 300009 elements outside tolerance (atol=0.0001, rtol=0.0001); worst at (2, 100002): "
               "got 1.5, expected 1.2 (call 1)") if wrong else None
        if wrong:
            failure = f"{c.id}: {why}"
        ms.append(Measurement(config=c.id, shape=c.shape_id, init=c.init, heldout=c.heldout, correct=not wrong,
                              failure=why, kernel=s(0.05 + i * 0.001), eager=s(0.1), compile=s(0.08), floor_ms=0.01))
    return Evaluation(task=task.name, target="cuda", abi="c", shapes=shape_set, compiled=True,
                      correct=failure is None, failure=failure, stage="timing" if failure else "done",
                      measurements=tuple(ms), device="NVIDIA H200")
