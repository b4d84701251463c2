"""Linear + ReLU backward: the gradients a kernel must compute (float64) and what torch is timed on.

`reference`, written out (no autograd), for out = relu(x @ weight^T + bias):
  pre = x @ weight^T + bias,  g = grad_out * (pre > 0)          (ReLU'(0) = 0, as torch's threshold_backward)
  grad_x = g @ weight,  grad_weight = g^T @ x,  grad_bias = sum_rows(g)
`baseline`: the ops eager autograd runs, in float32, with the forward's pre-activation recomputed (the
backward is given x, weight and bias, not the forward's output): linear, threshold_backward, two mm and a
sum, called directly so that neither clock counts building an autograd graph.
"""
import torch
import torch.nn.functional as F


def reference(grad_out, x, weight, bias, *, B, IN, OUT):
    g = grad_out * (x @ weight.T + bias > 0)
    return g @ weight, g.T @ x, g.sum(dim=0)


def baseline(grad_out, x, weight, bias, *, B, IN, OUT):
    g = torch.ops.aten.threshold_backward(grad_out, F.linear(x, weight, bias), 0)
    return torch.mm(g, weight), torch.mm(g.t(), x), g.sum(dim=0)
