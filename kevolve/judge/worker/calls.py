"""What surrounds a candidate's call in the worker: the NVTX range Nsight Compute is limited to, torch's
NaN-filled allocations for the torch ABI, and the CPU's name for the record.
"""
from __future__ import annotations

import os

NVTX_ENV, NVTX_RANGE = "KEVOLVE_NVTX", "kevolve"     # under Nsight Compute (`search.profile`): the kernel's range


class profiled_range:
    """With `KEVOLVE_NVTX` set (a worker started under ncu by `search.profile`), the candidate's call inside the
    NVTX range `kevolve`, which ncu is limited to (`--nvtx-include kevolve/`): the worker's own kernels (inputs,
    poison, fingerprints) are left unprofiled, each of which would otherwise be replayed once per metric pass."""

    def __enter__(self):
        self.on = bool(os.environ.get(NVTX_ENV))
        if self.on:
            import torch
            torch.cuda.nvtx.range_push(NVTX_RANGE)

    def __exit__(self, *exc):
        if self.on:
            import torch
            torch.cuda.nvtx.range_pop()


class fill_uninitialized:
    """Torch ABI: makes torch::empty hand out NaN-filled memory during the candidate's call."""

    def __init__(self, on: bool):
        self.on = on

    def __enter__(self):
        if self.on:
            import torch
            self.prev = (torch.are_deterministic_algorithms_enabled(),
                         torch.is_deterministic_algorithms_warn_only_enabled(),
                         torch.utils.deterministic.fill_uninitialized_memory)
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.utils.deterministic.fill_uninitialized_memory = True

    def __exit__(self, *exc):
        if self.on:
            import torch
            torch.use_deterministic_algorithms(self.prev[0], warn_only=self.prev[1])
            torch.utils.deterministic.fill_uninitialized_memory = self.prev[2]


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores)"
    except OSError:
        pass
    return "cpu"
