"""Llama feed-forward block forward (robust-kbench's llama_ffw): out = (silu(x Wg^T) * (x Wu^T)) Wd^T,
the function a kernel must compute (float64) and what torch is timed on (three F.linear in float32, TF32
off)."""
import torch
import torch.nn.functional as F


def reference(x, gate_proj, up_proj, down_proj, *, M, D, U):
    gate = x @ gate_proj.t()
    hidden = gate * torch.sigmoid(gate) * (x @ up_proj.t())
    return hidden @ down_proj.t()


def baseline(x, gate_proj, up_proj, down_proj, *, M, D, U):
    return F.linear(F.silu(F.linear(x, gate_proj)) * F.linear(x, up_proj), down_proj)
