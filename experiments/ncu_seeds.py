"""Nsight Compute, per configuration: what each launch of a CUDA kernel costs and moves, to see why a kernel is
slower than its floor (issue 14). On a GPU host with `ncu` on PATH:

    python experiments/ncu_seeds.py --task layernorm_fwd --kernel 'tasks/{task}/seeds/cuda_fast.cu' [--shapes bench]

For every shape of the shape set (its first initialisation), one correctness call of the kernel runs in kevolve's own worker
(confined as in a judgement) under `ncu --clock-control none` (the card's clocks as they are), and one row per
kernel of the candidate is printed: launches, time per launch, DRAM bytes read and written (MB, over the
launches) against the task's floor, DRAM and SM throughput in % of peak, achieved occupancy, grid, block,
cluster size, registers and shared memory per block, warp stall reasons. Only the candidate's call is profiled: the
worker opens the NVTX range `kevolve` around it and ncu is limited to that range (`search.profile.argv`); before,
every kernel of the worker (input draws, poison, fingerprints) was replayed once per metric pass, and on an H200 no
bench configuration of layernorm_fwd finished within 95 s. The kernel's configurations run one after another (12
workers at once under ncu were killed, SIGKILL, 1 of 10 profiled; cause not established); torch's children run
side by side (`--jobs`). The numbers describe one call under ncu's cache control (L2 flushed before
each kernel), not the judge's clock: use them to see where time goes, and the judge for speed.

`--torch compile` profiles torch.compile's own kernels (default mode, dynamic=False, compiled as the worker compiles
its baseline) on the same configurations, side by side: this script runs itself (`--child`) under ncu, compiles and
calls the baseline twice, then once more inside an NVTX range that ncu is limited to (`--nvtx-include kevolve/`), so
the rows are that one call's kernels. `--kernel` may then be omitted (torch alone).
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
from kevolve.judge.worker.serve import NVTX_RANGE     # noqa: E402
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
# warp stall reasons, in cycles per issued instruction (ncu's WarpStateStats): kept only where this ncu knows them
STALLS = {
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": "stall mem",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": "stall bar",
    "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio": "stall lg",
    "smsp__average_warps_issue_stalled_membar_per_issue_active.ratio": "stall membar",
}


def known(tool: str, metrics: dict) -> dict:
    """The metrics of `metrics` whose base name `ncu --query-metrics` lists for the card here (an unknown
    metric fails ncu's whole run)."""
    import subprocess
    try:
        listed = subprocess.run([tool, "--query-metrics"], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    names = {line.split()[0] for line in listed.splitlines() if line.strip()}
    return {m: c for m, c in metrics.items() if m.split(".")[0] in names}


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


def one_torch(task, index: int, tool: str, which: str) -> list[list[str]]:
    """torch.compile's kernels of one call of configuration `index`, under ncu (`child`)."""
    import subprocess
    case = task.configs(ARGS.shapes)[index]
    with tempfile.TemporaryDirectory(prefix="kevolve-ncu-", ignore_cleanup_errors=True) as tmp:
        log = os.path.join(tmp, "ncu.csv")
        prefix = ncu.argv(tool, log, METRICS)
        prefix[1:1] = ["--clock-control", "none"]                  # argv limits ncu to the range `kevolve`
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor"), "LC_ALL": "C"}
        done = subprocess.run([*prefix, sys.executable, __file__, "--child", task.ref, str(index), which,
                               "--shapes", ARGS.shapes, "--task", "-", "--kernel", "-"],
                              env=env, capture_output=True, text=True, timeout=600)
        raw = open(log, errors="replace").read() if os.path.exists(log) else ""
    if done.returncode != 0:
        return [[case.shape_id, f"{which}: FAILED (exit {done.returncode}): {done.stderr[-200:]}"]]
    rows = rows_of(case.shape_id, raw, task.floor(case.size_dict) / 1e6)
    return [[r[0], f"[{which}] {r[1]}", *r[2:]] if len(r) > 2 else r for r in rows]


def child(task_ref: str, index: int, which: str) -> int:
    """Under ncu: the baseline compiled and warmed up, then one call inside the NVTX range `kevolve`."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    task = load_task(task_ref)
    case = task.configs(ARGS.shapes)[index]
    sizes, scalars = case.size_dict, task.scalar_values(case)
    ins = task.make_inputs(case, "cuda")
    args = [ins[s.name] for s in task.inputs]
    fn = lambda *a: task.baseline(*a, **sizes, **scalars)  # noqa: E731
    if which == "compile":
        fn = torch.compile(fn, dynamic=False)
    for _ in range(2):
        fn(*args)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(NVTX_RANGE)          # the range `search.profile.argv` limits ncu to
    fn(*args)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return 0


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
                cells.append(f"{v:.1f}" if metric.endswith(".ratio") else f"{v:.0f}")
        rows.append(cells)
    rows.append([label, f"(floor {floor_mb:.2f} MB moved by the whole call)"])
    return rows


def main() -> int:
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", nargs="+", required=True)
    ap.add_argument("--kernel", nargs="*", default=[], help="C-ABI .cu files; {task} is replaced by the task name")
    ap.add_argument("--torch", nargs="*", default=[], choices=["compile"],
                    help="also profile these torch baselines' kernels on the same configurations")
    ap.add_argument("--shapes", default="bench")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--child", nargs=3, metavar=("TASK", "INDEX", "WHICH"), help=argparse.SUPPRESS)
    ARGS = ap.parse_args()
    if ARGS.child:
        return child(ARGS.child[0], int(ARGS.child[1]), ARGS.child[2])
    tool = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    METRICS.update(known(tool, STALLS))
    header = ["configuration", "kernel", "launches", *METRICS.values()]
    if not ARGS.kernel and not ARGS.torch:
        ap.error("give --kernel, --torch, or both")
    for name in ARGS.task:
        task = load_task(name)
        first: dict[str, int] = {}              # one case per shape: its first initialisation and seed
        for i, case in enumerate(task.configs(ARGS.shapes)):
            first.setdefault(case.shape_id, i)
        for pattern in ARGS.kernel:
            path = Path(pattern.replace("{task}", name))
            if not path.exists():
                continue
            b = build(path.read_text(), "cuda", "c")
            print(f"\n## {name} {path.name}" + ("" if b.ok else f": build failed: {b.error[:300]}"), flush=True)
            if not b.ok:
                continue
            table(header, [one(task, b.lib_path, i, tool) for i in first.values()])   # one at a time (docstring)
        for which in ARGS.torch:
            print(f"\n## {name} torch {which}", flush=True)
            with ThreadPoolExecutor(ARGS.jobs) as pool:
                table(header, list(pool.map(lambda i: one_torch(task, i, tool, which), first.values())))
    return 0


def table(header: list[str], results: list[list[list[str]]]) -> None:
    rows = [header] + [r for rs in results for r in rs]
    widths = [max(len(r[i]) for r in rows if len(r) == len(header)) for i in range(len(header))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() if len(r) == len(header)
              else "  ".join(r), flush=True)


if __name__ == "__main__":
    sys.exit(main())
