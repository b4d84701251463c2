"""Contracts of kevolve.search.pacing and its place in the plan: the LLM proposals in flight start at the formula's
value for the priors, follow the latencies the run measures (LLM replies, the children they give, judgements),
stay within their bounds, and do not move when `search.llm_calls` fixes them."""
from __future__ import annotations

from pathlib import Path

import pytest

from kevolve.config import from_hydra
from kevolve.search import pacing
from kevolve.search.pacing import Pacer
from kevolve.search.plan import resolve
from kevolve.task import load_task

TASK = Path(__file__).resolve().parents[1] / "search_task"


def test_the_formula_is_the_issues_example():
    """8 GPUs judging in 4 s, 60 s replies of one child each: 120 calls, and a quarter more for the variance."""
    assert pacing.wanted(8, 60.0, 4.0, 1.0) == 150
    assert pacing.wanted(8, 60.0, 4.0, 4.0) == 38                   # meta: four children per proposal
    assert pacing.wanted(1, 2.0, 30.0) == 1                         # fast replies, slow judgements: one
    assert pacing.wanted(1, 60.0, 4.0, 0.0) == pacing.wanted(1, 60.0, 4.0, pacing.MIN_YIELD)   # no zero division


def test_the_target_follows_measured_latencies_within_bounds():
    p = Pacer(evaluators=2, target="cuda", least=1, most=64, initial=10)
    for _ in range(8):
        p.judged(4.0)
    for _ in range(8):                                              # 20 s replies, one child each
        p.returned(20.0, 1)
    assert p.target == pacing.wanted(2, 20.0, 4.0) == 13
    for _ in range(pacing.WINDOW):                                  # the service slows to 100 s
        p.returned(100.0, 1)
    assert pacing.wanted(2, 100.0, 4.0) == 63 and 57 <= p.target <= 63     # within a tenth of it
    for _ in range(pacing.WINDOW):                                  # and the judge to 1 s: capped at most
        p.judged(1.0)
    assert p.target == 64 and p.capped
    m = p.measured()
    assert (m["latency_s"], m["judge_s"], m["candidates_per_call"]) == (100.0, 1.0, 1.0)


def test_replies_without_kernels_raise_the_target():
    p = Pacer(evaluators=1, target="cpu", least=1, most=100, initial=2)
    for _ in range(4):
        p.judged(10.0)
    for _ in range(4):
        p.returned(40.0, 1)
    good = p.target
    for _ in range(pacing.WINDOW):
        p.returned(40.0, 0)                                         # every reply a failure or a duplicate
    assert p.target > good and p.target == pacing.wanted(1, 40.0, 10.0, pacing.MIN_YIELD)


def test_small_changes_do_not_move_a_large_target():
    p = Pacer(evaluators=8, target="cuda", least=1, most=1000, initial=150)
    for _ in range(pacing.WINDOW):
        p.judged(4.0)
    moved = [p.returned(60.0 * 1.05, 1) for _ in range(pacing.WINDOW)]     # 5% slower: within a tenth
    assert not any(moved) and p.target == 150


def test_a_fixed_number_never_moves():
    p = Pacer(evaluators=8, target="cuda", least=5, most=5)
    assert p.target == 5 and not p.adaptive
    for _ in range(pacing.WINDOW):
        assert not p.returned(300.0, 0) and not p.judged(0.1)
    assert p.target == 5 and p.capped


def test_bounds_are_checked():
    with pytest.raises(ValueError, match="least <= most"):
        Pacer(1, "cpu", 4, 2)


def config(**search):
    return from_hydra({"task": {"name": str(TASK)}, "search": search,
                       "llm": {"provider": "local", "base_url": "http://127.0.0.1:9/v1", "models": [{"name": "m"}],
                               "concurrency": 8}})


@pytest.mark.parametrize("cluster,target,start", [({"CPU": 8}, "cpu", 3), ({"CPU": 32, "GPU": 8}, "cuda", 8)])
def test_the_plan_starts_from_the_priors_and_bounds_by_the_endpoints(cluster, target, start):
    task = load_task(TASK)
    plan = resolve(config(population={"operators": {"optimize": 1}}), task, cluster)
    assert plan.target == target and (plan.llm_calls_min, plan.llm_calls_max) == (1, 8)
    assert plan.llm_calls == start == min(8, pacing.start(plan.evaluators, target, 1, 8))
    assert plan.in_flight_follows_llm and plan.in_flight == 4 * plan.evaluators + start
    fixed = resolve(config(llm_calls=5, in_flight=7, population={"operators": {"optimize": 1}}), task, cluster)
    assert (fixed.llm_calls, fixed.llm_calls_min, fixed.llm_calls_max) == (5, 5, 5)
    assert fixed.in_flight == 7 and not fixed.in_flight_follows_llm


def test_builds_follow_build_and_judgement_times_within_the_builders():
    """E × B / J builds at once (a quarter more), at least one, never more builders than the plan has: the H200's
    layernorm_fwd knob search (7 s builds, 2.5 s judgements, one evaluator) wants 4, not the 2 its base bound gave."""
    assert pacing.builds_wanted(1, 7.0, 2.5, 14) == 4
    assert pacing.builds_wanted(8, 20.0, 2.0, 30) == 30              # capped by the builders
    assert pacing.builds_wanted(1, 0.0, 12.0, 14) == 1               # cached builds: one is plenty
    b = pacing.Builds(evaluators=1, builders=14)
    for s in (7.0, 6.5):
        b.built(s)
        b.judged(2.5)
    assert b.wanted() is None                                        # not before three of each
    b.built(8.0)
    b.judged(0.0)                                                    # a judgement of no time is not one
    assert b.wanted() is None
    b.judged(2.4)
    assert b.wanted() == pacing.builds_wanted(1, 7.0, 2.5, 14)       # medians


def test_the_plan_follows_builds_unless_in_flight_is_set():
    task = load_task(TASK)
    assert resolve(config(), task, {"CPU": 8}).in_flight_follows_builds
    assert not resolve(config(in_flight=3), task, {"CPU": 8}).in_flight_follows_builds
