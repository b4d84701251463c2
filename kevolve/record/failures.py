"""Why candidates failed, read the same way everywhere: the console's count of rejection reasons and each seed's
rejection (kevolve/search/finish.py), the HTML report's failures table (kevolve/report/failures.py) and W&B's
(`failures` table, kevolve/tracking/wandb_tracker.py).

`rejection(status, feedback, stage)` reads one verdict — the store's `status`, the feedback it stored (the failure's
text) and, for a judged candidate, its `Evaluation.stage` — as a `Rejection`: the stage that stopped it, the reason
in a few words (the same for failures alike, so they can be counted: "outputs not written", "compile error",
"static rule: threads"), the configuration it failed on (where the judge names one), and the text itself.
`rows(records)` is one row per failed candidate of a run's records, oldest first.

Guarantees: pure (no store is opened: records are passed in); every failure gets a reason (the first words of its
text when no class fits); a correct candidate is no failure. Not guaranteed: that the classes are exhaustive — the
text (`detail`) is always beside them.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable

DETAIL_CHARS = 400

# a configuration id as the judge writes it at the head of a failure: "B=8,N=4096,eps=1e-06/random/s0: ..."
_CONFIG = re.compile(r"^((?:[A-Za-z_]\w*=[^,/\s:]+,?)+(?:/[^/\s:]+)*):\s")
_CLASSES: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(p, re.I), r) for p, r in (
    (r"^static rule: line \d+: ([\w-]+):", "static rule: {0}"),
    (r"^static rule:", "static rule"),
    (r"^rejected by LLM verifiers", "LLM verifiers"),
    (r"elements NaN — not written", "outputs not written"),
    (r"elements Inf where", "Inf outputs"),
    (r"outside tolerance|wrong values", "wrong values"),
    (r"modified by the kernel", "input modified"),
    (r"wrote outside", "wrote out of bounds"),
    (r"the kernel returned -?\d+", "non-zero return"),
    (r"\b(timeout|timed out|hung|hang)\b", "timeout"),
    (r"\bcrash\b|segmentation|SIG[A-Z]+", "crash"),
    (r"^harness:", "harness failure"),
    (r"^load error", "load error"),
    (r"impossible|canary|outside clock|faster than", "timing check"),
    (r"forbidden|not allowed|refused", "forbidden action"),
    (r"^(mutate|verify|build|evaluate|compare) failed:", "lost at {0}"),
    (r"^compile error|\berror\b", "compile error"),
))


@dataclass(frozen=True)
class Rejection:
    stage: str               # static rules | LLM verifiers | build | lost | the judge's stage (load, correctness, …)
    reason: str              # a few words, the same for failures alike
    configuration: str       # the configuration it failed on, "" where none is named
    detail: str              # the failure's text (its first DETAIL_CHARS characters)


def reason_of(text: str, stage: str = "") -> str:
    """The class of a failure's text (see `_CLASSES`); a build's failure is a compile error unless it says more."""
    body = _CONFIG.sub("", text or "", count=1)
    for pattern, name in _CLASSES:
        m = pattern.search(body)
        if m:
            return name.format(*(g.lower() for g in m.groups())) if m.groups() else name
    if stage == "build":
        return "compile error"
    head = re.split(r"[:(]", body.strip(), maxsplit=1)[0].strip()
    return head[:40] or "no reason given"


def rejection(status: str, feedback: str | None, stage: str | None = None) -> Rejection:
    """One failed verdict read (see the module's docstring). `stage`: the Evaluation's, for a judged candidate."""
    text = (feedback or "").strip()
    if status == "build_failed":
        where = "build"
    elif status == "failed":
        where = "lost"
    elif status == "rejected":
        where = "LLM verifiers" if text.startswith("rejected by LLM verifiers") else "static rules"
    else:
        where = stage or "evaluate"
    m = _CONFIG.match(text)
    return Rejection(where, reason_of(text, where), m.group(1) if m else "", text[:DETAIL_CHARS])


def stage_of(evaluation: str | None) -> str | None:
    """The judge's stage in a stored Evaluation's JSON (without decoding its measurements)."""
    if not evaluation:
        return None
    m = re.search(r'"stage":\s*"([^"]*)"', evaluation)
    return m.group(1) if m else None


def failed(record) -> bool:
    """A finished candidate that is not correct (`kevolve.record.read.Record`)."""
    return record.status in ("rejected", "build_failed", "failed") or (record.status == "evaluated"
                                                                       and not record.correct)


def rows(records: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per failed candidate: candidate, operator, model, parent, stage, reason, configuration, detail."""
    out = []
    for r in records:
        if not failed(r):
            continue
        c = r.candidate
        label = c.meta_dict().get("file") if c.operator == "seed" else None
        out.append({"candidate": c.id, "operator": c.operator + (f" ({label})" if label else ""),
                    "model": c.model or "", "parent": c.parents[0] if c.parents else "",
                    **asdict(rejection(r.status, r.feedback, stage_of(r.evaluation)))})
    return out


def counts(rows_: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Failed candidates per reason, most first."""
    tally: dict[str, int] = {}
    for row in rows_:
        tally[row["reason"]] = tally.get(row["reason"], 0) + 1
    return dict(sorted(tally.items(), key=lambda kv: (-kv[1], kv[0])))
