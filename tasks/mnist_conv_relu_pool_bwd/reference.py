"""Conv 3x3 + ReLU + 2x2 max pooling backward: the gradients a kernel must compute (float64) and what torch
is timed on.

`reference`, written out (no autograd, no convolution or pooling op): conv = weight [O, 9C] @ x's 3x3
patches (F.unfold) + bias; in each 2x2 window of conv, the first maximum in row-major order (torch.argmax
returns the first) receives the window's grad_out value if that maximum is > 0 (ReLU'(0) = 0); that is g,
zero elsewhere. Then grad_bias = sum of g over b, h, w; grad_weight = g @ patches^T summed over the batch;
grad_x = F.fold(weight^T @ g), the adjoint of F.unfold (it adds overlapping patches).
`baseline`: the ops eager autograd runs, in float32, with the forward recomputed (the backward is given x,
weight and bias, not the forward's saved tensors): conv2d, relu, max_pool2d_with_indices, its backward,
threshold_backward, convolution_backward.
"""
import torch
import torch.nn.functional as F


def reference(grad_out, x, weight, bias, *, B, C, H, W, O):
    OH, OW = H - 2, W - 2
    PH, PW = OH // 2, OW // 2
    patches = F.unfold(x, 3)                                                     # [B, 9C, OH * OW]
    conv = (weight.reshape(O, 9 * C) @ patches + bias[:, None]).reshape(B, O, OH, OW)
    windows = conv[:, :, :2 * PH, :2 * PW].reshape(B, O, PH, 2, PW, 2).permute(0, 1, 2, 4, 3, 5).reshape(B, O, PH, PW, 4)
    chosen = F.one_hot(windows.argmax(dim=4), 4).to(x.dtype) * (windows.amax(dim=4) > 0)[..., None]
    g = (chosen * grad_out[..., None]).reshape(B, O, PH, PW, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(B, O, 2 * PH, 2 * PW)
    g = F.pad(g, (0, OW - 2 * PW, 0, OH - 2 * PH)).reshape(B, O, OH * OW)
    grad_weight = torch.einsum("bol,bkl->ok", g, patches).reshape(O, C, 3, 3)
    grad_x = F.fold(weight.reshape(O, 9 * C).T @ g, (H, W), 3)
    return grad_x, grad_weight, g.sum(dim=(0, 2))


def baseline(grad_out, x, weight, bias, *, B, C, H, W, O):
    act = torch.relu(F.conv2d(x, weight, bias))
    _, indices = torch.ops.aten.max_pool2d_with_indices(act, [2, 2], [2, 2])
    g = torch.ops.aten.max_pool2d_with_indices_backward(grad_out, act, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)
    g = torch.ops.aten.threshold_backward(g, act, 0)
    return torch.ops.aten.convolution_backward(g, x, weight, [O], [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
                                               [True, True, True])
