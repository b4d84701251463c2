"""Contracts of kevolve.tracking without a search: a failing tracker becomes the null one, says so once and
leaves a `tracker_failed` event; W&B absent gives the null tracker; settings follow config, then W&B's variables,
then offline; secrets are scrubbed by key and by value; a candidate row is flat and holds no source."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from kevolve.config import LoggerConfig
from kevolve.judge.results import Evaluation, Measurement, Stats
from kevolve.messages import Candidate, Status
from kevolve.record.store import Store
from kevolve.tracking import Guarded, NullTracker, make_tracker, row
from kevolve.record.scrub import scrub

PLAN = SimpleNamespace(evaluators=1, target="cpu")


class Exploding:
    def __init__(self):
        self.calls = []

    def start(self, store, plan):
        self.calls.append("start")

    def candidate(self, r):
        self.calls.append("candidate")
        raise ConnectionError("service down")

    def progress(self, stats):
        self.calls.append("progress")

    def finish(self, summary):
        self.calls.append("finish")


@pytest.fixture
def store(tmp_path):
    with Store.create(tmp_path / "run", {"task": "t", "config": {"llm": {"api_key": "x"}}}) as s:
        yield s


def test_a_failing_tracker_becomes_null_and_says_so_once(store, capsys):
    inner = Exploding()
    t = Guarded(inner, "test")
    t.start(store, PLAN)
    for _ in range(3):
        t.candidate({"id": "a"})
    t.progress({})
    t.finish({})
    assert inner.calls == ["start", "candidate"]
    assert isinstance(t.inner, NullTracker)
    assert capsys.readouterr().err.count("tracker failed") == 1
    (event,) = [p for _, _, p in store.events("tracker_failed")]
    assert "service down" in event["error"]


def test_real_wandb_failing_to_start_does_not_raise(store, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("WANDB_MODE", "offline")
    t = make_tracker(LoggerConfig(kind="wandb", dir=str(blocker / "below")))     # W&B cannot write there
    t.start(store, PLAN)
    t.candidate({"id": "a", "correct": True, "fitness": 1.0})
    t.finish({"best": None})
    assert isinstance(t.inner, NullTracker) and store.events("tracker_failed")


def test_wandb_absent_gives_the_null_tracker(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.delitem(sys.modules, "kevolve.tracking.wandb_tracker", raising=False)
    assert isinstance(make_tracker(LoggerConfig(kind="wandb")), NullTracker)
    assert "W&B cannot be imported" in capsys.readouterr().err
    assert isinstance(make_tracker("none"), NullTracker)


def test_settings_config_then_wandb_variables_then_offline(tmp_path):
    from kevolve.tracking.wandb_tracker import settings
    run_dir = tmp_path / "2026-01-01_00-00-00"
    s = settings(LoggerConfig(kind="wandb"), run_dir, "layernorm_bwd", "cuda", env={})
    assert (s.mode, s.project, s.entity, s.dir, s.group) == ("offline", "kevolve", None, str(run_dir), None)
    assert s.name == "layernorm_bwd/2026-01-01_00-00-00" and set(s.tags) == {"layernorm_bwd", "cuda"}
    env = {"WANDB_MODE": "online", "WANDB_PROJECT": "p", "WANDB_ENTITY": "e", "WANDB_DIR": "/w"}
    s = settings(LoggerConfig(kind="wandb"), run_dir, "t", "cpu", env=env)
    assert (s.mode, s.project, s.entity, s.dir) == ("online", "p", "e", "/w")
    s = settings(LoggerConfig(kind="wandb", mode="disabled", project="q", group="sweep"), run_dir, "t", "cpu", env=env)
    assert (s.mode, s.project, s.group) == ("disabled", "q", "sweep")


def test_scrub_by_key_and_by_value(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-0123456789")
    out = scrub({"api_key": "k", "nested": [{"url": "http://h/?t=tok-0123456789"}], "n": 3})
    assert out == {"api_key": "***", "nested": [{"url": "http://h/?t=***"}], "n": 3}


def test_a_row_is_flat_and_holds_no_source(store):
    c = Candidate.new("int forward(){return 0;} // SOURCE", operator="knob", parents=("p0",), generation=1)
    store.add_candidate(c, cost_usd=0.25, timings={"mutate": 0.1})
    store.set_stage(c.id, Status.BUILT, build={"ok": True, "seconds": 1.5}, timings={"build": 1.5})
    m = Measurement("B=4/random/s0", "B=4", "random", False, True, kernel=Stats(1.0, 0.9, 1.1, 5),
                    eager=Stats(2.0, 1.9, 2.1, 5), floor_ms=0.5)
    ev = Evaluation("t", "cpu", "c", "small", True, True, measurements=(m,), eval_seconds=3.0)
    store.record_evaluation(c.id, ev, 3.0)
    r = row(store.get(c.id))
    assert all(isinstance(v, (str, int, float, bool)) or v is None for v in r.values())
    assert "SOURCE" not in str(r)
    assert (r["id"], r["parents"], r["operator"], r["correct"], r["build_s"], r["cost_usd"]) == \
        (c.id, "p0", "knob", True, 1.5, 0.25)
    assert r["config/B=4:random:s0/speedup"] == 2.0 and r["config/B=4:random:s0/floor_fraction"] == 0.5


def test_verifier_verdicts_reach_the_row():
    rec = SimpleNamespace(candidate=Candidate.new("x"), evaluation=None, verdict={"ok": True}, build=None,
                          feedback=None, status="rejected", correct=False, compiled=False, fitness=0.0, cost_usd=0.0,
                          timings={}, screening={"verdicts": [{"verifier": "memory", "passed": False},
                                                              {"verifier": "numerics", "passed": None}]})
    r = row(rec)
    assert (r["verifier/memory"], r["verifier/numerics"], r["rules"]) == ("fail", "none", "pass")
