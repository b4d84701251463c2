"""Operator and model choice: the reward, fixed weights, and bandits that converge to the better arm, are
deterministic given an rng, and resume from their state or their stored (choice, reward) records."""
from __future__ import annotations

import json
import random

import pytest

from kevolve.operators.choice import Arm, Policy, make_policy, reward

ARMS = [Arm("optimize", "gpt-5"), Arm("optimize", "gemini-2.5-pro"), Arm("repair", "gpt-5"), Arm("knob")]
MEANS = {"optimize@gpt-5": 0.3, "optimize@gemini-2.5-pro": 0.7, "repair@gpt-5": 0.2, "knob": 0.1}


def test_reward():
    assert reward(1.5, 1.0) == pytest.approx(0.75) and reward(3.0, 1.0) == 1.0 and reward(0.5, 1.0) == 0.25
    assert reward(0.0, 1.0) == 0.0 and reward(None, 1.0) == 0.0 and reward(float("nan"), 1.0) == 0.0
    assert reward(0.8, 0.0) == 1.0 and reward(0.8, None) == 1.0       # a first kernel, a repaired one
    assert reward(2.0, 1.0, cap=4.0) == 0.5


def run(policy: Policy, steps: int, seed: int = 0) -> list[str]:
    rng, world = random.Random(seed), random.Random(seed + 1)
    chosen = []
    for _ in range(steps):
        arm = policy.choose(rng)
        policy.update(arm, 1.0 if world.random() < MEANS[arm.key] else 0.0)
        chosen.append(arm.key)
    return chosen


@pytest.mark.parametrize("name", ["ucb1", "thompson"])
def test_bandits_converge_to_the_better_arm(name):
    chosen = run(make_policy(name, ARMS), 1500)
    late = chosen[-500:]
    assert late.count("optimize@gemini-2.5-pro") > 0.7 * len(late)


def test_weighted_follows_its_weights_and_ignores_rewards():
    p = make_policy("weights", ARMS, [1, 3, 0, 0])
    chosen = run(p, 2000)
    assert set(chosen) == {"optimize@gpt-5", "optimize@gemini-2.5-pro"}
    assert 0.7 < chosen.count("optimize@gemini-2.5-pro") / 2000 < 0.8


@pytest.mark.parametrize("name", ["weights", "ucb1", "thompson"])
def test_same_rng_same_choices(name):
    assert run(make_policy(name, ARMS), 200, seed=5) == run(make_policy(name, ARMS), 200, seed=5)


@pytest.mark.parametrize("name", ["weights", "ucb1", "thompson"])
def test_state_and_replay_round_trip(name):
    p = make_policy(name, ARMS)
    records, rng = [], random.Random(3)
    for _ in range(100):
        arm = p.choose(rng)
        r = round(rng.random() * MEANS[arm.key], 3)
        p.update(arm, r)
        records.append((arm.key, r))                    # what the store keeps per child
    restored = Policy.from_state(json.loads(json.dumps(p.state())))
    replayed = make_policy(name, ARMS).replay(records)
    assert restored.state() == p.state() == replayed.state()
    a, b, c = random.Random(9), random.Random(9), random.Random(9)
    assert [p.choose(a) for _ in range(50)] == [restored.choose(b) for _ in range(50)] == \
           [replayed.choose(c) for _ in range(50)]


@pytest.mark.parametrize("name", ["weights", "ucb1", "thompson"])
def test_allowed_restricts_the_choice(name):
    p, rng = make_policy(name, ARMS), random.Random(0)
    assert {p.choose(rng, allowed={"repair"}).key for _ in range(20)} == {"repair@gpt-5"}
    assert {p.choose(rng, allowed={"optimize@gpt-5", "knob"}).operator for _ in range(40)} <= {"optimize", "knob"}
    with pytest.raises(ValueError, match="no arm among"):
        p.choose(rng, allowed={"crossover"})


def test_bad_configuration_raises():
    with pytest.raises(ValueError, match="expected one of"):
        make_policy("epsilon", ARMS)
    with pytest.raises(ValueError, match="weights"):
        make_policy("weights", ARMS, [0, 0, 0, 0])
    with pytest.raises(ValueError, match="unknown arm"):
        make_policy("ucb1", ARMS).update(Arm("meta"), 1.0)
    assert Arm.parse("optimize@Qwen/Qwen3-Coder@fp8") == Arm("optimize", "Qwen/Qwen3-Coder@fp8")
