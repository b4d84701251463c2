"""Nsight Compute, per configuration: what each launch of a CUDA kernel costs and moves, to see why a kernel is
slower than its floor (issue 14). On a GPU host with `ncu` on PATH:

    python experiments/ncu_seeds.py --task layernorm_fwd --kernel 'tasks/{task}/seeds/cuda_fast.cu' [--shapes bench]

For every shape of the shape set (its first initialisation), one correctness call of the kernel runs in kevolve's own worker
(confined as in a judgement) under `ncu --clock-control none` (the card's clocks as they are), and one row per
kernel of the candidate is printed: launches, time per launch, DRAM bytes read and written (MB, over the
launches) against the task's floor, DRAM and SM throughput in % of peak, achieved occupancy, grid, block,
cluster size, registers and shared memory per block. Configurations run side by side (`--jobs`; ncu serialises
the profiled kernels themselves). The numbers describe one call under ncu's cache control (L2 flushed before
each kernel), not the judge's clock: use them to see where time goes, and the judge for speed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kevolve.judge.build import build          # noqa: E402
from kevolve.judge.options import Options      # noqa: E402
from kevolve.search import profile as ncu      # noqa: E402
from kevolve.task import load_task             # noqa: E402

METRICS = {
    "gpu__time_duration.sum": "us",
    "dram__bytes_read.sum": "read MB",
    "dram__bytes_write.sum": "write MB",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM %",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM %",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occ %",
    "launch__grid_size": "grid",
    "launch__block_size": "block",
    "launch__cluster_dim_x": "cluster",
    "launch__registers_per_thread": "regs",
    "launch__shared_mem_per_block": "smem B",
}


def one(task, lib: str, index: int, tool: str) -> list[list[str]]:
    case = task.configs(ARGS.shapes)[index]
    with tempfile.TemporaryDirectory(prefix="kevolve-ncu-", ignore_cleanup_errors=True) as tmp:
        log = os.path.join(tmp, "ncu.csv")
        prefix = ncu.argv(tool, log, METRICS)
        prefix[1:1] = ["--clock-control", "none"]
        failure = ncu.one_call(task, lib, Options(target="cuda", shapes=ARGS.shapes), None, index, prefix, tmp, 300)
        raw = open(log, errors="replace").read() if os.path.exists(log) else ""
    if failure:
        return [[case.shape_id, f"FAILED: {failure[:160]}"]]
    return rows_of(case.shape_id, raw, task.floor(case.size_dict) / 1e6)


def rows_of(label: str, raw: str, floor_mb: float) -> list[list[str]]:
    """The table's rows for one configuration from ncu's CSV."""
    rows = []
    for k in ncu.parse(raw, METRICS):
        m = k.metrics
        cells = [label, k.name.split("(")[0][:40], str(k.launches)]
        for metric in METRICS:
            v = m.get(metric)
            unit = k.units.get(metric, "")
            if v is None:
                cells.append("-")
            elif metric == "gpu__time_duration.sum":
                cells.append(f"{v / 1000 if unit in ('nsecond', 'ns') else v * (1000 if unit in ('msecond', 'ms') else 1):.1f}")
            elif metric.startswith("dram__bytes"):
                scale = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1, "Gbyte": 1e3}.get(unit, 1e-6)
                cells.append(f"{v * scale * k.launches:.2f}")
            else:
                cells.append(f"{v:.0f}")
        rows.append(cells)
    rows.append([label, f"(floor {floor_mb:.2f} MB moved by the whole call)"])
    return rows


def main() -> int:
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", nargs="+", required=True)
    ap.add_argument("--kernel", nargs="+", required=True, help="C-ABI .cu files; {task} is replaced by the task name")
    ap.add_argument("--shapes", default="bench")
    ap.add_argument("--jobs", type=int, default=6)
    ARGS = ap.parse_args()
    tool = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    header = ["configuration", "kernel", "launches", *METRICS.values()]
    for name in ARGS.task:
        task = load_task(name)
        for pattern in ARGS.kernel:
            path = Path(pattern.replace("{task}", name))
            if not path.exists():
                continue
            b = build(path.read_text(), "cuda", "c")
            print(f"\n## {name} {path.name}" + ("" if b.ok else f": build failed: {b.error[:300]}"), flush=True)
            if not b.ok:
                continue
            first: dict[str, int] = {}          # one case per shape: its first initialisation and seed
            for i, case in enumerate(task.configs(ARGS.shapes)):
                first.setdefault(case.shape_id, i)
            with ThreadPoolExecutor(ARGS.jobs) as pool:
                results = list(pool.map(lambda i: one(task, b.lib_path, i, tool), first.values()))
            rows = [header] + [r for rs in results for r in rs]
            widths = [max(len(r[i]) for r in rows if len(r) == len(header)) for i in range(len(header))]
            for r in rows:
                print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() if len(r) == len(header)
                      else "  ".join(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
