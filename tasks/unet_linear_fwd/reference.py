"""UNet linear forward (robust-kbench's unet_linear): out = x @ weight^T + bias, the function a kernel must
compute (float64) and what torch is timed on (F.linear in float32, TF32 off)."""
import torch
import torch.nn.functional as F


def reference(x, weight, bias, *, M, K, N):
    return torch.addmm(bias, x, weight.t())


def baseline(x, weight, bias, *, M, K, N):
    return F.linear(x, weight, bias)
