"""Failures shown (kevolve/record/failures.py): each failed candidate's stage, reason and configuration, read the
same way by the console, the HTML report's failures table and W&B's `failures` table (offline, read back from
W&B's own files) — one store, three readers, the same rows."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from kevolve.judge.results import Evaluation, Measurement, Stats
from kevolve.messages import Candidate, Status
from kevolve.record import failures
from kevolve.record.store import Store

NAN = ("B=8,N=4096/random/s0: output out: 4096 of 4096 elements NaN — not written? first at (0, 0) "
       "(first call, inputs 0 of salt 7)")


@pytest.mark.parametrize("status,feedback,stage,expect", [
    ("rejected", "static rule: line 7: threads: starts a thread (`std::thread t;`)", None,
     ("static rules", "static rule: threads", "")),
    ("rejected", "rejected by LLM verifiers (memory): memory: reads past the end", None,
     ("LLM verifiers", "LLM verifiers", "")),
    ("build_failed", "k.cpp:3:5: error: expected ';' before '}' token", None, ("build", "compile error", "")),
    ("evaluated", NAN, "correctness", ("correctness", "outputs not written", "B=8,N=4096/random/s0")),
    ("evaluated", "B=3,N=1001/random/s0: output out: 3 of 3003 elements outside tolerance (atol=1e-05, rtol=0.0001)",
     "correctness", ("correctness", "wrong values", "B=3,N=1001/random/s0")),
    ("evaluated", "B=3,N=1001/random/s0: input x modified by the kernel (first call)", "correctness",
     ("correctness", "input modified", "B=3,N=1001/random/s0")),
    ("evaluated", "B=4,N=256/random/s0: crash: SIGSEGV (call 3, …)", "correctness",
     ("correctness", "crash", "B=4,N=256/random/s0")),
    ("failed", "evaluate failed: RayActorError: died (after 2 retries)", None, ("lost", "lost at evaluate", "")),
])
def test_each_failure_is_read_as_a_stage_a_reason_and_a_configuration(status, feedback, stage, expect):
    r = failures.rejection(status, feedback, stage)
    assert (r.stage, r.reason, r.configuration) == expect and r.detail == feedback


def test_a_correct_candidate_is_no_failure_and_counts_are_per_reason():
    def rec(status, correct, feedback=None):
        return SimpleNamespace(candidate=Candidate.new(f"int x{feedback};", operator="knob"), status=status,
                               correct=correct, feedback=feedback, evaluation=None)
    rows = failures.rows([rec("evaluated", True), rec("build_failed", False, "error: a"),
                          rec("build_failed", False, "error: b"), rec("evaluated", False, NAN)])
    assert [r["reason"] for r in rows] == ["compile error", "compile error", "outputs not written"]
    assert failures.counts(rows) == {"compile error": 2, "outputs not written": 1}


def _store(path) -> Store:
    """A run's store: a correct seed, a seed the judge rejected, a knob child the rules refused, one that did not
    compile."""
    store = Store.create(path, {"task": "t", "config": {}})
    good = Candidate.new("int good;", operator="seed", meta={"file": "cpu.cpp"})
    bad = Candidate.new("int bad;", operator="seed", meta={"file": "fast.cpp"})
    ruled = Candidate.new("int ruled;", operator="knob", parents=(good.id,), generation=1)
    broken = Candidate.new("int broken;", operator="knob", parents=(good.id,), generation=1)
    m = Measurement("B=4/random/s0", "B=4", "random", False, True, kernel=Stats(1.0, 0.9, 1.1, 5),
                    eager=Stats(2.0, 1.9, 2.1, 5), floor_ms=0.5)
    for c in (good, bad, ruled, broken):
        store.add_candidate(c)
    store.record_evaluation(good.id, Evaluation("t", "cpu", "c", "small", True, True, measurements=(m,)), 1.0)
    store.record_evaluation(bad.id, Evaluation("t", "cpu", "c", "small", True, False, stage="correctness",
                                               failure=NAN), 1.0)
    store.set_stage(ruled.id, Status.REJECTED, feedback="static rule: line 1: threads: starts a thread (`x`)")
    store.set_stage(broken.id, Status.BUILD_FAILED, feedback="k.cpp:1: error: expected ';'")
    return store


def test_the_report_has_the_failures_table(tmp_path):
    from kevolve.report import data
    from kevolve.report.failures import section
    with _store(tmp_path / "run"):
        pass
    html = section(data.load(tmp_path / "run"))
    assert "3 of 4 judged candidates failed: 1 compile error, 1 outputs not written, 1 static rule: threads" in html
    assert 'data-table="failures"' in html and "seed (fast.cpp)" in html and "B=4/random/s0" not in html
    assert "B=8,N=4096/random/s0" in html and "correctness" in html and "NaN — not written?" in html


def test_wandb_gets_the_same_table(tmp_path, monkeypatch):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tracking"))
    from wandb_files import offline_runs
    from kevolve.config import LoggerConfig
    from kevolve.tracking.wandb_tracker import WandbTracker
    for var in ("DIR", "DATA_DIR", "CACHE_DIR", "CONFIG_DIR"):
        monkeypatch.setenv(f"WANDB_{var}", str(tmp_path / f"wandb-{var.lower()}"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    store = _store(tmp_path / "run")
    tracker = WandbTracker(LoggerConfig(kind="wandb"))
    tracker.start(store, SimpleNamespace(evaluators=1, target="cpu"))
    tracker.finish({"best": None})
    expected = failures.rows(store.candidates())
    store.close()
    (run,) = offline_runs(Path(os.environ["WANDB_DIR"]))
    table = run.table("failures")
    got = [dict(zip(table["columns"], row)) for row in table["data"]]
    assert got == json.loads(json.dumps(expected)) and len(got) == 3
    assert {r["reason"] for r in got} == {"outputs not written", "static rule: threads", "compile error"}
