"""An LLM that never answers, end to end on the CPU: `kevolve.search.run` with four models behind four loopback
endpoints (tests/llm/llm_servers.py, the real `openai` client) — one refuses connections, one hangs past
`llm.timeout_s`, one answers 429 with Retry-After, one answers 500 — and the paper's pipeline weighted (translate
founders, optimize, meta, repair, crossover, knob, the three LLM verifiers in shadow mode).

Proven: the seeds and knob children keep the evaluator busy (>= 80% of the search's time) although every LLM call
fails; the console says why (the cause of each kind of failure, on the progress line and in a notice when the LLM is
paused) and the summary counts the failures per provider/model; no candidate waits for a shadow verifier. And an
LLM-only run (knob weighted 0) stops once the LLM is paused, its summary saying so (`python -m kevolve` exits 2).
"""
from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys

import pytest

from kevolve.search import driver as search
from kevolve.record.store import TERMINAL, Store
from llm_kit import ROOT, TASK, config, ray_with
from llm_servers import Hang, LLMServer, Status

PIPELINE = {"knob": 1, "translate": 0.5, "optimize": 4, "meta": 1, "repair": 1, "crossover": 0.5}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def endpoints():
    servers = {"hangs": LLMServer(respond=lambda body: Hang(30.0)),
               "limited": LLMServer(respond=lambda body: Status(429, "slow down", {"retry-after": "1"})),
               "broken": LLMServer(respond=lambda body: Status(500, "internal error"))}
    urls = {name: s.url + "/v1" for name, s in servers.items()}
    urls["refuses"] = f"http://127.0.0.1:{closed_port()}/v1"
    yield urls
    for s in servers.values():
        s.stop()


def llm(urls: dict) -> dict:
    return {"provider": "local", "base_url": urls["refuses"], "timeout_s": 2, "max_retries": 2,
            "down_after": 6, "probe_s": 20, "concurrency": 4,
            "models": [{"name": name, "base_url": url} for name, url in urls.items()]}


@pytest.mark.slow
def test_a_dead_llm_leaves_no_evaluator_idle_and_says_why(tmp_path, endpoints, capfd):
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    cfg = config(task, llm(endpoints), candidates=10, wall_time_s=240, population={"operators": PIPELINE},
                 verifiers={"checks": ["compile", "memory", "numerics"]}, translations=2)
    cfg.search.llm_calls = cfg.search.in_flight = None          # sized by the plan, as a user's run is
    cfg.progress = True
    run_dir = tmp_path / "run"
    with ray_with({}, tmp_path / "cache"):
        summary = search.run(cfg, run_dir)
    err = capfd.readouterr().err
    print(f"evaluators busy {summary.evaluator_busy:.0%} in {summary.search_seconds:.0f} s; {summary.llm_health}")
    print("\n".join(line for line in err.splitlines() if "LLM" in line or line.startswith("[")))
    assert summary.best is not None and summary.candidates == 10, summary
    assert summary.evaluator_busy >= 0.8, summary
    h = summary.llm_health
    assert h["failed"] == h["calls"] >= 6 and h["pauses"] >= 1, h
    assert {m.split("/", 1)[1] for m, c in h["models"].items() if c["failed"]} <= set(endpoints)
    said = {"refuses": f"connection refused at {endpoints['refuses']}",
            "hangs": f"no reply within 2 s at {endpoints['hangs']}",
            "limited": f"HTTP 429 (rate limited) at {endpoints['limited']}",
            "broken": f"HTTP 500 (server error) at {endpoints['broken']}"}
    for name, c in h["models"].items():                # each model's failures under its own cause
        assert set(c["causes"]) == {said[name.split("/", 1)[1]]}, (name, c)
    assert "calls in a row failed" in err and "going on with knob mutation" in err
    assert any(line.startswith("[") and "calls failed:" in line for line in err.splitlines())
    assert any(cause in err for cause in said.values())
    with Store.open(run_dir, readonly=True) as store:
        records = store.candidates()
        paused = [p for _, _, p in store.events("llm_health")]
    assert paused and paused[0]["paused"]
    assert sum(r.candidate.operator == "knob" for r in records) >= 8   # knob wrote what the LLM could not


@pytest.mark.slow
def test_an_llm_only_run_stops_when_the_llm_is_down_and_exits_2(tmp_path, endpoints):
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    run_dir = tmp_path / "run"
    refused = endpoints["refuses"]
    proc = subprocess.run(
        [sys.executable, "-m", "kevolve", f"task={task}", "llm=local", f"llm.base_url={refused}",
         "llm.max_retries=1", "llm.backoff_s=0.01", "llm.down_after=3", "llm.probe_s=600",
         "resources.target=cpu", "search.population.operators.knob=0", "search.population.islands=1",
         "search.reps=5", "search.budget_s=0.02", "search.baselines=[eager]", "search.wall_time_s=200",
         f"run_dir={run_dir}", "progress=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"connection refused at {refused}" in proc.stderr
    assert "weight knob mutation (search.population.operators.knob=1)" in proc.stderr
    with Store.open(run_dir, readonly=True) as store:          # the run's record is kept: the seeds judged
        (finish,) = [p for _, _, p in store.events("finish")]
        records = store.candidates()
        assert records and finish["llm_health"]["ended"]
    assert re.match(r"the LLM failed \d+ calls in a row \(connection refused at ", finish["stopped"])
    assert all(r.status in TERMINAL for r in records)       # what was in flight was judged before it stopped
