"""`python -m kevolve.report RUN_DIR [RUN_DIR ...] [-o OUT]` — the HTML report of one run or a comparison of several.

A RUN_DIR holds `kevolve.db`; a directory that does not (a Hydra multirun's sweep directory, say) stands for
every run below it. Writes OUT/report.html (self-contained) and OUT/*.png; OUT defaults to DIR/report when
one directory is given, else ./kevolve-report. Reads the stores only, read-only: a finished, stopped or running
search can be reported. Prints the report's path. Exit status 0, or 2 when no run directory was found or a
store cannot be read (the message says which).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kevolve.progress import bar
from kevolve.report import data
from kevolve.report.html import render
from kevolve.record.store import StoreError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kevolve.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", help="run directories (holding kevolve.db) or directories above them")
    ap.add_argument("-o", "--out", help="where to write report.html and the PNGs")
    args = ap.parse_args(argv)
    dirs = data.run_dirs(args.dirs)
    if not dirs:
        print(f"error: no kevolve.db in or below {', '.join(args.dirs)}: give the directory of a run "
              "(runs/<task>/<time>) or of a multirun", file=sys.stderr)
        return 2
    try:
        runs = [data.load(d) for d in bar(dirs, "reading stores")]
    except StoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else (Path(args.dirs[0]) / "report" if len(args.dirs) == 1
                                           else Path("kevolve-report"))
    path, pngs = render(runs, out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
