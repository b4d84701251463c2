"""The GEMM and convolution tasks' rows of the task tests' tables (robust-kbench's unet_linear forward and
backward, llama_ffw, unet_conv2d, resnet_block): independent float64 computations through torch's modules
(nn.Linear, a Llama MLP, F.unfold, a torchvision-style basic block in eval mode) and autograd, and slightly
wrong kernels that their tolerances must reject on the small set.

Kept apart from test_tasks.py so that its tables gain one line each.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

TASKS = {"unet_linear_fwd", "unet_linear_bwd", "llama_ffw_fwd", "unet_conv2d_fwd", "resnet_block_fwd"}


# ---------------------------------------------------------------- independent computations (float64)
def _linear(weight, bias=None) -> torch.nn.Linear:
    layer = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, dtype=weight.dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    return layer


def _linear_bwd(grad_out, x, weight, bias, **_):
    layer, x = _linear(weight, bias), x.clone().requires_grad_()
    layer(x).backward(grad_out)
    return x.grad, layer.weight.grad, layer.bias.grad


class LlamaMLP(torch.nn.Module):
    """The Llama feed-forward block as the reference implementation writes it."""

    def __init__(self, gate_proj, up_proj, down_proj):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = _linear(gate_proj), _linear(up_proj), _linear(down_proj)
        self.act_fn = torch.nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def _conv_im2col(x, weight, bias, *, B, C, H, W, K, STRIDE, PAD):
    """The convolution as a matrix product on unfolded patches."""
    cols = F.unfold(x, 3, padding=PAD, stride=STRIDE)                     # [B, 9 C, HO * WO]
    out = weight.reshape(K, -1) @ cols + bias.view(1, K, 1)
    return out.view(B, K, (H + 2 * PAD - 3) // STRIDE + 1, (W + 2 * PAD - 3) // STRIDE + 1)


def _batch_norm(weight, bias, mean, var, eps) -> torch.nn.BatchNorm2d:
    bn = torch.nn.BatchNorm2d(weight.numel(), eps=eps, dtype=weight.dtype)
    with torch.no_grad():
        bn.weight.copy_(weight)
        bn.bias.copy_(bias)
        bn.running_mean.copy_(mean)
        bn.running_var.copy_(var)
    return bn.eval()


def _conv(weight, stride, padding) -> torch.nn.Conv2d:
    conv = torch.nn.Conv2d(weight.shape[1], weight.shape[0], weight.shape[2], stride, padding, bias=False,
                           dtype=weight.dtype)
    with torch.no_grad():
        conv.weight.copy_(weight)
    return conv


class BasicBlock(torch.nn.Module):
    """torchvision's ResNet basic block in eval mode, with the projection shortcut robust-kbench adds."""

    def __init__(self, p: list, C: int, K: int, stride: int, eps: float):
        super().__init__()
        self.conv1, self.bn1 = _conv(p[0], stride, 1), _batch_norm(*p[1:5], eps)
        self.conv2, self.bn2 = _conv(p[5], 1, 1), _batch_norm(*p[6:10], eps)
        self.relu = torch.nn.ReLU()
        self.downsample = None
        if stride != 1 or C != K:
            self.downsample = torch.nn.Sequential(_conv(p[10].view(K, C, 1, 1), stride, 0), _batch_norm(*p[11:15], eps))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


def _resnet_block(x, *params, B, C, H, W, K, STRIDE, eps):
    with torch.no_grad():
        return BasicBlock(list(params), C, K, STRIDE, eps)(x)


INDEPENDENT = {
    "unet_linear_fwd": lambda x, weight, bias, **_: _linear(weight, bias)(x).detach(),
    "unet_linear_bwd": _linear_bwd,
    "llama_ffw_fwd": lambda x, gate_proj, up_proj, down_proj, **_: LlamaMLP(gate_proj, up_proj, down_proj)(x).detach(),
    "unet_conv2d_fwd": _conv_im2col,
    "resnet_block_fwd": _resnet_block,
}


# ---------------------------------------------------------------- slightly wrong kernels (float64)
def tf32(t: torch.Tensor) -> torch.Tensor:
    """Values rounded to TF32 (11 significant bits), as a tensor core reads them; integers unchanged."""
    if not t.is_floating_point():
        return t
    mantissa, exponent = torch.frexp(t)
    return torch.ldexp(torch.round(mantissa * 2**11) / 2**11, exponent)


def _wrong(name: str, reference) -> dict:
    def with_inputs(change):
        return lambda *args, **kw: reference(*change(list(args)), **kw)

    def at(i, f):
        return with_inputs(lambda a: a[:i] + [f(a[i])] + a[i + 1:])

    all_tf32 = with_inputs(lambda a: [tf32(t) for t in a])
    plain_bn = lambda a: a[:12] + [torch.ones_like(a[12]), torch.zeros_like(a[13]),   # noqa: E731
                                   torch.zeros_like(a[14]), torch.ones_like(a[15])]
    table = {
        "unet_linear_fwd": {"bias dropped": at(2, torch.zeros_like), "tf32 products": all_tf32},
        "unet_linear_bwd": {"tf32 products": all_tf32},
        "llama_ffw_fwd": {"tf32 products": all_tf32,
                          "gate and up swapped": with_inputs(lambda a: [a[0], a[2], a[1], a[3]])},
        "unet_conv2d_fwd": {"bias dropped": at(2, torch.zeros_like), "tf32 products": all_tf32},
        "resnet_block_fwd": {"tf32 products": all_tf32, "shortcut without its batch norm": with_inputs(plain_bn)},
    }
    return table.get(name, {})


def wrong_kernels(name: str, reference) -> dict:
    """Kernels the task's tolerance must reject on the small set (beyond 'off by 1e-3'); {} for other tasks."""
    return _wrong(name, reference)


def mistakes(names) -> list[tuple[str, str]]:
    return [(n, kind) for n in names if n in TASKS for kind in _wrong(n, None)]
