"""UNet 3x3 convolution forward (robust-kbench's unet_conv2d): out = conv2d(x, weight, bias, STRIDE, PAD),
NCHW, the function a kernel must compute (float64) and what torch is timed on (F.conv2d in float32, TF32
off)."""
import torch.nn.functional as F


def reference(x, weight, bias, *, B, C, H, W, K, STRIDE, PAD):
    return F.conv2d(x, weight, bias, stride=STRIDE, padding=PAD)


def baseline(x, weight, bias, *, B, C, H, W, K, STRIDE, PAD):
    return F.conv2d(x, weight, bias, stride=STRIDE, padding=PAD)
