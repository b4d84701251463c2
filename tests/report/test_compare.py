"""Contracts of the report's comparison (kevolve.report.data.compared, html): runs side by side at the same budget —
each run's best within the first n verdicts, n the fewest any run reached — with how each searched (evolution or
best-of-N, LLM operators or knob only), its LLM calls, LLM-made candidates and spend, and the configuration that
differs between them."""
from __future__ import annotations

from pathlib import Path

import pytest

from kevolve.messages import Candidate
from kevolve.report import data
from kevolve.report.html import render
from kevolve.record.store import Store
from kevolve.record import events
from test_report import SEED, evaluation


def make(run_dir: Path, mode: str, speeds: list[float], models: list[str | None], calls: int) -> Path:
    """A run whose candidates are judged at `speeds` in order (0: wrong), written by `models` (None: seed/knob)."""
    config = {"search": {"mode": mode, "candidates": 4, "wall_time_s": 60.0}, "llm": {"provider": "openai"}}
    with Store.create(run_dir, {"task": "search_task", "config": config}) as s:
        repair = 0.0 if mode == "best_of_n" else 1.0
        s.log_event(events.Plan({"mode": mode, "llm": "openai", "operators": {"knob": 1.0, "optimize": 4.0,
                                                                            "repair": repair},
                                 "verifiers": [], "candidates": 4, "wall_time_s": 60.0, "dollars": None}))
        for i, (speed, model) in enumerate(zip(speeds, models)):
            c = Candidate.new(SEED + f"// {i}\n", operator="seed" if i == 0 else "optimize" if model else "knob",
                              model=model)
            s.add_candidate(c, cost_usd=0.01 if model else 0.0)
            s.record_evaluation(c.id, evaluation(speed, speed > 0) if speed else evaluation(1, False), 1.0)
        s.log_event(events.Finish({"stopped": "budget of candidates spent", "llm_calls": calls}))
    return run_dir


@pytest.fixture
def runs(tmp_path):
    evolved = make(tmp_path / "evolve", "evolve", [1.0, 1.5, 2.0, 0.0], [None, "gpt-5", "gpt-5", "gpt-5"], 5)
    sampled = make(tmp_path / "best_of_n", "best_of_n", [1.0, 1.2, 0.0, 1.1, 3.0],
                   [None, "gpt-5", "gpt-5", None, "gpt-5"], 6)
    return [data.load(evolved), data.load(sampled)]


def test_runs_are_compared_at_the_fewest_verdicts_any_reached(runs):
    n, rows, differ = data.compared(runs)
    assert n == 4
    evolved, sampled = rows
    # fitness is the faster torch baseline's time (compile, 0.8) over the kernel's (1 / speed): 0.8 × speed
    assert evolved["best_at_n"] == pytest.approx(1.6) and sampled["best_at_n"] == pytest.approx(0.96)
    assert data.best_within(runs[1], 5) == pytest.approx(2.4)        # its fifth, past the common budget, not counted
    assert evolved["search"] == "evolution, LLM (openai: optimize, repair)"
    assert sampled["search"] == "best-of-N, LLM (openai: optimize)"
    assert (evolved["llm_made"], evolved["llm_made_correct"], evolved["llm_calls"]) == (3, 2, 5)
    assert (sampled["llm_made"], sampled["llm_made_correct"], sampled["llm_calls"]) == (3, 2, 6)
    assert evolved["dollars"] == pytest.approx(0.03)
    assert ("search.mode", ["evolve", "best_of_n"]) in differ and all(k != "search.candidates" for k, _ in differ)


def test_the_report_puts_them_side_by_side(runs, tmp_path):
    path, pngs = render(runs, tmp_path / "out")
    html = path.read_text()
    assert "Runs compared" in html and "best at 4" in html
    assert "evolution, LLM (openai: optimize, repair)" in html and "best-of-N, LLM (openai: optimize)" in html
    assert "configuration that differs between the runs" in html and "search.mode" in html
    assert "1.60x" in html and "0.96x" in html and "different budgets" not in html
    assert any(p.stem == "comparison" for p in pngs)


def test_a_knob_only_run_is_named_so(tmp_path):
    run = make(tmp_path / "knob", "evolve", [1.0, 1.3], [None, None], 0)
    with Store.open(run) as s:
        s.log_event(events.Plan({"mode": "evolve", "llm": "none", "operators": {"knob": 1.0, "optimize": 0.0}}))
    assert data.search_kind(data.load(run)) == "evolution, knob only"
