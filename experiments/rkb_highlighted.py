"""robust-kbench's highlighted kernels, judged by kevolve on our tasks through the torch ABI.

    python experiments/rkb_highlighted.py export [--mirror DIR] [--out .rkb]     # here: needs the mirror
    python experiments/rkb_highlighted.py build [--kernels .rkb] [--jobs 4]       # rules + torch-extension build
    python experiments/rkb_highlighted.py run [--kernels .rkb] [--shapes bench] [--only NAME,...] [--timeout 600] [--jobs 3]

`export` writes every `highlighted/<task>/<direction>/kernel.cu` of a robust-kbench checkout (a bare git
directory is fine) and its `results.csv` into an ignored folder (default `.rkb/`), so a host without network
can take them (carry `.rkb`). `build` checks each kernel against the static rules and builds it with
kevolve's torch-extension path for target cuda (cached, so `run` reuses it), in parallel. `run` finds for each
kernel the task whose `torch_abi.robust_kbench` names its robust-kbench task in the same direction, runs
`python -m kevolve.evaluate task=... kernel=... target=cuda abi=torch shapes=...` in a child process, and
prints one row per kernel: the task (or "no task yet"), whether it loads (passes the rules, builds, loads, and
takes the declared arguments), whether it is correct, why not, our speedup over the faster torch baseline, and
the speedup over torch.compile that robust-kbench reported for it (`results.csv`).

What a row does not say: that robust-kbench's own configurations are all we judge — our bench sets add
held-out shapes (odd sizes, LLM vocabularies), where several highlighted kernels fail by design.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MIRROR = "/work/.mirror/SakanaAI+robust-kbench/repo"
DIRECTIONS = ("forward", "backward")


def export(mirror: str, out: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", mirror, *args], check=True, capture_output=True, text=True).stdout
    files = [f for f in git("ls-tree", "-r", "--name-only", "HEAD", "highlighted").split() if f.endswith(".cu")
             or f.endswith(".csv")]
    if not files:
        raise SystemExit(f"{mirror}: no highlighted/ kernels at HEAD")
    for f in files:
        dest = out / Path(f).relative_to("highlighted")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(git("show", f"HEAD:{f}"))
    print(f"wrote {len(files)} files under {out}/ (carry it to the GPU host)")


def kernels(folder: Path) -> list[tuple[str, str, Path]]:
    """(robust-kbench task, direction, file) for every kernel under `folder`."""
    found = sorted((p.parent.parent.name, p.parent.name, p) for p in folder.glob("*/*/kernel.cu")
                   if p.parent.name in DIRECTIONS)
    if not found:
        raise SystemExit(f"no kernels under {folder}/<task>/<direction>/kernel.cu: run `export` first (where the "
                         f"robust-kbench mirror is) and carry the folder")
    return found


def our_tasks() -> dict[tuple[str, str], str]:
    """(robust-kbench task, direction) -> our task, for every task folder whose torch_abi names one."""
    from kevolve.task import list_tasks, load_task
    found = {}
    for name in list_tasks():
        t = load_task(name)
        if t.torch_call is not None and t.torch_call.robust_kbench:
            found[(t.torch_call.robust_kbench, t.direction)] = name
    return found


def build_all(folder: Path, jobs: int) -> dict[str, tuple[bool, str]]:
    from kevolve.judge.build import build
    from kevolve.judge.static.rules import check

    def one(item) -> tuple[str, tuple[bool, str]]:
        rkb, direction, path = item
        source, start = path.read_text(), time.perf_counter()
        verdict = check(source, "cuda", "torch")
        if not verdict.ok:
            print(f"{rkb}/{direction}: static rule: {verdict.reason[:300]}", flush=True)
            return f"{rkb}/{direction}", (False, f"static rule: {verdict.reason}")
        b = build(source, "cuda", abi="torch")
        why = f"built in {b.seconds:.0f} s" if b.ok and not b.cached else "cached" if b.ok else f"compile error: {b.error}"
        print(f"{rkb}/{direction}: {why[:300]} ({time.perf_counter() - start:.0f} s)", flush=True)
        return f"{rkb}/{direction}", (b.ok, why)
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        return dict(pool.map(one, kernels(folder)))


def math_headers(folder: Path) -> None:
    """A CUDA toolkit without the math libraries' headers (cusparse.h, cublas_v2.h, ...) cannot compile a kernel
    that includes <ATen/cuda/CUDAContext.h>; torch's pip wheels ship them (nvidia/*/include). Links to the ones
    the toolkit lacks go to `folder`/include, which joins CPATH (never shadowing a toolkit header)."""
    from kevolve.judge.build import cuda_home
    toolkit = Path(cuda_home(), "include")
    if (toolkit / "cusparse.h").exists():
        return
    try:
        import nvidia
    except ImportError:
        print(f"{toolkit} has no cusparse.h and no nvidia wheel is installed: kernels that include "
              "<ATen/cuda/CUDAContext.h> will not compile", flush=True)
        return
    links = folder / "include"
    links.mkdir(parents=True, exist_ok=True)
    for root in nvidia.__path__:
        for header in Path(root).glob("*/include/*"):
            if not (toolkit / header.name).exists() and not (links / header.name).exists():
                (links / header.name).symlink_to(header)
    os.environ["CPATH"] = os.pathsep.join(filter(None, [str(links), os.environ.get("CPATH")]))


def reported(folder: Path) -> dict[tuple[str, str], str]:
    """robust-kbench's own speedup over torch.compile per (task, direction), from its results.csv."""
    path = folder / "results.csv"
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        return {(r["task_name"], "forward" if r["forward"] == "True" else "backward"):
                f"{float(r['Speedup Compile']):.2f}x" for r in csv.DictReader(f)}


def evaluate(task: str, path: Path, shapes: str, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "kevolve.evaluate", f"task={task}", f"kernel={path}", "target=cuda", "abi=torch",
           f"shapes={shapes}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        return {"failure": f"kevolve.evaluate did not finish within {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"failure": f"kevolve.evaluate exited {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}"}
    return json.loads(lines[-1])


def loads(result: dict) -> str:
    failure = result.get("failure") or ""
    early = ("static rule", "compile error", "load error", "kevolve.evaluate")
    if not result.get("compiled") or failure.startswith(early) or "does not take the task's torch-ABI" in failure:
        return "no"
    return "yes"


def run(folder: Path, shapes: str, only: set[str], timeout: float, jobs: int = 1) -> None:
    """Judges every kernel, `jobs` evaluations side by side (kevolve's device lock keeps each timing phase
    alone on the GPU); rows print in the kernels' order as they finish."""
    from kevolve.report.tables import table
    tasks, theirs = our_tasks(), reported(folder)
    picked = [(rkb, direction, path, tasks.get((rkb, direction))) for rkb, direction, path in kernels(folder)]
    picked = [p for p in picked if not only or f"{p[0]}/{p[1]}" in only or (p[3] or "") in only]

    def one(item) -> list[str]:
        rkb, direction, path, task = item
        name, theirs_x = f"{rkb}/{direction}", theirs.get((rkb, direction), "-")
        if task is None:
            row = [name, "no task yet", "-", "-", "", "-", theirs_x]
        else:
            start = time.perf_counter()
            r = evaluate(task, path, shapes, timeout)
            speed = r.get("speedup")
            row = [name, task, loads(r), "yes" if r.get("correct") else "no",
                   " ".join((r.get("failure") or "").split())[:160] + f" ({time.perf_counter() - start:.0f} s)",
                   f"{speed:.2f}x" if r.get("correct") and speed else "-", theirs_x]
        print(" | ".join(row), flush=True)
        return row
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        rows = list(pool.map(one, picked))
    print(table(rows, ["kernel", "task", "loads?", "correct?", "failure (seconds)", f"speedup ({shapes})",
                       "rkb vs compile"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=("export", "build", "run"))
    ap.add_argument("--mirror", default=MIRROR)
    ap.add_argument("--out", "--kernels", dest="folder", default=str(ROOT / ".rkb"))
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--shapes", default="bench")
    ap.add_argument("--only", default="", help="comma-separated kernels (layernorm/forward) or our task names")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per kernel's evaluation")
    args = ap.parse_args()
    folder = Path(args.folder)
    if args.step != "export":
        math_headers(folder)
    if args.step == "export":
        export(args.mirror, folder)
    elif args.step == "build":
        results = build_all(folder, args.jobs)
        print(f"{sum(ok for ok, _ in results.values())} of {len(results)} kernels pass the rules and build")
    else:
        run(folder, args.shapes, {s for s in args.only.split(",") if s}, args.timeout, args.jobs)


if __name__ == "__main__":
    main()
