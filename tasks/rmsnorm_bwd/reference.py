"""RMSNorm backward (Llama's): the gradient a kernel must compute (float64) and what torch is timed on.

`reference` is the gradient written out (no autograd), with r recomputed from x:
  r = 1 / sqrt(mean_row(x^2) + eps),  xhat = x * r,  gw = grad_out * weight
  grad_x      = r * (gw - xhat * mean_row(gw * xhat))
  grad_weight = sum_rows(grad_out * xhat)
"""
import torch


def reference(grad_out, x, weight, *, B, N, eps):
    r = 1.0 / torch.sqrt((x * x).mean(dim=1, keepdim=True) + eps)
    xhat = x * r
    gw = grad_out * weight
    grad_x = r * (gw - xhat * (gw * xhat).mean(dim=1, keepdim=True))
    grad_weight = (grad_out * xhat).sum(dim=0)
    return grad_x, grad_weight


def baseline(grad_out, x, weight, *, B, N, eps):
    """The ops eager autograd runs for `x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight`, in float32:
    mul backward (both sides), rsqrt backward (-0.5 * grad * r^3), mean backward (/N), pow backward (2x)."""
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    xr = x * r
    gw = grad_out * weight
    grad_weight = (grad_out * xr).sum(0)
    grad_r = (gw * x).sum(-1, keepdim=True)
    grad_ms = grad_r * -0.5 * r.pow(3)
    grad_x = gw * r + (grad_ms / N) * (2.0 * x)
    return grad_x, grad_weight
