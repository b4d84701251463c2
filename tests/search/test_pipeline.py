"""Contracts of kevolve.search.llm_defaults, through Hydra as a user composes it: `llm=<provider>` alone turns on the
paper's pipeline (LLM operators weighted, translate founders, three verifiers in shadow mode), `llm=none` stays the
knob search, every weight a user sets is kept, and `search.mode=best_of_n` spends the budget as independent samples
from the seeds."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from kevolve.config import ConfigError, from_hydra
from kevolve.search.llm_defaults import KNOB_ONLY, PIPELINE
from kevolve.search.plan import resolve
from kevolve.task import load_task

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tests" / "search_task"


def plan(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[f"task.name={TASK}", *overrides])
    return resolve(from_hydra(cfg), load_task(TASK), {"CPU": 2})


@pytest.mark.parametrize("provider", ["openai", "gemini", "local"])
def test_choosing_an_llm_alone_runs_the_papers_pipeline(provider):
    p = plan(f"llm={provider}")
    assert p.population.operators == PIPELINE
    assert {"translate", "optimize", "meta", "repair", "crossover", "knob"} <= set(p.llm_operators) | {"knob"}
    assert p.population.operators["knob"] > 0 and p.population.operators["red_team"] == 0
    assert p.translations == 2 and p.llm_calls >= 1
    assert p.verifiers.checks == ["compile", "memory", "numerics"] and p.verifiers.mode == "shadow"
    assert (p.mode, p.seeds_only, p.strategies_shown) == ("evolve", False, 3)


def test_no_llm_is_the_knob_search():
    p = plan()
    assert p.population.operators == KNOB_ONLY and p.llm is None
    assert p.verifiers.checks == [] and p.translations == 0 and p.llm_operators == ()


def test_every_weight_and_the_verifiers_a_user_sets_are_kept():
    p = plan("llm=openai", "search.population.operators.meta=0", "search.population.operators.optimize=7",
             "search.population.operators.red_team=0.25", "search.verifiers.checks=[numerics]",
             "search.verifiers.mode=filter")
    assert p.population.operators == {**PIPELINE, "meta": 0.0, "optimize": 7.0, "red_team": 0.25}
    assert p.verifiers.checks == ["numerics"] and p.verifiers.mode == "filter"
    assert plan("llm=openai", "search.verifiers.checks=[]").verifiers.checks == []
    off = plan("llm=openai", "search.population.operators.translate=0")
    assert off.translations == 0 and "translate" not in off.llm_operators


def test_every_weight_zero_is_refused_naming_the_field():
    zeros = [f"search.population.operators.{op}=0" for op in PIPELINE]
    with pytest.raises(ConfigError, match="'search.population.operators'"):
        plan("llm=openai", *zeros)


def test_best_of_n_samples_from_the_seeds_with_no_operator_that_builds_on_other_samples():
    p = plan("llm=openai", "search.mode=best_of_n")
    assert p.seeds_only and p.mode == "best_of_n"
    assert p.population.operators == {**PIPELINE, "repair": 0.0, "crossover": 0.0}
    assert p.population.inspiration_rate == 0.0 and p.strategies_shown == 0
    knob = plan("search.mode=best_of_n")
    assert knob.seeds_only and knob.population.operators == KNOB_ONLY


@pytest.mark.parametrize("override,field", [
    ("search.population.operators.repair=1", "search.population.operators.repair"),
    ("search.population.operators.crossover=0.5", "search.population.operators.crossover"),
    ("search.choice=ucb1", "search.choice"),
])
def test_best_of_n_refuses_what_would_make_samples_depend_on_each_other(override, field):
    with pytest.raises(ConfigError, match=f"'{field}'.*best_of_n"):
        plan("llm=openai", "search.mode=best_of_n", override)


def test_a_bad_mode_names_the_field():
    with pytest.raises(ConfigError, match="'search.mode'"):
        plan("search.mode=sample")
