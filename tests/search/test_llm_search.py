"""The search with an LLM, end to end on the CPU: `kevolve.search.run` with `llm=openai` pointed at the loopback
OpenAI server of tests/llm (the real `openai` client), scripted by the kind of prompt it receives.

The task is tests/search_task with a deliberately slow seed (the row's max and sum recomputed per element); the
scripted LLM writes, among other replies, the search task's ordinary seed, which is ~15x faster. Proven here:
the search finds a kernel faster than its seed through translate → (compile error) → repair, optimize, meta;
every kind of bad reply is a recorded failure; a 429 is retried; spend equals the token counts the server
reported times the price table; LLM verifier precision / recall come out of known outcomes; replay reproduces the
run with the server stopped; a missing key stops at start naming the variable; the dollar budget stops the run;
no key reaches the run directory, the logs or a candidate's worker environment.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
import ray

from kevolve.config import ConfigError, from_hydra
from kevolve.search import driver as search
from kevolve.record.store import Store
from llm_kit import BROKEN, FAST, GOOD, SLOW, TASK, WRONG, fenced, kind, only, verdict
from llm_servers import OPENAI_KEY, LLMServer, Ok, Status

UNROLLED = GOOD.replace("constexpr int UNROLL = 1;", "constexpr int UNROLL = 2;")
CHUNK8 = GOOD.replace("constexpr int CHUNK = 4;", "constexpr int CHUNK = 8;")
ROWS2 = GOOD.replace("constexpr int ROWS = 1;", "constexpr int ROWS = 2;")
PRICE = (2.0, 8.0)                                   # gpt-4.1, USD per million tokens (kevolve/llm/prices.yaml)


def edit(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


class Script:
    """Replies by prompt kind, in order, then a default per kind; records the usage of every reply it sent."""

    def __init__(self):
        strategies = json.dumps([{"name": "wider lanes", "idea": "use 8 partial lanes"},
                                 {"name": "two rows", "idea": "two rows per OpenMP iteration"}])
        self.queues = {
            "translate": [Ok(fenced(BROKEN), 900, 400)],
            "repair": [Ok(edit("    return 0\n}", "    return 0;\n}"), 1200, 60)],
            "optimize": [Status(429, "rate limited", {"retry-after": "0"}), Ok(fenced(UNROLLED), 1500, 500),
                         Ok(fenced(WRONG), 1500, 500), Ok("Use vector loads and fuse the passes.", 1500, 40),
                         Ok(edit("this line is not in the kernel", "x"), 1500, 50)],
            "meta": [Ok(f"```json\n{strategies}\n```", 1400, 200)],
            "meta_child": [],
        }
        self.extra = collections.Counter()
        self.usage: list[tuple[int, int]] = []
        self.kinds = collections.Counter()

    def __call__(self, body: dict):
        k = kind(body)
        self.kinds[k] += 1
        q = self.queues.get(k)
        if q:
            step = q.pop(0)
        elif k == "meta_child":
            src = CHUNK8 if "wider lanes" in body["messages"][-1]["content"] else ROWS2
            step = Ok(fenced(src), 1600, 450)
        elif k.startswith("verify_"):
            src = body["messages"][-1]["content"]
            bad = {"verify_compile": "    return 0\n}" in src,
                   "verify_numerics": "(sum + 1.0)" in src or "UNROLL = 2;" in src}.get(k, False)   # one false alarm
            step = Ok(verdict(not bad, "checked"), 2000, 300)
        elif k in ("optimize", "crossover"):
            self.extra[k] += 1                          # a new, correct kernel each time
            step = Ok(fenced(GOOD + f"constexpr int SPARE_{self.extra[k]} = {self.extra[k]};\n"), 1500, 500)
        else:
            step = Ok("I have no further ideas.", 800, 20)
        if isinstance(step, Ok):
            self.usage.append((step.tokens_in, step.tokens_out))
        return step

    def cost(self) -> float:
        return sum(i * PRICE[0] + o * PRICE[1] for i, o in self.usage) / 1e6


# ---------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def slow_task(tmp_path_factory):
    task = tmp_path_factory.mktemp("task") / "slow_task"
    shutil.copytree(TASK, task)
    (task / "seeds" / "cpu.cpp").write_text(SLOW)
    return task


@pytest.fixture(scope="module", autouse=True)
def env(tmp_path_factory):
    """The key and a build cache in the environment before Ray starts (its workers inherit both)."""
    saved = {k: os.environ.get(k) for k in ("OPENAI_API_KEY", "KEVOLVE_CACHE")}
    os.environ["OPENAI_API_KEY"] = OPENAI_KEY
    os.environ["KEVOLVE_CACHE"] = str(tmp_path_factory.mktemp("kevolve-cache"))
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
             object_store_memory=200 << 20)
    yield
    ray.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def config(task: Path, url: str, **search_kw):
    llm = search_kw.pop("llm", {})
    search_cfg = {**FAST, "population": {"islands": 1, "inspiration_rate": 0.0,
                                         "operators": only({"translate": 0.2, "optimize": 2, "repair": 4, "meta": 1})},
                  "translations": 1, "meta_children": 2, "llm_calls": 2, "in_flight": 3, "verifiers": {"checks": []},
                  **search_kw}
    if "operators" in search_cfg["population"]:
        search_cfg["population"]["operators"] = only(search_cfg["population"]["operators"])
    return from_hydra({"task": {"name": str(task)}, "search": search_cfg, "resources": {"target": "cpu"},
                       "llm": {"provider": "openai", "base_url": url + "/v1", "models": [{"name": "gpt-4.1"}],
                               "max_retries": 3, "backoff_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 30,
                               "max_output_tokens": 2000, **llm},
                       "progress": False})


def rows(run_dir: Path, sql: str) -> list:
    conn = sqlite3.connect(f"file:{run_dir / 'kevolve.db'}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


# ---------------------------------------------------------------------- the run, its replay
@pytest.fixture(scope="module")
def recorded(slow_task, tmp_path_factory):
    script = Script()
    server = LLMServer(respond=script)
    run_dir = tmp_path_factory.mktemp("llm") / "run"
    cfg = config(slow_task, server.url, candidates=9,
                 verifiers={"checks": ["compile", "numerics"], "mode": "shadow"})
    try:
        summary = search.run(cfg, run_dir)
    finally:
        server.stop()
    return summary, run_dir, script, server, cfg


@pytest.mark.slow
def test_the_llm_search_finds_a_kernel_faster_than_its_seed(recorded):
    summary, run_dir, script, server, _ = recorded
    with Store.open(run_dir, readonly=True) as store:
        by_op = collections.defaultdict(list)
        for r in store.candidates():
            by_op[r.candidate.operator].append(r)
        seed = by_op["seed"][0]
        failures = [p for _, _, p in store.events("mutation_failed")]
    assert summary.best is not None and summary.best.confirmed, summary
    assert summary.best.operator != "seed" and summary.best.speedup > 5 * seed.fitness, (summary.best, seed.fitness)
    # translate wrote a kernel that does not compile; repair fixed it with an edit block
    (translated,) = by_op["translate"]
    assert translated.status == "build_failed" and translated.candidate.parents == ()
    repairs = [r for r in by_op["repair"] if r.candidate.parents == (translated.candidate.id,)]
    assert repairs and repairs[0].correct and repairs[0].candidate.meta_dict()["form"] == "edits"
    # a wrong kernel is judged wrong; meta gave several children from one proposal, one per strategy
    assert any(r.candidate.source == WRONG and r.status == "evaluated" and not r.correct for r in by_op["optimize"])
    meta = by_op["meta"]
    assert {r.candidate.meta_dict()["strategy"] for r in meta} == {"wider lanes", "two rows"}
    assert len({r.candidate.meta_dict()["strategy_seed"] for r in meta}) == 1
    # a reply without code and edits that do not apply are failures with their reasons
    reasons = " | ".join(p["reason"] for p in failures)
    assert "no code block" in reasons and "SEARCH text" in reasons, reasons
    # the 429 was retried: the reply after it made a candidate
    assert any(r.candidate.source == UNROLLED for r in by_op["optimize"])
    # every child carries its arm and reward; the model is recorded
    children = [r for r in store_records(run_dir) if r.candidate.operator != "seed" and r.status in ("evaluated",
                                                                                                    "build_failed")]
    assert all(r.arm and r.reward is not None and r.candidate.model == "gpt-4.1" for r in children)
    assert 0 < len(server.requests) == len(script.usage) + 1          # one 429


def store_records(run_dir):
    with Store.open(run_dir, readonly=True) as store:
        return store.candidates()


@pytest.mark.slow
def test_spend_is_the_reported_tokens_times_the_price(recorded):
    summary, run_dir, script, _, _ = recorded
    assert summary.spend_usd == pytest.approx(script.cost(), rel=1e-9, abs=1e-12)
    with Store.open(run_dir, readonly=True) as store:
        assert store.total_cost() == pytest.approx(script.cost(), rel=1e-9)
    assert summary.llm_calls == len(script.usage)


@pytest.mark.slow
def test_verifier_accuracy_from_known_outcomes(recorded):
    """compile says fail exactly for the kernel that does not compile; numerics for the wrong kernel and,
    wrongly, for the unrolled one: its precision is 1/2, its recall 1."""
    summary, run_dir, _, _, _ = recorded
    v = summary.verifiers
    assert v["compile"]["precision"] == 1.0 and v["compile"]["recall"] == 1.0 and v["compile"]["accuracy"] == 1.0
    assert v["numerics"]["precision"] == 0.5 and v["numerics"]["recall"] == 1.0
    judged = rows(run_dir, "SELECT COUNT(*) FROM candidates WHERE screening IS NOT NULL AND status = 'evaluated'")[0][0]
    assert v["compile"]["samples"] == judged + 1                  # + the build failure
    assert 0 < v["numerics"]["accuracy"] < 1 and summary.gpu_seconds_saved == 0.0     # shadow mode drops nothing


@pytest.mark.slow
def test_replay_reproduces_the_run_with_the_server_stopped(recorded, slow_task, tmp_path):
    summary, run_dir, script, server, cfg = recorded
    n_requests = len(server.requests)
    again = tmp_path / "replay"
    cfg = config(slow_task, "http://127.0.0.1:9", candidates=9, llm={"replay": str(run_dir)},
                 verifiers={"checks": ["compile", "numerics"], "mode": "shadow"})
    os.environ.pop("OPENAI_API_KEY")                      # replay needs no key either
    try:
        replayed = search.run(cfg, again)
    finally:
        os.environ["OPENAI_API_KEY"] = OPENAI_KEY
    first = {r.candidate.id: (r.candidate.source, r.candidate.parents, r.status) for r in store_records(run_dir)}
    second = {r.candidate.id: (r.candidate.source, r.candidate.parents, r.status) for r in store_records(again)}
    assert second == first
    def verdicts(d):        # the same verdicts, at no cost the second time
        return {i: [(v["verifier"], v["passed"], v["reason"]) for v in json.loads(s)["verdicts"]]
                for i, s in rows(d, "SELECT id, screening FROM candidates WHERE screening IS NOT NULL")}
    assert verdicts(again) == verdicts(run_dir) and len(verdicts(again)) >= 5
    assert replayed.best.id == summary.best.id or replayed.best.speedup > 5 * 0.1
    assert len(server.requests) == n_requests and replayed.spend_usd == 0.0


@pytest.mark.slow
def test_no_key_in_the_run_dir_the_logs_or_a_workers_environment(recorded, capfd):
    _, run_dir, _, server, _ = recorded
    assert all(r.headers.get("authorization") == f"Bearer {OPENAI_KEY}" for r in server.requests)   # it was used
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert OPENAI_KEY.encode() not in path.read_bytes(), path
    logs = Path(ray._private.worker._global_node.get_session_dir_path()) / "logs"
    for path in logs.rglob("*"):
        if path.is_file() and path.stat().st_size < 50 << 20:
            assert OPENAI_KEY.encode() not in path.read_bytes(), path
    out, err = capfd.readouterr()
    assert OPENAI_KEY not in out + err

    @ray.remote
    def worker_env():
        from kevolve.judge.sandbox import clean_env
        return os.environ.get("OPENAI_API_KEY"), clean_env({})
    actor_env, child_env = ray.get(worker_env.remote())
    assert actor_env == OPENAI_KEY                                    # Ray's workers have it (the LLM actors need it)
    assert "OPENAI_API_KEY" not in child_env and OPENAI_KEY not in child_env.values()   # a candidate's process not


# ---------------------------------------------------------------------- stops
def test_a_missing_key_stops_at_start_naming_the_variable(slow_task, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    cfg = config(slow_task, "http://127.0.0.1:9", candidates=3)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        search.run(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_dollar_budget_stops_the_run(slow_task, tmp_path):
    """Each call costs ~$0.005; before the first reply a call is estimated at 8000 tokens in and 2000 out
    ($0.032). The run stops proposing when spent + calls in flight would pass $0.04 and ends cleanly."""
    script = Script()
    server = LLMServer(respond=script)
    try:
        summary = search.run(config(slow_task, server.url, candidates=40, dollars=0.04,
                                    population={"islands": 1, "operators": {"knob": 0, "optimize": 1}}),
                            tmp_path / "run")
    finally:
        server.stop()
    assert summary.stopped.startswith("dollar budget"), summary
    assert summary.candidates < 40 and summary.spend_usd == pytest.approx(script.cost(), rel=1e-9)
    assert summary.spend_usd <= 0.04 + 0.01


@pytest.mark.slow
def test_knob_childrens_verifier_calls_count_against_the_dollar_budget(tmp_path):
    """Knob mutation calls no LLM, but with LLM verifiers every knob child costs their calls: a budget of under two
    verifier calls' first estimate ($0.032 each) stops a knob-only run long before its 30 candidates, within it."""
    script = Script()
    server = LLMServer(respond=script)
    try:
        summary = search.run(config(TASK, server.url, candidates=30, dollars=0.05, translations=0,
                                    population={"islands": 1, "operators": {"knob": 1}},
                                    verifiers={"checks": ["compile"], "mode": "shadow"}), tmp_path / "run")
    finally:
        server.stop()
    assert summary.stopped.startswith("dollar budget"), summary
    assert script.kinds["verify_compile"] >= 1 and set(script.kinds) == {"verify_compile"}, script.kinds
    assert summary.candidates < 30 and summary.spend_usd == pytest.approx(script.cost(), rel=1e-9)
    assert summary.spend_usd <= 0.05
