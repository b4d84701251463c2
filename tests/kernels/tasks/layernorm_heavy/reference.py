"""LayerNorm forward: the function a kernel must compute (float64), and a baseline that computes it REPEAT times
(the outside clock's tests want contenders that outweigh the harness's own work in a round)."""
import torch
import torch.nn.functional as F

REPEAT = 6000


def reference(x, weight, bias, *, B, N, eps):
    mean = x.mean(dim=1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def baseline(x, weight, bias, *, B, N, eps):
    for _ in range(REPEAT - 1):
        F.layer_norm(x, (N,), weight, bias, eps)
    return F.layer_norm(x, (N,), weight, bias, eps)
