"""Conv 3x3 + ReLU + 2x2 max pooling forward: the function a kernel must compute (float64) and what torch
is timed on.

`reference` computes the convolution as a matrix product of the weight with x's 3x3 patches (F.unfold), then
ReLU and the maximum over each 2x2 block of its output (no convolution or pooling op).
"""
import torch
import torch.nn.functional as F


def conv3x3(x, weight, bias, B, C, H, W, O):
    """conv2d(x, weight, bias), kernel 3, stride 1, no padding, as weight [O, 9C] @ patches [B, 9C, L]."""
    return (weight.reshape(O, 9 * C) @ F.unfold(x, 3) + bias[:, None]).reshape(B, O, H - 2, W - 2)


def pool2x2(y):
    B, O, OH, OW = y.shape
    PH, PW = OH // 2, OW // 2
    return y[:, :, :2 * PH, :2 * PW].reshape(B, O, PH, 2, PW, 2).amax(dim=(3, 5))


def reference(x, weight, bias, *, B, C, H, W, O):
    return pool2x2(torch.clamp(conv3x3(x, weight, bias, B, C, H, W, O), min=0))


def baseline(x, weight, bias, *, B, C, H, W, O):
    return F.max_pool2d(F.relu(F.conv2d(x, weight, bias)), kernel_size=2)
