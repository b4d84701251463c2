"""ResNet basic block forward, inference (robust-kbench's resnet_block): the function a kernel must compute
(float64) and what torch is timed on.

  y   = relu(bn1(conv3x3(x, conv1_weight, stride=STRIDE, padding=1)))
  y   = bn2(conv3x3(y, conv2_weight, stride=1, padding=1))
  s   = x                                                        if C == K and STRIDE == 1
        bn_d(conv1x1(x, downsample_weight, stride=STRIDE))       otherwise
  out = relu(y + s)
with bn(v)[k] = (v[k] - mean[k]) / sqrt(var[k] + eps) * weight[k] + bias[k] (running statistics, eval mode).
`baseline` is robust-kbench's forward_fn: F.conv2d and F.batch_norm(training=False) in float32, TF32 off.
"""
import torch
import torch.nn.functional as F


def identity_shortcut(C: int, K: int, STRIDE: int) -> bool:
    """robust-kbench adds the 1x1 projection whenever the stride or the channel count changes."""
    return C == K and STRIDE == 1


def _bn(v, weight, bias, mean, var, eps):
    scale = (weight / torch.sqrt(var + eps)).view(1, -1, 1, 1)
    return (v - mean.view(1, -1, 1, 1)) * scale + bias.view(1, -1, 1, 1)


def reference(x, conv1_weight, bn1_weight, bn1_bias, bn1_mean, bn1_var,
              conv2_weight, bn2_weight, bn2_bias, bn2_mean, bn2_var,
              downsample_weight, downsample_bn_weight, downsample_bn_bias, downsample_bn_mean, downsample_bn_var,
              *, B, C, H, W, K, STRIDE, eps):
    y = F.relu(_bn(F.conv2d(x, conv1_weight, stride=STRIDE, padding=1), bn1_weight, bn1_bias, bn1_mean, bn1_var, eps))
    y = _bn(F.conv2d(y, conv2_weight, padding=1), bn2_weight, bn2_bias, bn2_mean, bn2_var, eps)
    if identity_shortcut(C, K, STRIDE):
        shortcut = x
    else:
        shortcut = _bn(F.conv2d(x, downsample_weight.view(K, C, 1, 1), stride=STRIDE), downsample_bn_weight,
                       downsample_bn_bias, downsample_bn_mean, downsample_bn_var, eps)
    return F.relu(y + shortcut)


def baseline(x, conv1_weight, bn1_weight, bn1_bias, bn1_mean, bn1_var,
             conv2_weight, bn2_weight, bn2_bias, bn2_mean, bn2_var,
             downsample_weight, downsample_bn_weight, downsample_bn_bias, downsample_bn_mean, downsample_bn_var,
             *, B, C, H, W, K, STRIDE, eps):
    out = F.conv2d(x, conv1_weight, stride=STRIDE, padding=1)
    out = F.relu(F.batch_norm(out, bn1_mean, bn1_var, bn1_weight, bn1_bias, False, 0.1, eps))
    out = F.conv2d(out, conv2_weight, stride=1, padding=1)
    out = F.batch_norm(out, bn2_mean, bn2_var, bn2_weight, bn2_bias, False, 0.1, eps)
    if identity_shortcut(C, K, STRIDE):
        identity = x
    else:
        identity = F.conv2d(x, downsample_weight.view(K, C, 1, 1), stride=STRIDE)
        identity = F.batch_norm(identity, downsample_bn_mean, downsample_bn_var, downsample_bn_weight,
                                downsample_bn_bias, False, 0.1, eps)
    return F.relu(out + identity)
