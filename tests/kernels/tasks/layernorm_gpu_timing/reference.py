"""LayerNorm forward: the function a kernel must compute (float64) and what torch is timed on."""
import torch
import torch.nn.functional as F


def reference(x, weight, bias, *, B, N, eps):
    mean = x.mean(dim=1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def baseline(x, weight, bias, *, B, N, eps):
    return F.layer_norm(x, (N,), weight, bias, eps)
