"""How torch computes a task's float32 baselines: IEEE float32, no TF32 — in the judge's worker and everywhere else.

torch lets cuDNN run float32 convolutions in TF32 (a 10-bit mantissa) by default (`torch.backends.cudnn.allow_tf32`
is True), and cuBLAS its matmuls when `torch.set_float32_matmul_precision` or `torch.backends.cuda.matmul.allow_tf32`
asks. A baseline computed that way is ~1e-3 relative off (145x a 1e-4 tolerance on mnist_conv_relu_pool_fwd, on an
H200) and faster than float32 allows. The judge's worker times and checks torch in IEEE float32, so every process
that computes a baseline — the worker, the task filters (`kevolve.task.filters`), the experiments — sets the same
switches through this module, and gets the same numbers.

Guarantees: `set_strict_float32()` turns TF32 off for cuBLAS and cuDNN and asks for "highest" float32 matmul
precision, process-wide (what the worker does once, before any baseline runs); `strict_float32()` does the same for
a `with` block and restores the caller's settings after it (what the filters do, inside a caller's process).
torch.compile reads the same switches when it compiles, so compiling inside the block compiles IEEE float32 code.
Not guaranteed: the same reduction order as any other library, or anything about float16/bfloat16 reductions.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


def set_strict_float32() -> None:
    """TF32 off for cuBLAS and cuDNN, float32 matmuls at "highest" precision, for the rest of this process."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def settings() -> tuple[bool, bool, str]:
    """(cuBLAS TF32 allowed, cuDNN TF32 allowed, float32 matmul precision): what `set_strict_float32` changes."""
    import torch
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.get_float32_matmul_precision())


@contextmanager
def strict_float32() -> Iterator[None]:
    """`set_strict_float32()` for the block; the caller's settings come back after it, also on an exception."""
    import torch
    matmul, cudnn, precision = settings()
    set_strict_float32()
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = cudnn
