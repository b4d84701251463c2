"""The MNIST backward tasks whose gradient has steps (a ReLU mask, a pooling window's choice) draw x, weight
and bias on power-of-two grids, so that float32 computes the pre-activation exactly in any summation order and
the step falls where the float64 reference puts it. These tests hold that promise on every configuration:
every partial sum of every dot product stays below 2^24 grid units, and torch's own float32 result is exact.
"""
from __future__ import annotations

import functools
import math
import re

import pytest
import torch
import torch.nn.functional as F

from kevolve.task import Task, load_task

STEPPED = ["mnist_linear_relu_bwd", "mnist_conv_relu_pool_bwd"]
_STEP = re.compile(r"^round\(2\*\*(-?\d+),")


@functools.lru_cache(maxsize=None)
def task(name: str) -> Task:
    return load_task(name)


def step(t: Task, tensor: str, init: str) -> float:
    spec = next(s for s in t.inputs if s.name == tensor)
    m = _STEP.match(spec.init[init].replace(" ", ""))
    assert m, f"{t.name}: {tensor} is not drawn on a grid for init {init}"
    return 2.0 ** int(m[1])


def largest_norms(t: Task, x, weight) -> tuple[float, float]:
    """The largest norm of the vectors that meet in a dot product: rows of x (or its 3x3 patches), rows of weight."""
    w = weight.reshape(weight.shape[0], -1).norm(dim=1).max()
    if t.name == "mnist_linear_relu_bwd":
        return float(x.norm(dim=1).max()), float(w)
    patch_sq = F.conv2d(x * x, torch.ones(1, *weight.shape[1:], dtype=x.dtype))
    return float(patch_sq.max().sqrt()), float(w)


@pytest.mark.parametrize("name", STEPPED)
@pytest.mark.parametrize("shape_set", ["small", "bench"])
def test_every_partial_sum_of_the_pre_activation_is_exact_in_float32(name, shape_set):
    """By Cauchy-Schwarz every partial sum (any order, the bias included) is at most |x row| |weight row| +
    |bias|; products and bias are multiples of the finer of their grid steps, so below 2^24 such steps float32
    holds each exactly."""
    t = task(name)
    worst = 0.0
    for c in t.configs(shape_set):
        if c.seed != t.configs(shape_set)[0].seed:
            continue
        grid = min(step(t, "x", c.init) * step(t, "weight", c.init), step(t, "bias", c.init))
        inputs = t.make_inputs(c, "cpu")
        a, w = largest_norms(t, inputs["x"].double(), inputs["weight"].double())
        bound = a * w + float(inputs["bias"].double().abs().max())
        worst = max(worst, bound / (2**24 * grid))
    print(f"{name} {shape_set}: partial sums within {worst:.3f} of float32's exact range")
    assert worst < 0.5, f"partial sums reach {worst:.2f} of float32's exact range"


@pytest.mark.parametrize("name", STEPPED)
def test_torch_float32_pre_activation_equals_the_float64_one_on_the_small_set(name):
    t = task(name)
    for c in t.configs("small"):
        x, weight, bias = (t.make_inputs(c, "cpu")[k] for k in ("x", "weight", "bias"))
        op = F.linear if name == "mnist_linear_relu_bwd" else F.conv2d
        assert torch.equal(op(x, weight, bias).double(), op(x.double(), weight.double(), bias.double())), c.id


def test_the_grid_is_fine_enough_to_leave_the_draws_their_distribution():
    """Rounding moves a weight by at most half a step: 1/64 of kaiming's bound at the largest IN."""
    t = task("mnist_linear_relu_bwd")
    largest_in = max(c.size_dict["IN"] for c in t.configs("bench"))
    assert step(t, "weight", "kaiming") <= (1 / math.sqrt(largest_in)) / 64
