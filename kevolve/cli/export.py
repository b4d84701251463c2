"""`python -m kevolve.export SOURCE -o DIR [--backward SOURCE2] [--name NAME] [--target cpu|cuda]` — a run's assembled
op as a small installable torch package (kevolve/export/).

SOURCE is a finished run's directory (its summary's run_dir) or a task's best/ folder (or the task folder) holding
an op promoted by `python -m kevolve.tasks best RUN_DIR`. `--backward SOURCE2` adds the backward task's op (a run or
best/ of e.g. layernorm_bwd beside layernorm_fwd) and pairs the two for autograd. DIR must not exist or be empty;
it receives pyproject.toml, README.md (what was proven, where, with which numbers) and the package.
Exit status: 0 written (its path printed); 1 nothing to export or a bad request — a run with no correct kernel or
op, a backward that is missing or does not pair, a non-empty DIR — with the message saying what to do, and nothing
written; 2 bad usage.
"""
from __future__ import annotations

import argparse
import sys

from kevolve.export import bundle, package
from kevolve.export.bundle import ExportError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kevolve.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="a finished run's directory, or a task's best/ folder")
    ap.add_argument("-o", "--out", required=True, help="the package's folder (new, or empty)")
    ap.add_argument("--backward", help="a run or best/ folder of the backward task: paired for autograd")
    ap.add_argument("--name", help="the Python package's name (default: kevolve_<task family>)")
    ap.add_argument("--target", choices=("cpu", "cuda"), help="which op of a best/ folder holding several")
    args = ap.parse_args(argv)
    try:
        forward = bundle.read(args.source, args.target)
        bundles, pair = [forward], None
        if args.backward is not None:
            try:
                backward = bundle.read(args.backward, args.target or forward.target)
            except ExportError as e:
                raise ExportError(f"--backward: {e}") from None
            pair = package.pairing(forward, backward)
            bundles.append(backward)
        out = package.write(args.out, bundles, pair, args.name)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
