"""Suspected judge bugs: red-team kernels the judge accepted, saved so that each can become a regression test.

`save(run_dir, candidate, evaluation, suffix)` writes `<run_dir>/suspected_judge_bugs/<id><suffix>` (the source)
and `<id>.json` (the candidate's lineage and meta, and the full evaluation it got) and says so on stderr.
A suspect is never a best kernel: the population does not rank red-team candidates and `Store.best` skips them.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from kevolve.judge.results import Evaluation
from kevolve.messages import Candidate

FOLDER = "suspected_judge_bugs"


def save(run_dir: Path, c: Candidate, ev: Evaluation, suffix: str) -> Path:
    folder = Path(run_dir) / FOLDER
    folder.mkdir(exist_ok=True)
    (folder / f"{c.id}{suffix}").write_text(c.source)
    record = {"candidate": {k: v for k, v in c.to_dict().items() if k != "source"},
              "evaluation": json.loads(ev.to_json())}
    (folder / f"{c.id}.json").write_text(json.dumps(record, indent=1))
    print(f"\nwarning: red-team candidate {c.id} was accepted by the judge: a suspected judge bug, saved in {folder}",
          file=sys.stderr)
    return folder
