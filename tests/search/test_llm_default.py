"""`llm=openai` and nothing else about the LLM, end to end as a user runs it: `python -m kevolve task=... llm=openai`
in its own process, the key in OPENAI_API_KEY and the endpoint in OPENAI_BASE_URL (read by the real `openai`
client), pointed at the loopback OpenAI server of tests/llm answered by a scripted model (scripted_model.py).

Set on the command line besides `llm=openai`: the task, the budget (candidates) and the judge's timing (reps,
budget_s, eager as the one baseline) so that the run is short, and `logger=wandb` (offline) so that W&B's files
exist to be searched for the key. No operator weight, verifier or LLM setting is given: the pipeline's defaults are
what is tested.

Proven: the search calls the LLM, judges at least three LLM-made candidates, records their spend (the store's
total equals the summary's and the usage the server reported, priced), the verifiers' verdicts and their
accuracy; and the key is written nowhere — not in the run directory (store, response cache, Hydra's logs, W&B's
offline files), the HTML report, the driver's output, Ray's logs, or the environment of a judge's worker process
(read from /proc while the search runs).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from kevolve.llm.pricing import Pricer
from kevolve.search.llm_defaults import PIPELINE
from kevolve.record.store import Store
from llm_kit import TASK
from llm_servers import OPENAI_KEY, LLMServer
from scripted_model import ScriptedModel

pytestmark = pytest.mark.slow


class WorkerEnvironments(threading.Thread):
    """Reads /proc/<pid>/environ of every `kevolve.judge.worker` process while it runs (as root, as the tests run
    here and in CI; a worker is made non-dumpable once confined)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen: dict[int, bool] = {}          # pid -> whether the key was in its environment
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit() or int(proc.name) in self.seen:
                    continue
                try:
                    if b"kevolve.judge.worker" not in (proc / "cmdline").read_bytes():
                        continue
                    env = (proc / "environ").read_bytes()
                except OSError:
                    continue
                self.seen[int(proc.name)] = OPENAI_KEY.encode() in env or b"OPENAI_API_KEY" in env
            self.stop.wait(0.1)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    seed = (TASK / "seeds" / "cpu.cpp").read_text()
    model = ScriptedModel(seed, "forward")
    server = LLMServer(respond=model)
    base = tmp_path_factory.mktemp("default")
    run_dir, ray_tmp = base / "run", Path(tempfile.mkdtemp(prefix="kr", dir="/tmp"))   # Ray's socket paths are short
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVOLVE_", "WANDB_", "RAY_"))}
    env.update(OPENAI_API_KEY=OPENAI_KEY, OPENAI_BASE_URL=server.url + "/v1", RAY_TMPDIR=str(ray_tmp),
               KEVOLVE_CACHE=str(base / "cache"), WANDB_SILENT="true")
    cmd = [sys.executable, "-m", "kevolve", f"task={TASK}", "llm=openai", "logger=wandb", "search.candidates=8",
           "search.reps=5", "search.budget_s=0.02", "search.baselines=[eager]", f"hydra.run.dir={run_dir}"]
    watcher = WorkerEnvironments()
    watcher.start()
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=540, cwd=base)
        report = subprocess.run([sys.executable, "-m", "kevolve.report", str(run_dir)], env=env, capture_output=True,
                                text=True, timeout=300, cwd=base)
    finally:
        watcher.stop.set()
        watcher.join(timeout=5)
        server.stop()
    yield proc, report, run_dir, ray_tmp, server, model, watcher, time.perf_counter() - started
    shutil.rmtree(ray_tmp, ignore_errors=True)


def test_the_search_calls_the_llm_and_judges_llm_made_candidates(default_run):
    proc, _, run_dir, _, server, model, _, _ = default_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert server.requests and all(r.headers.get("authorization") == f"Bearer {OPENAI_KEY}" for r in server.requests)
    with Store.open(run_dir, readonly=True) as store:
        records = store.candidates()
        (plan,) = [p for _, _, p in store.events("plan")]
    made = [r for r in records if r.candidate.model is not None and r.status == "evaluated"]
    assert len(made) >= 3, [(r.candidate.operator, r.status) for r in records]
    assert len([r for r in records if r.candidate.operator == "translate" and not r.candidate.parents]) == 2
    assert plan["operators"] == PIPELINE and plan["verifiers"] == ["compile", "memory", "numerics"]
    assert plan["verifier_mode"] == "shadow" and plan["expected"]["llm_candidate_usd"] > 0
    assert model.kinds["translate"] >= 2 and model.kinds["verify_compile"] >= 3
    assert summary["llm_calls"] == len(server.requests) >= 3
    # the start says what is on and what a candidate is expected to cost
    assert "operators (weights): knob 1, translate 0.5, optimize 4, crossover 0.5, repair 1, meta 1" in proc.stderr
    assert "verifiers: compile, memory, numerics (shadow" in proc.stderr
    assert "expected cost per candidate: $" in proc.stderr


def test_spend_is_recorded_as_the_usage_the_server_reported_priced(default_run):
    proc, _, run_dir, _, server, model, _, _ = default_run
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    pricer = Pricer()
    billed = sum(pricer.cost(name, tokens_in, tokens_out) for name, tokens_in, tokens_out in model.usage)
    assert len(model.usage) == len(server.requests) and {m for m, _, _ in model.usage} <= {"gpt-5", "gpt-5-mini"}
    with Store.open(run_dir, readonly=True) as store:
        total = store.total_cost()
    assert billed > 0 and total == pytest.approx(billed, rel=1e-9)
    assert summary["spend_usd"] == pytest.approx(billed, rel=1e-4)


def test_verifier_verdicts_and_their_accuracy_are_recorded(default_run):
    proc, _, run_dir, _, _, _, _, _ = default_run
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(summary["verifiers"]) == {"compile", "memory", "numerics"}
    for name, v in summary["verifiers"].items():
        assert v["samples"] >= 3 and v["accuracy"] is not None and not v["earned"], (name, v)
    with Store.open(run_dir, readonly=True) as store:
        screened = [r for r in store.candidates() if r.screening]
    assert len(screened) >= 3 and all(len(r.screening["verdicts"]) == 3 for r in screened)
    assert all(r.screening["decision"]["build"] for r in screened)           # shadow: nothing dropped
    assert "LLM verifiers against the judge" in proc.stdout


def test_the_key_is_written_nowhere(default_run):
    proc, report, run_dir, ray_tmp, _, _, watcher, _ = default_run
    assert report.returncode == 0, report.stderr[-2000:]
    key = OPENAI_KEY.encode()
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any("wandb" in p.parts for p in files) and (run_dir / "report" / "report.html").is_file()
    assert (run_dir / "kevolve.db").is_file() and (run_dir / "llm_cache.sqlite").is_file()
    for path in files:
        assert key not in path.read_bytes(), path
    logs = [p for p in ray_tmp.rglob("*") if p.is_file() and p.stat().st_size < 50 << 20]
    assert any(p.suffix in (".log", ".out", ".err") for p in logs)
    for path in logs:
        assert key not in path.read_bytes(), path
    assert OPENAI_KEY not in proc.stdout + proc.stderr + report.stdout + report.stderr
    assert watcher.seen, "no judge worker process was seen running"
    assert not any(watcher.seen.values()), watcher.seen                 # no worker had the key in its environment
