"""Linear backward: the gradients a kernel must compute (float64) and what torch is timed on.

`reference`, written out (no autograd), for out = x @ weight^T + bias:
  grad_x = grad_out @ weight,  grad_weight = grad_out^T @ x,  grad_bias = sum_rows(grad_out)
bias does not enter the gradient; it is an input only because the forward took it.
`baseline`: the same three ops in float32 — what eager autograd runs for F.linear's backward (addmm's
backward: two mm and a sum), called directly so that neither clock counts building an autograd graph.
"""
import torch


def reference(grad_out, x, weight, bias, *, B, IN, OUT):
    return grad_out @ weight, grad_out.T @ x, grad_out.sum(dim=0)


def baseline(grad_out, x, weight, bias, *, B, IN, OUT):
    return torch.mm(grad_out, weight), torch.mm(grad_out.t(), x), grad_out.sum(dim=0)
