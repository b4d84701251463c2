"""A knob search's throughput, from its store: candidates judged per minute of search, how busy the evaluators were,
how much was built and how fast the first verdict came.

    python -m kevolve.tasks search-throughput TASK [TASK ...] [--target cuda] [--seconds 95] [--out DIR]
                                            [--set KEY=VALUE ...] [--confirm] [--warm]
    python -m kevolve.tasks search-throughput --runs RUN_DIR [RUN_DIR ...]        (the table of runs made before)

For each task, one `python -m kevolve task=TASK resources.target=TARGET search.wall_time_s=SECONDS
search.candidates=100000 run_dir=...` with the given overrides (no LLM: knob mutation only), its output in
OUT/search_TASK.txt and its run directory (kevolve.db, the best kernel, that output) in OUT/run_TASK.tgz; a fresh
build and baseline cache per search (KEVOLVE_CACHE), as on a fresh machine, unless --warm. Once the search has
stopped, it is interrupted (Ctrl-C) during the best's final judgement, which is no part of its throughput, unless
--confirm. Prints one row per run, last, and writes the table to OUT/throughput.txt.

Every number comes from the store (the same way for runs of any kevolve version): the search starts when its
seeds are stored and ends at its `stop` event (wall time, knob space spent) or, without one, at its last verdict.
- cand: candidates with a verdict; per min: cand per minute of search;
- busy: evaluator seconds spent judging candidates (their `evaluate` timings) and timing challengers paired with
  the best (`compare` events), over evaluators × search seconds; cmp: the compare share of that time;
- busy after 1st: the same from the first judgement's start (before it nothing is built to judge);
- 1st verdict: seconds from the start to the first verdict (seed builds, then the first judgement, which
  compiles the torch baselines);
- build s: build seconds summed; at once: their mean number at once (build s / search s); most in flight, most
  building: the most candidates in flight and builds running that the progress lines show (every 15 s; '-' for
  logs without them).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from kevolve import ROOT

from kevolve.report.tables import table
from kevolve.record.store import Store, StoreError


HEADERS = ["task", "cand", "search s", "per min", "busy", "cmp", "busy after 1st", "1st verdict s", "build s",
           "at once", "most in flight", "most building", "stopped"]


def measure(run_dir: Path, log: Path | None = None) -> dict:
    """The run's throughput numbers (see the module's docstring)."""
    with Store.open(run_dir, readonly=True) as store:
        records, finished = store.candidates(), store.finished()
        events = store.events()
        task = store.meta().get("task", "?")
    start = min(r.candidate.created for r in records)
    stops = [(t, p.get("reason", "")) for t, kind, p in events if kind == "stop"
             and not str(p.get("reason", "")).startswith("interrupted")]
    last = max((r.updated for r in finished), default=start)
    end, stopped = stops[0] if stops else (last, "budget of candidates spent" if finished else "none judged")
    seconds = max(end - start, 1e-9)
    finish = [p for _, kind, p in events if kind == "finish"]
    evaluators = int(finish[-1].get("evaluators", 1)) if finish else 1
    evaluate = sum(r.timings.get("evaluate", 0.0) for r in finished)
    compare = sum(p.get("seconds") or 0.0 for t, kind, p in events if kind == "compare" and t <= end)
    judged = [r for r in finished if "evaluate" in r.timings]
    first = min(judged, key=lambda r: r.updated) if judged else None
    first_start = first.updated - first.timings["evaluate"] if first else end
    busy = evaluate + compare
    return {"task": task, "cand": len(finished), "search s": seconds, "per min": 60 * len(finished) / seconds,
            "busy": busy / (evaluators * seconds), "cmp": compare / (evaluators * seconds),
            "busy after 1st": busy / (evaluators * max(end - first_start, 1e-9)),
            "1st verdict s": (first.updated - start) if first else None,
            "build s": sum(r.timings.get("build", 0.0) for r in records),
            "at once": sum(r.timings.get("build", 0.0) for r in records) / seconds,
            "most in flight": most(log, r"in flight (\d+)"), "most building": most(log, r"\((\d+) building"),
            "stopped": stopped}


def most(log: Path | None, pattern: str) -> int | None:
    """The largest number the progress lines of `log` show in `pattern`'s group, or None."""
    if log is None or not log.exists():
        return None
    seen = [int(n) for n in re.findall(pattern, log.read_text(errors="replace"))]
    return max(seen) if seen else None


def row(m: dict) -> list:
    def pct(x: float) -> str:
        return f"{100 * x:.0f}%"
    return [m["task"], m["cand"], f"{m['search s']:.0f}", f"{m['per min']:.1f}", pct(m["busy"]), pct(m["cmp"]),
            pct(m["busy after 1st"]), "-" if m["1st verdict s"] is None else f"{m['1st verdict s']:.0f}",
            f"{m['build s']:.0f}", f"{m['at once']:.1f}", *("-" if m[k] is None else m[k] for k in
                                                            ("most in flight", "most building")),
            m["stopped"][:40]]


def search(task: str, args, out: Path, work: Path) -> tuple[Path, Path]:
    """Runs one search in `work` (interrupted in its final judgement, unless --confirm); returns its run dir and log,
    which is in `out` with the run dir's tarball."""
    run_dir, log = work / f"run_{task}", out / f"search_{task}.txt"
    cmd = [sys.executable, "-m", "kevolve", f"task={task}", f"search.wall_time_s={args.seconds}",
           "search.candidates=100000", f"run_dir={run_dir}"]
    cmd += [f"resources.target={args.target}"] if args.target else []
    cmd += list(args.set)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if not args.warm:
        env["KEVOLVE_CACHE"] = str(work / f"cache_{task}")
    with open(log, "w") as f:
        f.write(f"# {' '.join(cmd[1:])}\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
        limit = time.monotonic() + args.seconds + 300          # start-up, the last judgement, the final one
        interrupted = False
        while proc.poll() is None:
            time.sleep(2)
            if time.monotonic() > limit:
                os.killpg(proc.pid, signal.SIGKILL)
                f.write("# killed: past its time limit\n")
                break
            if not args.confirm and not interrupted and confirming(log):
                proc.send_signal(signal.SIGINT)                 # the search ended: skip the best's final judgement
                interrupted = True
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    if run_dir.exists():
        shutil.copy(log, run_dir / log.name)
        with tarfile.open(out / f"run_{task}.tgz", "w:gz") as tar:
            tar.add(run_dir, arcname=run_dir.name)
    return run_dir, log


def confirming(log: Path) -> bool:
    """The search's progress line says the best's final judgement began, and its summary is not out yet."""
    text = log.read_text(errors="replace")
    return "confirming the best" in text and "\nrun dir: " not in text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kevolve.tasks search-throughput", description=__doc__.split("\n")[0])
    ap.add_argument("tasks", nargs="*")
    ap.add_argument("--target", default=None, help="cpu | cuda (default: the search's own default)")
    ap.add_argument("--seconds", type=float, default=95.0, help="search.wall_time_s of each search")
    ap.add_argument("--out", type=Path, default=None, help="where the logs, the run dirs' tarballs and the table go")
    ap.add_argument("--set", action="append", default=[], help="a further override, e.g. search.in_flight=4")
    ap.add_argument("--confirm", action="store_true", help="let each search judge its best again at its end")
    ap.add_argument("--warm", action="store_true", help="use the node's build cache (default: a fresh one)")
    ap.add_argument("--runs", type=Path, nargs="*", default=[], help="tabulate these run dirs instead")
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="kevolve-throughput-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kevolve-throughput-runs-"))     # run dirs and caches: not in OUT
    rows = []
    for run_dir in args.runs:
        logs = sorted(run_dir.glob("search*.txt")) + sorted(run_dir.parent.glob(f"{run_dir.name}.log"))
        rows.append(row(measure(run_dir, logs[0] if logs else None)))
    for task in args.tasks:
        t0 = time.monotonic()
        run_dir, log = search(task, args, out, work)
        print(f"{task}: {time.monotonic() - t0:.0f} s in all; log {log}", flush=True)
        try:
            rows.append(row(measure(run_dir, log)))
        except (StoreError, ValueError) as e:
            rows.append([task, f"no measurement: {e}"] + [""] * (len(HEADERS) - 2))
    text = table(rows, HEADERS)
    (out / "throughput.txt").write_text(
        f"# python -m kevolve.tasks search-throughput {' '.join(sys.argv[2:] if argv is None else argv)}\n{text}\n")
    print(text)
    return 0
