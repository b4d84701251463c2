"""What a user does with exported packages, run by tests/export/test_export.py in a fresh process (CPU): a small
model's LayerNorm and RMSNorm replaced by the exported ops — outputs and gradients against the torch modules, in
eager and under torch.compile(fullgraph=True); torch.library.opcheck on every op; inputs outside the proven domain
or of another dtype sent to torch with one warning each. Prints what it checked; exits non-zero on a failure.

Usage: python user_model.py [--device cuda] PACKAGE [PACKAGE ...]   (importable names; KEVOLVE_OPS=kernels runs the
kernels on every size of their domain, so that the kernels themselves are what is checked)."""
from __future__ import annotations

import copy
import importlib
import json
import os
import sys
import time
import warnings

import torch
from torch import nn

torch.manual_seed(0)
TOL = dict(atol=2e-4, rtol=2e-4)


def sizes_in(pkg, task: str) -> tuple[int, int]:
    """A (rows, width) of the op's judged configurations, inside its domain, that a kernel runs."""
    spec = pkg.MANIFEST["ops"][task]
    d = spec["domain"]["sizes"]
    return max(d["B"][0], min(24, d["B"][1])), max(d["N"][0], min(256, d["N"][1]))


class Model(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up = nn.Linear(16, width)
        self.ln = nn.LayerNorm(width)
        self.mid = nn.Linear(width, width)
        self.rms = nn.RMSNorm(width, eps=1e-6)
        self.down = nn.Linear(width, 4)

    def forward(self, x):
        h = self.ln(self.up(x))
        h = torch.nn.functional.gelu(self.mid(h))
        return self.down(self.rms(h) + h)


def run(model, x):
    for p in model.parameters():
        p.grad = None
    out = model(x)
    (out.square().sum()).backward()
    return out.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def close(a, b, what: str) -> float:
    worst = max((x - y).abs().max().item() / (TOL["atol"] + TOL["rtol"] * y.abs().max().item())
                for x, y in zip(a, b))
    assert worst <= 1.0, f"{what}: off by {worst:.2f}x the tolerance"
    return worst


def main(names: list[str], device: str = "cpu") -> None:
    pkgs = [importlib.import_module(n) for n in names]
    for pkg in pkgs:
        print(f"{pkg.__name__}: ops {list(pkg.OPS)}, autograd {json.dumps(pkg.MANIFEST['autograd'])}")
    rows, width = sizes_in(pkgs[0], next(iter(pkgs[0].OPS)))
    reference = Model(width).to(device)
    ours = copy.deepcopy(reference)
    replaced = sum(pkg.replace(ours) for pkg in pkgs)
    print(f"model: rows {rows}, width {width}; torch modules replaced: {replaced} "
          f"({[type(m).__module__ + '.' + type(m).__name__ for m in (ours.ln, ours.rms)]})")
    assert replaced == len(pkgs)
    x = torch.randn(rows, 16, device=device)
    want = run(reference, x)
    got = run(ours, x)
    print(f"eager: outputs within {close([got[0]], [want[0]], 'eager outputs'):.3f} of the tolerance, gradients "
          f"within {close(list(got[1].values()), list(want[1].values()), 'eager gradients'):.3f}")
    started = time.perf_counter()
    compiled = torch.compile(ours, fullgraph=True)
    got = run(compiled, x)
    print(f"torch.compile(fullgraph=True): outputs within {close([got[0]], [want[0]], 'compiled outputs'):.3f}, "
          f"gradients within {close(list(got[1].values()), list(want[1].values()), 'compiled gradients'):.3f} "
          f"({time.perf_counter() - started:.0f} s to compile and run)")
    calls = {f"{p.__name__}.{k}": v for p in pkgs for k, v in p.stats().items()}
    print(f"calls of the model, eager and compiled (KEVOLVE_OPS={os.environ.get('KEVOLVE_OPS', 'auto')}): "
          f"{json.dumps(calls)}")
    if os.environ.get("KEVOLVE_OPS") == "kernels":
        assert all(v.get("kernel calls", 0) > 0 for v in calls.values()), "every op's kernel ran"
    for pkg in pkgs:
        for name, op in pkg.OPS.items():
            spec = pkg.MANIFEST["ops"][name]
            grad = name in pkg.MANIFEST["autograd"]
            args = [torch.randn(*[{"B": rows, "N": width}[e] for e in t["shape"]], device=device, requires_grad=grad)
                    for t in spec["inputs"]] + [float(s["default"]) for s in spec["scalars"]]
            result = torch.library.opcheck(op.custom, tuple(args))
            assert all(v == "SUCCESS" for v in result.values()), result
            print(f"opcheck {pkg.__name__}.{name}: {', '.join(result)}: SUCCESS")
    pkg, task = pkgs[0], next(iter(pkgs[0].OPS))
    top = pkg.MANIFEST["ops"][task]["domain"]["sizes"]["N"][1]
    layer = pkg.LayerNorm(top + 1, device=device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            wide = torch.randn(2, top + 1, device=device)
            assert torch.allclose(layer(wide), nn.functional.layer_norm(wide, (top + 1,), layer.weight, layer.bias),
                                  **TOL)
            small = torch.randn(rows, width, dtype=torch.float64, device=device)
            ln = pkg.LayerNorm(width, device=device).double()
            assert torch.allclose(ln(small), nn.functional.layer_norm(small, (width,), ln.weight, ln.bias))
    ours_ = [str(w.message) for w in caught if issubclass(w.category, pkg.KevolveFallbackWarning)]
    print("outside the domain and another dtype, twice each: " + " | ".join(ours_))
    assert len(ours_) == 2 and any("outside the proven range" in m for m in ours_)
    assert any("float64" in m for m in ours_)
    print("all checks passed")


if __name__ == "__main__":
    argv = sys.argv[1:]
    on = argv[argv.index("--device") + 1] if "--device" in argv else "cpu"
    main([a for i, a in enumerate(argv) if a != "--device" and (i == 0 or argv[i - 1] != "--device")], on)
