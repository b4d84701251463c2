"""An Nsight Compute profile of a parent kernel, for the optimize and meta prompts (CUDA target, `ncu` on the
evaluator's PATH, `search.profile`).

`profile(task, lib, options, module, ncu)` runs one correctness call of the kernel — on the shown configuration
with the largest memory floor — in our worker process (`python -m kevolve.judge.worker`, confined as always)
started under `ncu --csv --metrics METRICS`, and parses the CSV ncu writes to its log file. `parse(csv_text)`
turns that CSV into one `KernelProfile` per kernel name with a value read: the mean of each metric over its
launches, and the launch count; the worker's own torch kernels (inputs, poison, guard bytes: names in at::, c10::,
torch::) are left out. `text(profiles, config)` is the table the prompt shows (`compose`'s "A profile of it" section).

Guarantees: `parse` never raises: lines before ncu's header (its `==PROF==` messages) are skipped, a value ncu
could not measure (`n/a`) is absent from the kernel's metrics, thousands separators are read as such (ncu runs
with LC_ALL=C); `profile` never raises for the kernel either: a worker that dies, a kernel that fails, or an
ncu that cannot attach gives a `Profile` with no kernels and the failure. Not guaranteed: anything about
correctness or speed — this decides nothing (the judge does); the numbers describe one call, with ncu's
cache control and clock locking, not the judge's clock.
"""
from __future__ import annotations

import csv
import json
import os
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from kevolve import ROOT
from kevolve.judge.build import cuda_home
from kevolve.judge.options import Options
from kevolve.judge.sandbox import clean_env
from kevolve.judge.worker.serve import NVTX_ENV, NVTX_RANGE
from kevolve.task.spec import Case, Task

METRICS = {          # ncu metric -> the column the prompt shows
    "gpu__time_duration.sum": "time",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM % of peak",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM % of peak",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "warps active %",
    "lts__t_sector_hit_rate.pct": "L2 hit %",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct": "load bytes used / sector %",
    "launch__registers_per_thread": "registers / thread",
}
TORCH = ("at::", "c10::", "torch::", "at_cuda_detail::")      # the worker's own kernels, not the candidate's


@dataclass(frozen=True)
class KernelProfile:
    name: str
    launches: int
    metrics: dict[str, float] = field(default_factory=dict)   # ncu metric -> mean over launches
    units: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Profile:
    kernels: tuple[KernelProfile, ...] = ()
    config: str = ""                  # the configuration profiled (Case.shape_id)
    failure: str | None = None
    raw: str = field(default="", repr=False)     # ncu's CSV as written (to record it)

    @property
    def text(self) -> str:
        return text(self.kernels, self.config) if self.kernels else ""


def _number(value: str) -> float | None:
    try:
        return float(value.replace(",", ""))
    except ValueError:
        return None


def parse(csv_text: str, metrics=METRICS) -> tuple[KernelProfile, ...]:
    """One KernelProfile per kernel name, in the order of first launch (see the module's guarantees); the
    metrics read are `metrics`' keys."""
    lines = csv_text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return ()
    sums: dict[str, dict[str, list[float]]] = {}
    units: dict[str, dict[str, str]] = {}
    launches: dict[str, set[str]] = {}
    for row in csv.DictReader(ln for ln in lines[start:] if ln.startswith('"')):
        name = (row.get("Kernel Name") or "").strip()
        if not name or any(t in name for t in TORCH):
            continue
        launches.setdefault(name, set()).add(row.get("ID", ""))
        metric, value = row.get("Metric Name", ""), _number(row.get("Metric Value") or "")
        if metric in metrics and value is not None:
            sums.setdefault(name, {}).setdefault(metric, []).append(value)
            units.setdefault(name, {})[metric] = row.get("Metric Unit") or ""
    return tuple(KernelProfile(name, len(ids), {m: sum(v) / len(v) for m, v in sums[name].items()}, units[name])
                 for name, ids in launches.items() if name in sums)


def _cell(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("nsecond", "ns"):
        return f"{value / 1000:.1f} us"
    if unit in ("usecond", "us"):
        return f"{value:.1f} us"
    if unit in ("msecond", "ms"):
        return f"{value * 1000:.1f} us"
    return f"{value:.0f}" if unit.startswith("register") else f"{value:.1f}"


def text(kernels: tuple[KernelProfile, ...], config: str) -> str:
    """The prompt's table: one row per kernel, one column per metric (time per launch in us)."""
    header = ["kernel", "launches", *METRICS.values()]
    rows = [[k.name.split("(")[0][:60], str(k.launches),
             *(_cell(k.metrics.get(m), k.units.get(m, "")) for m in METRICS)]
            for k in kernels]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [f"Nsight Compute, one call on {config} (means over launches):"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    return "\n".join(lines)


def largest_shown(task: Task, shapes: str) -> tuple[int, Case]:
    """The shown configuration (never a held-out one) with the largest memory floor, and its index."""
    shown = [(i, c) for i, c in enumerate(task.configs(shapes)) if not c.heldout]
    return max(shown, key=lambda ic: (task.floor(ic[1].size_dict), -ic[0]))


def argv(ncu: str, log: str, metrics=METRICS) -> list[str]:
    """ncu's command line: CSV to `log`, the worker's child processes too, only kernels inside the worker's NVTX
    range around the candidate's call (`worker.NVTX_RANGE`, opened when `one_call` sets `worker.NVTX_ENV`)."""
    return [ncu, "--csv", "--log-file", log, "--target-processes", "all", "--kernel-name-base", "demangled",
            "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", "--metrics", ",".join(metrics)]


def profile(task: Task, lib: str, options: Options, module: str | None, ncu: str, timeout: float = 300.0) -> Profile:
    """One call of the kernel in `lib` under ncu (see the module's docstring)."""
    index, case = largest_shown(task, options.shapes)
    with tempfile.TemporaryDirectory(prefix="kevolve-profile-", ignore_cleanup_errors=True) as tmp:
        log = os.path.join(tmp, "ncu.csv")
        failure = one_call(task, lib, options, module, index, argv(ncu, log), tmp, timeout)
        raw = open(log, errors="replace").read() if os.path.exists(log) else ""
    kernels = parse(raw)
    if not kernels and failure is None:
        failure = "ncu profiled no kernel of the candidate" + (f": {raw[-300:]}" if raw else " (no log)")
    return Profile(kernels, case.shape_id, failure, raw)


def one_call(task: Task, lib: str, options: Options, module: str | None, config: int, prefix: list[str], tmp: str,
             timeout: float) -> str | None:
    """One correctness call of configuration `config` in a worker started as `prefix` + `python -m
    kevolve.judge.worker` in the private directory `tmp`: None, or what went wrong."""
    open(os.path.join(tmp, ".kevolve-worker"), "w").close()            # the worker's private directory
    env = clean_env({"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                     "CUDA_HOME": cuda_home(), "PYTHONUNBUFFERED": "1", "TMPDIR": tmp, "HOME": tmp, "LC_ALL": "C",
                     "XDG_CACHE_HOME": os.path.join(tmp, "cache"), NVTX_ENV: "1"})
    commands = [("init", dict(task_dir=task.ref, lib=lib, abi=options.abi, target=options.target, module=module,
                              exchange=tmp, threads=options.threads)),
                ("set_configs", dict(shapes=options.shapes)), ("check", dict(config=config, variant=0,
                                                                             new_buffers=True))]
    nonces = [secrets.token_hex(8) for _ in commands]
    lines = [json.dumps({"cmd": c, "nonce": n, **a}) for (c, a), n in zip(commands, nonces)] + ['{"cmd": "exit"}']
    try:
        done = subprocess.run([*prefix, sys.executable, "-m", "kevolve.judge.worker"], cwd=tmp, env=env,
                              input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=timeout,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        return f"the worker did not finish within {timeout:.0f} s"
    return _failure(done, nonces)


def _failure(done: subprocess.CompletedProcess, nonces: list[str]) -> str | None:
    """The first error the worker answered, or why its answers are missing."""
    replies = {}
    for line in done.stdout.splitlines():
        try:
            reply = json.loads(line)
        except ValueError:
            continue
        if isinstance(reply, dict) and reply.get("nonce") in nonces:
            replies[reply["nonce"]] = reply
    for n in nonces:
        if n not in replies:
            return f"the worker gave no answer (exit status {done.returncode}): {done.stderr[-300:]}"
        if "error" in replies[n]:
            return f"the worker failed: {replies[n]['error'][:300]}"
    return None
