"""RMSNorm forward (Llama's): the function a kernel must compute (float64) and what torch is timed on."""
import torch


def reference(x, weight, *, B, N, eps):
    ms = (x * x).mean(dim=1, keepdim=True)
    return x / torch.sqrt(ms + eps) * weight


def baseline(x, weight, *, B, N, eps):
    """The Llama module's forward (`x * rsqrt(mean(x^2) + eps)`, then `* weight`), in float32."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
