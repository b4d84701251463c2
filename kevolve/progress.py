"""Progress bars for steps that take more than a few seconds: a judgement's checks and timing (`python -m
kevolve.evaluate`; in a search the evaluators' output is no terminal, so they show none), rendering a report,
W&B's end-of-run tables.

`bar(iterable, desc)` is a tqdm bar on stderr when both stdout and stderr are terminals, and the bare iterable
otherwise: logs, pipes and CI stay clean. The search's own live line is the driver's (`Driver._progress`).
"""
from __future__ import annotations

import sys
from typing import Iterable, TypeVar

T = TypeVar("T")


def interactive() -> bool:
    return sys.stdout.isatty() and sys.stderr.isatty()


def bar(iterable: Iterable[T], desc: str, total: int | None = None) -> Iterable[T]:
    if not interactive():
        return iterable
    from tqdm import tqdm
    return tqdm(iterable, desc=desc, total=total, file=sys.stderr, leave=False, dynamic_ncols=True)
