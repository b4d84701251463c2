"""Cross-entropy backward: the gradient of mean_rows(-log_softmax(logits)[target]) w.r.t. logits.

`reference` (float64, no autograd): grad_logits = (softmax(logits) - onehot(target)) * grad_out / B.
`baseline`: the two ops eager autograd runs for F.cross_entropy's backward (log_softmax's output is
recomputed, as the forward would have saved it): nll_loss_backward (reduction=mean, ignore_index=-100,
total_weight = B), then _log_softmax_backward_data.
"""
import torch


def reference(grad_out, logits, target, *, B, C):
    # scatter, not F.one_hot(target, C): the same zeros and ones, without a class count the evaluator's compiled
    # reference (kevolve/judge/evaluator/fused.py) would have to specialise on, one graph per C
    onehot = torch.zeros_like(logits).scatter_(1, target.unsqueeze(1), 1.0)
    return (torch.softmax(logits, dim=1) - onehot) * (grad_out / B)


def baseline(grad_out, logits, target, *, B, C):
    logp = torch.log_softmax(logits, dim=1)
    total_weight = logits.new_full((), float(B))
    g = torch.ops.aten.nll_loss_backward(grad_out.reshape(()), logp, target, None, 1, -100, total_weight)
    return torch.ops.aten._log_softmax_backward_data(g, logp, 1, logits.dtype)
