"""Configurations drawn from a task's domain (kevolve/task/draw.py): inside it, bounded, secret per salt, reaching
every extreme over a run; the release sweep; shrinking a failure."""
from __future__ import annotations

import random

import pytest

from kevolve.config.tasks import list_tasks
from kevolve.task import draw, load_task
from kevolve.task.domain import config_bytes, outside


@pytest.mark.parametrize("name", list_tasks())
def test_every_draw_lies_in_the_domain_and_within_the_targets_budget(name):
    task = load_task(name)
    for target in ("cpu", "cuda"):
        rng = random.Random(1)
        cases = [c for _ in range(8) for c in draw.for_judgement(task, target, rng)]
        cases += list(draw.sweep(task, target, rng, 60)) + list(draw.corners(task, target))
        assert cases
        for c in cases:
            assert c.drawn and c.id.startswith("drawn:")
            assert outside(task, c.size_dict, c.scalar_dict, c.init, target) is None, (target, c.id)


@pytest.mark.parametrize("name", list_tasks())
def test_a_judgements_draws_stay_within_a_few_budgets(name):
    """The cost is bounded: one configuration at the whole budget at most, the rest small or an eighth of it."""
    task = load_task(name)
    for target in ("cpu", "cuda"):
        for salt in range(5):
            cases = draw.for_judgement(task, target, random.Random(salt))
            assert 2 <= len(cases) <= 3 + len(task.init_sets)
            assert sum(config_bytes(task, c.size_dict) for c in cases) <= 3 * task.domain.budget(target)


def test_different_salts_draw_different_configurations():
    task = load_task("layernorm_fwd")
    seen = {tuple(c.id for c in draw.for_judgement(task, "cpu", random.Random(s))) for s in range(20)}
    assert len(seen) == 20


@pytest.mark.parametrize("name", ["layernorm_fwd", "layernorm_bwd", "rmsnorm_fwd", "cross_entropy_bwd",
                                  "mnist_linear_fwd", "unet_conv2d_fwd"])
def test_over_a_run_every_size_reaches_its_largest_and_every_scalar_both_ends(name):
    """32 judgements (a quick start): each size at the largest value the CPU budget allows it (with the others
    at their least), each scalar at its minimum and maximum, and every init family."""
    task = load_task(name)
    rng = random.Random(7)
    cases = [c for _ in range(32) for c in draw.for_judgement(task, "cpu", rng)]
    for s in task.domain.sizes:
        if s.lo == s.hi:
            continue
        largest = max(c.size_dict[s.name] for c in draw.corners(task, "cpu"))
        assert max(c.size_dict[s.name] for c in cases) >= largest, s.name
    for r in task.domain.scalars:
        values = {c.scalar_dict[r.name] for c in cases}
        assert r.lo in values and r.hi in values, (r.name, sorted(values)[:3], sorted(values)[-3:])
    assert {c.init for c in cases} == set(task.init_sets)


def test_draws_mix_in_odd_prime_and_unaligned_sizes():
    task = load_task("layernorm_fwd")
    rng = random.Random(3)
    ns = [c.size_dict["N"] for _ in range(40) for c in draw.for_judgement(task, "cpu", rng)]
    assert any(n % 2 for n in ns) and any(n % 16 and n > 64 for n in ns) and 1 in ns
    assert any(n > 1000 and all(n % p for p in range(2, 100)) for n in ns)       # a large prime-ish one


def test_the_sweep_holds_the_corners_under_every_init_and_the_count_asked():
    task = load_task("layernorm_fwd")
    sweep = draw.sweep(task, "cpu", random.Random(0), 200)
    assert len(sweep) == 200 and len({c.id for c in sweep}) == 200
    corner_points = {(c.sizes, c.scalars, c.init) for c in draw.corners(task, "cpu")}
    assert corner_points <= {(c.sizes, c.scalars, c.init) for c in sweep}
    assert {"offset"} <= {c.init for c in sweep if c.size_dict["N"] <= 1 << 20}
    assert not [c for c in sweep if c.init == "offset" and c.size_dict["N"] > 1 << 20]


def test_shrink_finds_the_smallest_failing_configuration_by_bisection():
    task = load_task("layernorm_fwd")
    start = draw.case(task, {"B": 7, "N": 2030592}, {"eps": 0.05}, "tiny", 11)
    calls = []

    def beyond_listed_rows(c):               # wrong only on rows longer than the small set's longest
        calls.append(c)
        return "wrong" if c.size_dict["N"] > 262147 else None
    small, why, used = draw.shrink(task, "cpu", start, beyond_listed_rows, 40)
    assert why == "wrong" and small.size_dict["B"] == 1 and small.scalar_dict["eps"] == 1e-5
    assert 262147 < small.size_dict["N"] <= 1.25 * 262148 and used == len(calls) <= 40
    assert small.init == "tiny" and small.seed == 11

    def capped_eps(c):                       # wrong only where eps is above 0.01
        return "wrong" if c.scalar_dict["eps"] > 0.01 else None
    small, why, _ = draw.shrink(task, "cpu", start, capped_eps, 40)
    assert small.size_dict == {"B": 1, "N": 1} and small.scalar_dict["eps"] == 0.05


def test_a_drawn_configuration_crosses_the_pipe_and_nothing_else_does():
    task = load_task("layernorm_fwd")
    c = draw.for_judgement(task, "cpu", random.Random(2))[0]
    assert draw.from_message(task, draw.as_message(c)) == c
    for bad in ({"sizes": {"B": 1}, "scalars": {"eps": 1e-5}, "init": "random", "seed": 0},
                {"sizes": {"B": 1, "N": "8"}, "scalars": {"eps": 1e-5}, "init": "random", "seed": 0},
                {"sizes": {"B": 1, "N": 8}, "scalars": {"eps": True}, "init": "random", "seed": 0},
                {"sizes": {"B": 1, "N": 8}, "scalars": {"eps": 1e-5}, "init": "gaussian", "seed": 0}):
        with pytest.raises(ValueError):
            draw.from_message(task, bad)


def test_the_smallest_configuration_meets_the_domains_conditions():
    task = load_task("unet_conv2d_fwd")                 # H + 2 * PAD >= 3: the smallest takes PAD = 1
    lowest = draw.smallest(task)
    assert task.domain.violation(lowest, task.scalar_values()) is None and lowest["H"] == 1
    assert len(draw.corners(task, "cpu")) > 10
