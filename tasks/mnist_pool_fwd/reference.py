"""2x2 max pooling forward: the function a kernel must compute (float64) and what torch is timed on.

`reference` crops x to even height and width and takes the maximum over each 2x2 block (no pooling op).
"""
import torch.nn.functional as F


def reference(x, *, B, C, H, W):
    PH, PW = H // 2, W // 2
    blocks = x[:, :, :2 * PH, :2 * PW].reshape(B, C, PH, 2, PW, 2)
    return blocks.amax(dim=(3, 5))


def baseline(x, *, B, C, H, W):
    return F.max_pool2d(x, kernel_size=2)
