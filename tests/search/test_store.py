"""Contracts of kevolve.record.store: what is committed survives, resume sees what is left, secrets stay out."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kevolve.config import PopulationConfig
from kevolve.messages import Candidate
from kevolve.search.population import Population
from kevolve.judge.results import Evaluation, Measurement, Stats
from kevolve.record.store import DB_NAME, SCHEMA_VERSION, Store, StoreError
from kevolve.record import events

ROOT = Path(__file__).resolve().parents[2]


def cand(cid: str, island: int = 0, parents=(), operator: str = "optimize") -> Candidate:
    return Candidate(id=cid, source=f"int {cid};", parents=parents, island=island, operator=operator,
                     model="m", created=1.0, meta={"strategy": "tile"})


def evaluation(correct: bool, kernel_ms: float = 1.0) -> Evaluation:
    ms = tuple(Measurement(config=f"B={b}/random/s0", shape=f"B={b}", init="random", heldout=b == 3,
                           correct=correct, max_rel_err=0.1, kernel=Stats(kernel_ms, kernel_ms, kernel_ms, 10),
                           eager=Stats(2.0, 2.0, 2.0, 10), compile=Stats(3.0, 3.0, 3.0, 10), floor_ms=0.5)
               for b in (1, 2, 3))
    return Evaluation(task="t", target="cpu", abi="c", shapes="small", compiled=True, correct=correct,
                      failure=None if correct else "wrong answer", measurements=ms)


@pytest.fixture
def store(tmp_path):
    s = Store.create(tmp_path, {"task": "layernorm_fwd", "target": "cpu"})
    yield s
    s.close()


def test_create_writes_meta_and_refuses_an_existing_run(tmp_path):
    Store.create(tmp_path, {"task": "layernorm_fwd", "config": {"islands": 2}}).close()
    with Store.open(tmp_path) as s:
        meta = s.meta()
    assert meta["task"] == "layernorm_fwd" and meta["config"] == {"islands": 2} and meta["schema"] == SCHEMA_VERSION
    with pytest.raises(StoreError, match="already exists"):
        Store.create(tmp_path, {})


@pytest.mark.parametrize("key", ["api_key", "OPENAI_API_KEY", "hf_token", "accessToken", "password",
                                 "client_secret", "apiKey"])
def test_meta_secrets_are_redacted_at_any_depth(tmp_path, key):
    Store.create(tmp_path, {"config": {"llm": {key: "sk-live-123", "max_tokens": 4096}}, key: "x"}).close()
    with Store.open(tmp_path) as s:
        meta = s.meta()
    assert meta[key] == "***" and meta["config"]["llm"] == {key: "***", "max_tokens": 4096}
    assert b"sk-live-123" not in (tmp_path / DB_NAME).read_bytes()


def test_open_fails_clearly_without_a_database(tmp_path):
    with pytest.raises(StoreError, match="no kevolve.db"):
        Store.open(tmp_path)


def test_open_fails_clearly_on_another_schema_version(tmp_path):
    Store.create(tmp_path, {}).close()
    conn = sqlite3.connect(tmp_path / DB_NAME)
    conn.execute("PRAGMA user_version=99")
    conn.close()
    with pytest.raises(StoreError, match="schema version 99"):
        Store.open(tmp_path)


def test_candidate_round_trips(store):
    c = cand("a", parents=("p",))
    store.add_candidate(c, cost_usd=0.01, timings={"mutate": 2.5})
    r = store.get("a")
    assert r.candidate == c and r.status == "pending" and r.cost_usd == 0.01 and r.timings == {"mutate": 2.5}


def test_stages_accumulate_cost_and_timings(store):
    store.add_candidate(cand("a"), cost_usd=0.01, timings={"mutate": 1.0})
    store.set_stage("a", "verified", verdict={"ok": True, "rule": None}, cost_usd=0.02, timings={"verify": 0.5})
    store.set_stage("a", "build_failed", build={"ok": False, "error": "error: x undeclared", "seconds": 2.0},
                    timings={"build": 2.0})
    r = store.get("a")
    assert r.status == "build_failed" and r.cost_usd == pytest.approx(0.03)
    assert r.timings == {"mutate": 1.0, "verify": 0.5, "build": 2.0}
    assert r.verdict == {"ok": True, "rule": None} and r.build["error"] == "error: x undeclared"
    assert r.outcome.fitness == 0.0 and not r.outcome.correct and not r.outcome.compiled
    assert r.outcome.feedback == "error: x undeclared"
    assert store.total_cost() == pytest.approx(0.03)


def test_record_evaluation_stores_fitness_and_one_row_per_configuration(store):
    store.add_candidate(cand("a"))
    ev = evaluation(True, kernel_ms=0.5)
    store.record_evaluation("a", ev, seconds=4.0)
    r = store.get("a")
    assert r.status == "evaluated" and r.fitness == pytest.approx(4.0) and r.correct and r.timings["evaluate"] == 4.0
    assert Evaluation.from_json(r.evaluation) == ev
    rows = store._conn.execute("SELECT config, heldout, kernel_ms, eager_ms, compile_ms FROM measurements"
                               " WHERE candidate_id = 'a' ORDER BY config").fetchall()
    assert rows == [("B=1/random/s0", 0, 0.5, 2.0, 3.0), ("B=2/random/s0", 0, 0.5, 2.0, 3.0),
                    ("B=3/random/s0", 1, 0.5, 2.0, 3.0)]


def test_unknown_status_or_candidate_raises(store):
    with pytest.raises(ValueError, match="status"):
        store.add_candidate(cand("a"), status="done")
    with pytest.raises(KeyError, match="zz"):
        store.set_stage("zz", "verified")


def test_resume_lists_unfinished_candidates_and_restores_the_population(tmp_path):
    with Store.create(tmp_path, {}) as s:
        for i in range(6):
            s.add_candidate(cand(f"c{i}", island=i % 2))
        s.set_stage("c1", "verified")
        s.record_evaluation("c3", evaluation(True, 1.0), 1.0)
        s.set_stage("c0", "rejected", verdict={"reason": "getenv"})
        s.record_evaluation("c5", evaluation(False), 1.0)
        s.set_stage("c4", "built", build={"ok": True})
    with Store.open(tmp_path) as s:
        assert [r.candidate.id for r in s.unfinished()] == ["c1", "c2", "c4"]
        assert [r.candidate.id for r in s.finished()] == ["c3", "c0", "c5"]
        assert [r.candidate.id for r in s.evaluated()] == ["c3", "c5"]
        assert [r.candidate.id for r in s.best(5)] == ["c3"]
        assert s.counts() == {"pending": 1, "verified": 1, "built": 1, "evaluated": 2, "rejected": 1}
        pop = Population.restore(PopulationConfig(islands=2), [(r.candidate, r.outcome) for r in s.finished()])
    assert len(pop) == 3 and pop.best().candidate.id == "c3" and pop.best().fitness == pytest.approx(2.0)


def test_a_reader_sees_the_writers_commits(tmp_path):
    writer = Store.create(tmp_path, {})
    reader = Store.open(tmp_path, readonly=True)
    writer.add_candidate(cand("a"))
    assert [r.candidate.id for r in reader.candidates()] == ["a"]
    with pytest.raises(StoreError, match="read-only"):
        reader.add_candidate(cand("b"))
    reader.close()
    writer.close()


WRITER = textwrap.dedent("""
    import sys
    from kevolve.messages import Candidate
    from kevolve.record import events
    from kevolve.record.store import Store
    store = Store.create(sys.argv[1], {"task": "t"})
    big = "x" * 20000
    i = 0
    while True:
        store.add_candidate(Candidate(id=f"c{i}", source=f"// {i}\\n" + big, meta={"i": i}))
        store.set_stage(f"c{i}", "verified", timings={"verify": 0.1})
        store.log_event(events.Progress({"i": i}))
        print(i, flush=True)          # printed only once both writes are committed
        i += 1
""")


def test_committed_rows_survive_sigkill_of_the_writer(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            env=env)
    committed = []
    deadline = time.time() + 30
    while len(committed) < 200 and time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed.append(int(line))
    os.kill(proc.pid, signal.SIGKILL)          # mid-write: the loop never pauses
    proc.wait()
    assert len(committed) >= 200, "the writer did not get going"
    with Store.open(tmp_path) as s:
        assert s.integrity() == "ok"
        verified = {r.candidate.id for r in s.candidates("verified")}
        assert {f"c{i}" for i in committed} <= verified
        assert s.get(f"c{committed[-1]}").candidate.meta_dict() == {"i": committed[-1]}


def test_a_full_disk_is_a_clear_error_and_loses_nothing_committed(tmp_path):
    """SQLite's page limit stands in for a full disk: the write that does not fit is rolled back and raised
    as a StoreError saying what to do; every row committed before it is intact and readable."""
    from kevolve.messages import Candidate
    from kevolve.record.store import StoreError
    store = Store.create(tmp_path, {"task": "t"})
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages + 40}")
    added = []
    with pytest.raises(StoreError, match=r"cannot write to .*kevolve.db.*resume="):
        for i in range(1000):
            c = Candidate(id=f"c{i}", source=f"// {i}\n" + "x" * 4000)
            store.add_candidate(c)
            added.append(c.id)
    assert 0 < len(added) < 1000
    store.close()
    with Store.open(tmp_path, readonly=True) as again:
        assert again.integrity() == "ok"
        assert [r.candidate.id for r in again.candidates()] == added


def test_a_run_dir_that_cannot_be_made_is_a_clear_error(tmp_path):
    from kevolve.record.store import StoreError
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="cannot create the run's database"):
        Store.create(tmp_path / "file" / "run", {"task": "t"})


def test_red_team_candidates_are_never_the_best_and_rewards_come_back_in_order(tmp_path):
    from kevolve.messages import Candidate
    store = Store.create(tmp_path, {})
    store.add_candidate(Candidate(id="k", source="k"), arm="optimize@gpt-4.1")
    store.add_candidate(Candidate(id="r", source="r", operator="red_team"), arm="red_team")
    store.set_stage("k", "evaluated", fitness=1.0, correct=True, compiled=True)
    store.set_stage("r", "evaluated", fitness=9.0, correct=True, compiled=True)
    store.set_reward("k", 0.5)
    store.set_reward("r", 1.0)
    store.log_event(events.MutationFailed(arm="meta", reward=0.0, cost_usd=0.25))
    assert [r.candidate.id for r in store.best(5)] == ["k"]
    assert store.rewards() == [("optimize@gpt-4.1", 0.5), ("red_team", 1.0), ("meta", 0.0)]
    assert store.total_cost() == 0.25


def test_a_resume_books_replies_the_store_never_recorded(store, tmp_path):
    """A reply cached after the driver stopped listening was paid for: a resume books it once, as an event, so
    that the store's total (where the resumed run's spend starts) counts it."""
    from kevolve.llm.cache import Cache
    from kevolve.llm.messages import Message, Reply
    from kevolve.search.start import book_unrecorded_spend
    assert book_unrecorded_spend(store, tmp_path) == 0.0                     # no response cache: nothing to book
    cache = Cache.in_run(tmp_path)
    for i, cost in enumerate((0.25, 0.5, 0.0)):                               # the last one a cache hit's copy
        reply = Reply(text="t", model="m", provider="openai", tokens_in=1, tokens_out=1, cost_usd=cost, seconds=0.1,
                      cached=False, finish_reason="stop", params={}, attempts=1)
        cache.put(f"key{i}", reply, (Message("user", f"p{i}"),), seed=i)
    cache.close()
    store.add_candidate(cand("a"), cost_usd=0.25)                            # the one reply the store recorded
    assert book_unrecorded_spend(store, tmp_path) == pytest.approx(0.5)
    assert store.total_cost() == pytest.approx(0.75)
    assert [p["cost_usd"] for _, _, p in store.events("unrecorded_spend")] == [pytest.approx(0.5)]
    assert book_unrecorded_spend(store, tmp_path) == 0.0                     # booked once


def test_a_run_from_a_checkout_records_the_checkouts_version(monkeypatch):
    """Not installed (a copy of the tree on a GPU machine): the version is pyproject's, marked as a checkout."""
    import importlib.metadata
    import re

    from kevolve import ROOT
    from kevolve.record.store import _version

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "version", missing)
    declared = re.search(r'(?m)^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert _version() == f"{declared} (checkout)"
