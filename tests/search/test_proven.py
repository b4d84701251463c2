"""Contracts of kevolve.search.proven: the domain an exported op sends to its kernels is the task's domain on the
run's target: every configuration of it is inside (the listed ones included), a size, scalar or listed value beyond
it, or tensors over the target's budget, are outside, and the reason names it."""
from __future__ import annotations

import random

import pytest

from kevolve.search import proven
from kevolve.task import draw
from kevolve.task.load import load_task


@pytest.mark.parametrize("name", ["layernorm_fwd", "layernorm_bwd", "rmsnorm_bwd", "unet_conv2d_fwd"])
def test_every_listed_and_drawn_configuration_is_inside(name):
    task = load_task(name)
    for c in task.configs("small"):
        assert proven.contains(task, c.size_dict, c.scalar_dict, "small", "cuda") is None, c.id
    for c in draw.sweep(task, "cpu", random.Random(0), 40):
        assert proven.contains(task, c.size_dict, c.scalar_dict, "small", "cpu") is None, c.id


def test_beyond_the_domain_is_outside_and_says_why():
    task = load_task("layernorm_bwd")
    d = proven.ranges(task, "small", "cpu")
    assert d["sizes"] == {"B": [1, 8192], "N": [8, 4194304]} and d["scalars"] == {"eps": [1e-12, 0.1]}
    assert d["max_bytes"] == 32 << 20 and "domain on cpu" in d["source"]
    assert "B=8193 is outside the proven range [1, 8192]" in proven.contains(task, {"B": 8193, "N": 100}, {}, "small")
    assert "eps=0.5" in proven.contains(task, {"B": 2, "N": 100}, {"eps": 0.5}, "small")
    assert "over the 32 MiB proven" in proven.contains(task, {"B": 4096, "N": 4096}, {}, "small", "cpu")
    assert proven.contains(task, {"B": 4096, "N": 4096}, {}, "small", "cuda") is None
    conv = load_task("unet_conv2d_fwd")
    sizes = {"B": 1, "C": 3, "H": 8, "W": 8, "K": 4, "STRIDE": 3, "PAD": 1}
    assert "STRIDE=3 is outside the proven range [1, 2]" in proven.contains(conv, sizes, {}, "small")
    assert "not one of the proven values" in proven.inside({"values": {"STRIDE": [1, 4]}}, {"STRIDE": 2}, {})


def test_sizes_that_break_a_where_condition_are_outside():
    """LayerNorm over 2 or 3 elements is ill-conditioned (float32 torch fails it): the domain leaves those rows out
    with a `where` condition, and a call there is outside, naming the condition."""
    task = load_task("layernorm_fwd")
    d = proven.ranges(task, "small", "cpu")
    assert d["where"] == ["N == 1 or N >= 4"]
    assert "breaks the proven domain's condition N == 1 or N >= 4" in proven.contains(task, {"B": 7, "N": 2}, {},
                                                                                      "small")
    assert proven.contains(task, {"B": 7, "N": 1}, {}, "small") is None
    assert proven.contains(task, {"B": 7, "N": 4}, {}, "small") is None


def test_the_budget_holds_the_workspace_as_the_domain_does():
    """layernorm_fwd's workspace is 16 KiB a row: 2000 rows of one element take 16 KB of tensors and 33.8 MB of
    workspace, over the 32 MiB the CPU's domain allows (`domain.config_bytes`), so such a call is outside."""
    task = load_task("layernorm_fwd")
    assert "tensors and workspace take" in proven.contains(task, {"B": 2000, "N": 1}, {}, "small", "cpu")
    assert proven.contains(task, {"B": 1800, "N": 1}, {}, "small", "cpu") is None
