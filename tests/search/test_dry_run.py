"""`search.dry_run=true`: the first prompts composed and priced, nothing called. Run as a user runs it
(`python -m kevolve ... search.dry_run=true`) with OPENAI_BASE_URL pointing at a loopback server that counts
requests, and the estimate's arithmetic checked against its own table."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from kevolve.config import from_hydra
from kevolve.search.estimate import CHARS_PER_TOKEN, REPLY_TOKENS, estimate
from kevolve.search.plan import resolve
from kevolve.task import load_task
from llm_kit import TASK
from llm_servers import OPENAI_KEY, LLMServer

ROOT = Path(__file__).resolve().parents[2]


def dry(tmp_path: Path, *overrides: str, key: bool = True) -> tuple[subprocess.CompletedProcess, LLMServer]:
    server = LLMServer()
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["OPENAI_BASE_URL"] = server.url + "/v1"
    if key:
        env["OPENAI_API_KEY"] = OPENAI_KEY
    try:
        proc = subprocess.run([sys.executable, "-m", "kevolve", f"task={TASK}", *overrides, "search.dry_run=true",
                               f"hydra.run.dir={tmp_path / 'run'}"], env=env, capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
    finally:
        server.stop()
    return proc, server


def test_a_dry_run_prices_the_first_prompts_and_calls_nothing(tmp_path):
    proc, server = dry(tmp_path, "llm=openai", "search.candidates=20")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert server.requests == []                                    # nothing reached the (loopback) network
    assert not (tmp_path / "run" / "kevolve.db").exists() and not (tmp_path / "run" / "llm_cache.sqlite").exists()
    out = proc.stdout
    for prompt in ("translate", "optimize", "meta: strategies", "meta: one strategy's child", "repair", "crossover",
                   "verify_compile", "verify_memory", "verify_numerics"):
        assert f"\n  {prompt} " in out, prompt
    assert "OPENAI_API_KEY is set" in out and OPENAI_KEY not in out + proc.stderr
    data = json.loads(out.strip().splitlines()[-1])
    assert data["dry_run"] and data["candidates"] == 20 and data["expected"]["run_usd"] > 0
    assert all(c["tokens_in"] > 500 for c in data["expected"]["calls"])
    assert f"${data['expected']['llm_candidate_usd']:.4f} when the LLM writes it" in out


def test_a_dry_run_without_the_key_says_so_and_still_exits_0(tmp_path):
    proc, server = dry(tmp_path, "llm=openai", "llm.models=[{name: my-model}]", key=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "OPENAI_API_KEY is NOT set" in proc.stdout and server.requests == []
    assert "WARNING: no price for my-model" in proc.stdout


def test_a_dry_run_without_an_llm_says_it_is_the_knob_search(tmp_path):
    proc, _ = dry(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no LLM (llm=none): the knob search" in proc.stdout
    assert json.loads(proc.stdout.strip().splitlines()[-1])["expected"]["run_usd"] == 0


def plan_of(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[f"task.name={TASK}", *overrides])
    task = load_task(TASK)
    return resolve(from_hydra(cfg), task, {"CPU": 2}), task


def test_the_estimate_adds_up():
    """Per call: tokens in = characters / CHARS_PER_TOKEN, out = the prior, priced at the models' mix (gpt-5 weight
    1, gpt-5-mini weight 2); per meta child: the strategies call shared by K children plus the child's own call;
    per LLM-made candidate: the operators mixed by weight × children, plus every verifier's call."""
    plan, task = plan_of("llm=openai", "search.meta_children=4")
    est = estimate(plan, task)
    calls = {c.name: c for c in est.calls}
    for c in est.calls:
        assert c.tokens_in == math.ceil(c.chars / CHARS_PER_TOKEN)
        mix = (1 * (c.tokens_in * 1.25 + c.tokens_out * 10) + 2 * (c.tokens_in * 0.25 + c.tokens_out * 2)) / 3e6
        assert c.usd == pytest.approx(mix)
    assert calls["optimize"].tokens_out == REPLY_TOKENS["kernel"] and calls["verify_memory"].tokens_out == 1500
    meta = calls["meta: strategies"].usd / 4 + calls["meta: one strategy's child"].usd
    assert est.per_child_usd["meta"] == pytest.approx(meta)
    verify = sum(calls[f"verify_{v}"].usd for v in ("compile", "memory", "numerics"))
    w = {"translate": 0.5, "optimize": 4.0, "crossover": 0.5, "repair": 1.0, "meta": 4.0}    # meta: 1 × 4 children
    mixed = sum(w[op] * est.per_child_usd[op] for op in w) / sum(w.values())
    assert est.llm_candidate_usd == pytest.approx(mixed + verify) and est.knob_candidate_usd == pytest.approx(verify)
    seeds = len(plan.seeds)
    assert est.run_usd == pytest.approx(seeds * verify + (plan.candidates - seeds) * (mixed + verify))
    fewer = estimate(plan_of("llm=openai", "search.verifiers.checks=[]", "search.population.operators.meta=0")[0], task)
    assert ("meta" not in fewer.per_child_usd and fewer.verify_usd == 0
            and fewer.llm_candidate_usd < est.llm_candidate_usd)
