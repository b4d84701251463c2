"""Build time of the same kernel through the C ABI (nvcc/g++ alone) and the torch extension (ninja + torch headers).

    python experiments/bench_build.py [--task layernorm_fwd] [--repeat 2]

Each build is cold (a fresh cache directory), so this measures compilation, not the cache. Prints one row per
(target, abi) with the median of the repeats. Why it matters: the search builds every candidate.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile

from kevolve.judge import build as builder
from kevolve.report.tables import table
from kevolve.task import load_task


def cold_build(source: str, target: str, abi: str) -> float:
    with tempfile.TemporaryDirectory() as cache:
        os.environ["KEVOLVE_CACHE"] = cache
        b = builder.build(source, target, abi)
        if not b.ok:
            raise SystemExit(f"{target}/{abi} build failed:\n{b.error}")
        return b.seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="layernorm_fwd")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    task = load_task(args.task)
    rows = []
    for target, abi in (("cuda", "c"), ("cuda", "torch"), ("cpu", "c")):
        try:
            path = task.seed_path(target, abi)
        except Exception:
            continue
        times = [cold_build(path.read_text(), target, abi) for _ in range(args.repeat)]
        rows.append([f"{target}/{abi}", path.name, f"{statistics.median(times):.2f}",
                     " ".join(f"{t:.2f}" for t in times)])
    print(f"host: {platform.node()} ({os.cpu_count()} cores); CUDA arch {builder.detect_arch()}")
    print(table(rows, ["target/abi", "source", "median s", "all s"]))


if __name__ == "__main__":
    main()
