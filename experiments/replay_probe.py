"""Which graph queries this GPU's driver answers (issue 49's replay reads a captured graph's edges; on an H100 with the
CUDA 13 driver `cuGraphNodeGetDependencies_v2` with no buffers returned CUDA_ERROR_INVALID_VALUE). Captures a small
torch graph with a fork (two streams joined), keeps it, and prints each query's return code and answer, then which way
`judge.replay.describe._dependencies` picks.

    python experiments/replay_probe.py            (on the GPU machine)
"""
from __future__ import annotations

import ctypes
from ctypes import c_size_t, c_void_p

import torch

from kevolve.judge.replay import describe, driver


def main() -> None:
    x = torch.zeros(1 << 20, device="cuda")
    y = torch.zeros(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        x.add_(1)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y.mul_(2)
        torch.cuda.current_stream().wait_stream(side)
        x.add_(y)
    raw = int(graph.raw_cuda_graph())
    cu = driver.lib()
    count = c_size_t(0)
    print("driver:", torch.version.cuda, torch.cuda.get_device_name())
    print("cuGraphGetNodes (count):", cu.cuGraphGetNodes(c_void_p(raw), None, ctypes.byref(count)), count.value)
    handles = (c_void_p * count.value)()
    print("cuGraphGetNodes:", cu.cuGraphGetNodes(c_void_p(raw), handles, ctypes.byref(count)), count.value)
    for h in handles:
        n = c_size_t(0)
        a = cu.cuGraphNodeGetDependencies_v2(c_void_p(h), None, None, ctypes.byref(n))
        n2, found = c_size_t(16), (c_void_p * 16)()
        b = cu.cuGraphNodeGetDependencies_v2(c_void_p(h), found, None, ctypes.byref(n2))
        n3, found3, edges = c_size_t(16), (c_void_p * 16)(), (ctypes.c_uint8 * 128)()
        c = cu.cuGraphNodeGetDependencies_v2(c_void_p(h), found3, edges, ctypes.byref(n3))
        n4, found4 = c_size_t(16), (c_void_p * 16)()
        d = cu.cuGraphNodeGetDependencies(c_void_p(h), found4, ctypes.byref(n4))
        print(f"node {h:#x}: v2 count-only rc {a} n {n.value}; v2 no edge data rc {b} n {n2.value}; "
              f"v2 edge data rc {c} n {n3.value}; v1 rc {d} n {n4.value}")
    n5, src, dst, edges5 = c_size_t(64), (c_void_p * 64)(), (c_void_p * 64)(), (ctypes.c_uint8 * 512)()
    print("cuGraphGetEdges_v2:", cu.cuGraphGetEdges_v2(c_void_p(raw), src, dst, edges5, ctypes.byref(n5)), n5.value)
    nodes, _ = describe._nodes(raw)
    print(f"describe: {len(nodes)} nodes, {[n.deps for n in nodes]}; read by: {describe.ASKED}")


if __name__ == "__main__":
    main()
