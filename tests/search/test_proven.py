"""Contracts of kevolve.search.proven: the domain an exported op sends to its kernels is the range of the judged
configurations (until tasks carry their own `domain:` block): every judged configuration is inside, a size, scalar
or tensor beyond the judged extremes is outside, and the reason names it."""
from __future__ import annotations

import pytest

from kevolve.search import proven
from kevolve.task.load import load_task


@pytest.mark.parametrize("name", ["layernorm_fwd", "layernorm_bwd", "rmsnorm_bwd"])
def test_every_judged_configuration_is_inside(name):
    task = load_task(name)
    for c in task.configs("small"):
        assert proven.contains(task, c.size_dict, c.scalar_dict, "small") is None, c.id


def test_beyond_the_judged_extremes_is_outside_and_says_why():
    task = load_task("layernorm_bwd")
    d = proven.ranges(task, "small")
    assert d["sizes"] == {"B": [1, 1000], "N": [13, 262147]} and d["scalars"] == {"eps": [1e-6, 1e-2]}
    assert "N=262148 is outside the proven range [13, 262147]" in proven.contains(task, {"B": 1, "N": 262148}, {},
                                                                                   "small")
    assert "eps=0.1" in proven.contains(task, {"B": 2, "N": 100}, {"eps": 0.1}, "small")
    assert "elements" in proven.contains(task, {"B": 1000, "N": 262147}, {}, "small")   # each size inside, not both
