"""Drop-in modules of an exported package (copied into it as `_modules.py`; torch only): `LayerNorm` and `RMSNorm`
take the constructor arguments and state dict of `torch.nn.LayerNorm` and `torch.nn.RMSNorm` and run the package's
op for the task family they are bound to (`bind`), on x seen as [rows, normalized elements]; `replace(model)`
swaps every such torch module of a model for one sharing its parameters.

Guarantees: a module computes what the torch module computes — the op itself, or torch for what the op does not
take (no affine parameters, no bias, a shape other than the normalized one: torch's own function, no warning, as
the torch module would); the parameters are the torch module's own objects after `replace` (an optimizer keeps
working). Not guaranteed: anything for torch modules of other kinds (left as they are).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

OPS: dict = {}         # family -> the package's forward op (runtime.Op), set by the package's __init__


def bind(ops_by_family: dict) -> None:
    OPS.update(ops_by_family)


def _rows(x: torch.Tensor, normalized: tuple) -> tuple[int, int] | None:
    if tuple(x.shape[x.dim() - len(normalized):]) != normalized or x.dim() < len(normalized):
        return None
    return math.prod(x.shape[:x.dim() - len(normalized)]), math.prod(normalized)


class LayerNorm(nn.LayerNorm):
    """`torch.nn.LayerNorm`, run by the exported layernorm op."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = _rows(x, tuple(self.normalized_shape))
        if shape is None or self.weight is None or self.bias is None or "layernorm" not in OPS:
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        B, N = shape
        out = OPS["layernorm"](x.reshape(B, N), self.weight.reshape(N), self.bias.reshape(N), float(self.eps))
        return out.reshape(x.shape)


class RMSNorm(nn.RMSNorm):
    """`torch.nn.RMSNorm`, run by the exported rmsnorm op (eps None: the dtype's machine epsilon, as torch)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = _rows(x, tuple(self.normalized_shape))
        if shape is None or self.weight is None or "rmsnorm" not in OPS:
            return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        B, N = shape
        return OPS["rmsnorm"](x.reshape(B, N), self.weight.reshape(N), float(eps)).reshape(x.shape)


KINDS = {"layernorm": (nn.LayerNorm, LayerNorm), "rmsnorm": (nn.RMSNorm, RMSNorm)}


def swap(module: nn.Module, new_class: type) -> nn.Module:
    """A module of `new_class` sharing `module`'s parameters and settings."""
    new = new_class.__new__(new_class)
    new.__dict__.update(module.__dict__)
    return new


def replace(model: nn.Module) -> int:
    """Replaces, in place, every torch LayerNorm / RMSNorm of `model` (the families this package has) by this
    package's module sharing its parameters; returns how many."""
    count = 0
    for family, (torch_class, ours) in KINDS.items():
        if family not in OPS:
            continue
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is torch_class:
                    setattr(parent, name, swap(child, ours))
                    count += 1
    return count
