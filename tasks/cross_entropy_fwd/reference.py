"""Cross-entropy forward (mean over rows of -log_softmax(logits)[target]): reference (float64) and baseline."""
import torch
import torch.nn.functional as F


def reference(logits, target, *, B, C):
    lse = torch.logsumexp(logits, dim=1)
    picked = logits.gather(1, target.view(-1, 1)).squeeze(1)
    return (lse - picked).mean().reshape(1)


def baseline(logits, target, *, B, C):
    return F.cross_entropy(logits, target).reshape(1)
