"""The MNIST tasks' rows of the task tests' tables (robust-kbench's mnist_linear, mnist_linear_relu, mnist_pool,
mnist_conv_relu_pool, each forward and backward): independent float64 computations through torch's modules
and autograd, and slightly wrong kernels that their tolerances must reject on the small set.

Kept apart from test_tasks.py so that its tables gain one line each.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

TASKS = {f"mnist_{op}_{d}" for op in ("linear", "linear_relu", "pool", "conv_relu_pool") for d in ("fwd", "bwd")}


# ---------------------------------------------------------------- independent computations (float64)
def _linear(weight, bias) -> torch.nn.Linear:
    layer = torch.nn.Linear(weight.shape[1], weight.shape[0], dtype=weight.dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    return layer


def _conv(weight, bias) -> torch.nn.Conv2d:
    layer = torch.nn.Conv2d(weight.shape[1], weight.shape[0], 3, dtype=weight.dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    return layer


def _grads(module: torch.nn.Module, grad_out, x):
    x = x.clone().requires_grad_()
    module(x).backward(grad_out)
    params = [p.grad for p in module.parameters()]
    return (x.grad, *params)


def _linear_relu(weight, bias):
    return torch.nn.Sequential(_linear(weight, bias), torch.nn.ReLU())


def _conv_relu_pool(weight, bias):
    return torch.nn.Sequential(_conv(weight, bias), torch.nn.ReLU(), torch.nn.MaxPool2d(2))


INDEPENDENT = {
    "mnist_linear_fwd": lambda x, weight, bias, **_: _linear(weight, bias)(x).detach(),
    "mnist_linear_bwd": lambda grad_out, x, weight, bias, **_: _grads(_linear(weight, bias), grad_out, x),
    "mnist_linear_relu_fwd": lambda x, weight, bias, **_: _linear_relu(weight, bias)(x).detach(),
    "mnist_linear_relu_bwd": lambda grad_out, x, weight, bias, **_: _grads(_linear_relu(weight, bias), grad_out, x),
    "mnist_pool_fwd": lambda x, **_: torch.nn.MaxPool2d(2)(x),
    "mnist_pool_bwd": lambda grad_out, x, **_: _grads(torch.nn.MaxPool2d(2), grad_out, x),
    "mnist_conv_relu_pool_fwd": lambda x, weight, bias, **_: _conv_relu_pool(weight, bias)(x).detach(),
    "mnist_conv_relu_pool_bwd": lambda grad_out, x, weight, bias, **_: _grads(_conv_relu_pool(weight, bias),
                                                                             grad_out, x),
}


# ---------------------------------------------------------------- slightly wrong kernels (float64)
def tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 values rounded to TF32 (11 significant bits), as a tensor core reads them."""
    mantissa, exponent = torch.frexp(t)
    return torch.ldexp(torch.round(mantissa * 2**11) / 2**11, exponent)


def _windows(t, PH, PW):
    """[N, K, 2PH(+1), 2PW(+1)] -> [N, K, PH, PW, 4], each 2x2 window in row-major order."""
    N, K = t.shape[:2]
    return t[:, :, :2 * PH, :2 * PW].reshape(N, K, PH, 2, PW, 2).permute(0, 1, 2, 4, 3, 5).reshape(N, K, PH, PW, 4)


def _unwindow(w, H, W):
    """The inverse of _windows, zeros in an odd last row or column."""
    N, K, PH, PW, _ = w.shape
    t = w.reshape(N, K, PH, PW, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(N, K, 2 * PH, 2 * PW)
    return F.pad(t, (0, W - 2 * PW, 0, H - 2 * PH))


def pool_grad(grad_out, y, last: bool = False, relu: bool = True, from_zero: bool = False):
    """The gradient at y of max_pool2d(y, 2) routed to the first (or last) maximum of each window; with relu,
    only where that maximum is > 0; with from_zero, a maximum started at 0 (windows all below 0 get none)."""
    H, W = y.shape[2:]
    win = _windows(y, H // 2, W // 2)
    pick = 3 - win.flip(4).argmax(dim=4) if last else win.argmax(dim=4)
    keep = (win.amax(dim=4) > 0) if (relu or from_zero) else torch.ones_like(pick, dtype=torch.bool)
    return _unwindow(F.one_hot(pick, 4).to(y.dtype) * (keep * grad_out)[..., None], H, W)


def _conv_bwd(grad_out, x, weight, bias, **rule):
    """The conv + ReLU + pool gradients through autograd from g = pool_grad(conv, **rule)."""
    conv = _conv(weight, bias)
    x = x.clone().requires_grad_()
    y = conv(x)
    y.backward(pool_grad(grad_out, y.detach(), **rule))
    return x.grad, conv.weight.grad, conv.bias.grad


def _wrong(name: str, reference) -> dict:
    def with_inputs(change):
        return lambda *args, **kw: reference(*change(list(args)), **kw)

    def at(i, f):
        return with_inputs(lambda a: a[:i] + [f(a[i])] + a[i + 1:])

    drop_bias = at(2, torch.zeros_like)
    all_tf32 = with_inputs(lambda a: [tf32(t) for t in a])
    table = {
        "mnist_linear_fwd": {"bias dropped": drop_bias, "tf32 products": all_tf32},
        "mnist_linear_bwd": {"tf32 products": all_tf32},
        "mnist_linear_relu_fwd": {"bias dropped": drop_bias, "tf32 products": all_tf32,
                                  "relu dropped": lambda x, w, b, **kw: x @ w.T + b},
        "mnist_linear_relu_bwd": {"tf32 products": all_tf32,
                                  "relu dropped": lambda g, x, w, b, **kw: (g @ w, g.T @ x, g.sum(dim=0))},
        "mnist_pool_fwd": {"maximum from 0": lambda x, **kw: torch.clamp(reference(x, **kw), min=0)},
        "mnist_pool_bwd": {"last maximum": lambda g, x, **kw: pool_grad(g, x, last=True, relu=False),
                           "maximum from 0": lambda g, x, **kw: pool_grad(g, x, relu=False, from_zero=True)},
        "mnist_conv_relu_pool_fwd": {"bias dropped": drop_bias, "tf32 products": all_tf32,
                                     "relu dropped": lambda x, w, b, **kw: F.max_pool2d(F.conv2d(x, w, b), 2)},
        "mnist_conv_relu_pool_bwd": {"tf32 products": all_tf32,
                                     "last maximum": lambda g, x, w, b, **kw: _conv_bwd(g, x, w, b, last=True),
                                     "relu dropped": lambda g, x, w, b, **kw: _conv_bwd(g, x, w, b, relu=False)},
    }
    return table.get(name, {})


def wrong_kernels(name: str, reference) -> dict:
    """Kernels the task's tolerance must reject on the small set (beyond 'off by 1e-3'); {} for other tasks."""
    return _wrong(name, reference)


def mistakes(names) -> list[tuple[str, str]]:
    return [(n, kind) for n in names if n in TASKS for kind in _wrong(n, None)]
