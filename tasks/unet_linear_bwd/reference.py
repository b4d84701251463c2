"""UNet linear backward (robust-kbench's unet_linear, backward direction): the gradients of
out = x @ weight^T + bias given grad_out, as a kernel must compute them (float64), and what torch is timed on.

`reference` writes them out (no autograd):
  grad_x      = grad_out @ weight          [M, K]
  grad_weight = grad_out^T @ x             [N, K]
  grad_bias   = sum over rows of grad_out  [N]
`baseline` is the same three ops in float32: exactly what eager autograd runs for F.linear's backward
(mm, mm, sum), without building a graph for a forward whose output nobody needs, so eager and torch.compile
are timed on the backward alone. bias does not enter the gradient.
"""
import torch


def reference(grad_out, x, weight, bias, *, M, K, N):
    return grad_out @ weight, grad_out.t() @ x, grad_out.sum(dim=0)


def baseline(grad_out, x, weight, bias, *, M, K, N):
    return torch.mm(grad_out, weight), torch.mm(grad_out.t(), x), grad_out.sum(0)
