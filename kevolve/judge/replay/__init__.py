"""Timing a CUDA kernel's device code where its host code never ran (issue 49, item 2).

The kernel's worker captures one call of the kernel into a CUDA graph and describes its nodes (`describe`, in that
worker: its word, never trusted); the evaluator refuses what cannot be replayed (`nodes.unreplayable`); a clean worker
that never runs the candidate's host code loads only the library's device code (`fatbin`: its `.nv_fatbin`
section), copies across the `__device__`/`__constant__` data the host code set, and replays the described nodes on
its own buffers (`nodes.relocate`, `device.ReplayedKernel`) as the kernel's calls of an ordinary timing session —
checked, canaried, interleaved with torch's baselines in the clean baseline worker. The time reported is that
worker's. See docs/guarantees.md.
"""
