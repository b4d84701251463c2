"""LayerNorm backward: the gradient a kernel must compute (float64) and what torch is timed on.

`reference` is the gradient written out, with mean and rstd recomputed from x (no autograd):
  xhat = (x - mean) * rstd,  gw = grad_out * weight
  grad_x      = rstd * (gw - mean_row(gw) - xhat * mean_row(gw * xhat))
  grad_weight = sum_rows(grad_out * xhat)
  grad_bias   = sum_rows(grad_out)
bias does not enter the gradient; it is an input only because the forward took it.
"""
import torch


def reference(grad_out, x, weight, bias, *, B, N, eps):
    mean = x.mean(dim=1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=1, keepdim=True)
    rstd = 1.0 / torch.sqrt(var + eps)
    xhat = (x - mean) * rstd
    gw = grad_out * weight
    grad_x = rstd * (gw - gw.mean(dim=1, keepdim=True) - xhat * (gw * xhat).mean(dim=1, keepdim=True))
    grad_weight = (grad_out * xhat).sum(dim=0)
    grad_bias = grad_out.sum(dim=0)
    return grad_x, grad_weight, grad_bias


def baseline(grad_out, x, weight, bias, *, B, N, eps):
    """What eager autograd runs for F.layer_norm's backward, with the saved mean/rstd ([B, 1]) recomputed."""
    var, mean = torch.var_mean(x, dim=1, keepdim=True, correction=0)
    rstd = torch.rsqrt(var + eps)
    return torch.ops.aten.native_layer_norm_backward(grad_out, x, [N], mean, rstd, weight, bias,
                                                     [True, True, True])
