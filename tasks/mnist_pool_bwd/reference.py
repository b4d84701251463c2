"""2x2 max pooling backward: the gradient a kernel must compute (float64) and what torch is timed on.

`reference`, written out (no autograd, no pooling op): each 2x2 window of x (cropped to even height and
width) as 4 values in row-major order; its grad_out value goes to the first maximum (torch.argmax returns
the first), zeros elsewhere and in an odd last row or column.
`baseline`: what eager autograd runs for F.max_pool2d's backward, with the forward recomputed for its
indices (the backward is given x, not the indices): max_pool2d_with_indices, then its backward.
"""
import torch
import torch.nn.functional as F


def reference(grad_out, x, *, B, C, H, W):
    PH, PW = H // 2, W // 2
    windows = x[:, :, :2 * PH, :2 * PW].reshape(B, C, PH, 2, PW, 2).permute(0, 1, 2, 4, 3, 5).reshape(B, C, PH, PW, 4)
    first = F.one_hot(windows.argmax(dim=4), 4).to(grad_out.dtype)
    g = (first * grad_out[..., None]).reshape(B, C, PH, PW, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(B, C, 2 * PH, 2 * PW)
    return F.pad(g, (0, W - 2 * PW, 0, H - 2 * PH))


def baseline(grad_out, x, *, B, C, H, W):
    _, indices = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
    return torch.ops.aten.max_pool2d_with_indices_backward(grad_out, x, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)
