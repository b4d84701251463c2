"""Initialisers: the names a task.yaml gives its inputs' contents (`normal(0.5)`, `uniform(-1, 1)`, `ones`,
`randint(V)`, `kaiming_uniform(N)`, `round(2**-6, normal)` …) and the tensors they draw.

Guaranteed: `valid_init` accepts exactly what `draw` knows; `draw` is a pure function of (initialiser, shape,
dtype, sizes, generator state, device): the evaluator and its worker draw identical tensors independently.
"""
from __future__ import annotations

import math
import re

from kevolve.task.expr import eval_expr

_INIT = re.compile(r"^(normal|uniform|ones|zeros|const|randint|kaiming_uniform|xavier_normal)(?:\((.*)\))?$|^drawn$")
_ROUND = re.compile(r"^round\(2\*\*(-?\d+),(.+)\)$")    # round(2**-k, INIT): INIT's values to multiples of 2**-k


def valid_init(init: str) -> bool:
    """Whether `init` names an initialiser `draw` knows, optionally wrapped in round(2**-k, ...)."""
    text = str(init).replace(" ", "")
    r = _ROUND.match(text)
    return bool(_INIT.match(r[2] if r else text))


def draw(init: str, shape: tuple[int, ...], dtype: str, sizes: dict[str, int], g, device):
    import torch
    r = _ROUND.match(init.replace(" ", ""))
    if r:   # values on a power-of-two grid: sums of a few thousand products are exact in float32
        step = 2.0 ** int(r[1])
        v = draw(r[2], shape, "float64", sizes, g, device)
        return (torch.round(v / step) * step).to(getattr(torch, dtype))
    m = _INIT.match(init.replace(" ", ""))
    kind, args = m.group(1), [a for a in (m.group(2) or "").split(",") if a]
    tdtype = getattr(torch, dtype)
    if kind == "normal":      # normal(std) or normal(mean, std)
        mean, std = ((0.0, float(args[0])) if len(args) == 1 else (float(args[0]), float(args[1])) if args
                     else (0.0, 1.0))
        return (torch.randn(shape, generator=g, device=device, dtype=torch.float32) * std + mean).to(tdtype)
    if kind == "uniform":     # uniform(lo, hi)
        lo, hi = (float(args[0]), float(args[1])) if args else (-1.0, 1.0)
        return (torch.rand(shape, generator=g, device=device, dtype=torch.float32) * (hi - lo) + lo).to(tdtype)
    if kind == "kaiming_uniform":   # kaiming_uniform(fan_in): torch's nn.Linear / nn.Conv default (a=sqrt(5))
        bound = 1.0 / math.sqrt(eval_expr(args[0], sizes))
        return (torch.rand(shape, generator=g, device=device, dtype=torch.float32) * (2 * bound) - bound).to(tdtype)
    if kind == "xavier_normal":     # xavier_normal(fan_in, fan_out): std = sqrt(2 / (fan_in + fan_out))
        std = math.sqrt(2.0 / (eval_expr(args[0], sizes) + eval_expr(args[1], sizes)))
        return (torch.randn(shape, generator=g, device=device, dtype=torch.float32) * std).to(tdtype)
    if kind == "ones":
        return torch.ones(shape, device=device, dtype=tdtype)
    if kind == "zeros":
        return torch.zeros(shape, device=device, dtype=tdtype)
    if kind == "const":
        return torch.full(shape, float(args[0]), device=device, dtype=tdtype)
    hi = eval_expr(args[0], sizes)   # randint(expr): integers in [0, expr)
    return torch.randint(0, hi, shape, generator=g, device=device, dtype=tdtype)

