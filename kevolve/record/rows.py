"""One candidate as one flat row: what a tracker logs and a table shows, built from the store's record.

`row(record)` turns a `kevolve.record.store.Record` into a dict of JSON scalars (str, int, float, bool, None):
identity and lineage (id, parents, island, generation, operator, model), status and outcome (correct, compiled,
fitness, speedups, fraction of the memory floor, the first line of the failure), the static rules' verdict and
each LLM verifier's (`verifier/<name>`: pass | fail | none) when the record has them, seconds per stage, cost,
and per timed configuration the kernel's and baselines' median times and the speedup
(`config/<label>/kernel_ms`, …). `per_config(evaluation)` is that last part on its own.

Guaranteed: the same record gives the same row; keys are stable across candidates of a run (configuration
labels come from the task's configuration ids, `/` replaced so W&B does not nest them); no source code.
Not guaranteed: that every key is present in every row (a rejected candidate has no times).
"""
from __future__ import annotations

from typing import Any

from kevolve.judge.results import Evaluation

FAILURE_CHARS = 200


def label(config_id: str) -> str:
    """A configuration id as a key part: `B=4,N=256/random/s0` -> `B=4,N=256:random:s0`."""
    return config_id.replace("/", ":")


def evaluation_of(record: Any) -> Evaluation | None:
    return Evaluation.from_json(record.evaluation) if record.evaluation else None


def per_config(ev: Evaluation) -> dict[str, Any]:
    """Per timed configuration: kernel, eager and compile medians (ms), speedups, fraction of the floor."""
    out: dict[str, Any] = {}
    for m in ev.measurements:
        if m.kernel is None:
            continue
        key = f"config/{label(m.config)}"
        out[f"{key}/kernel_ms"] = m.kernel.median
        for name in ("eager", "compile"):
            stats = getattr(m, name)
            if stats is not None:
                out[f"{key}/{name}_ms"] = stats.median
        out[f"{key}/speedup"] = m.speedup("best")
        if m.floor_fraction is not None:
            out[f"{key}/floor_fraction"] = m.floor_fraction
    return out


def verifier_verdicts(record: Any) -> dict[str, str]:
    """`verifier/<name>` -> pass | fail | none, from the record's LLM screening (absent: no verifier ran)."""
    screening = getattr(record, "screening", None) or {}
    out = {}
    for v in screening.get("verdicts", ()):
        passed = v.get("passed")
        out[f"verifier/{v.get('verifier')}"] = "none" if passed is None else ("pass" if passed else "fail")
    return out


def row(record: Any) -> dict[str, Any]:
    """The flat row of one stored candidate (see the module's docstring)."""
    c = record.candidate
    ev = evaluation_of(record)
    verdict = record.verdict if isinstance(record.verdict, dict) else {}
    build = record.build if isinstance(record.build, dict) else {}
    failure = (record.feedback or "").strip().splitlines()
    out: dict[str, Any] = {
        "id": c.id, "parents": ",".join(c.parents), "island": c.island, "generation": c.generation,
        "operator": c.operator, "model": c.model or "", "status": record.status,
        "correct": bool(record.correct), "compiled": bool(record.compiled), "fitness": record.fitness or 0.0,
        "failure": failure[0][:FAILURE_CHARS] if failure and not record.correct else "",
        "cost_usd": record.cost_usd,
    }
    if verdict:
        out["rules"] = "pass" if verdict.get("ok") else f"fail: {verdict.get('reason', '')}"[:FAILURE_CHARS]
    out.update(verifier_verdicts(record))
    for stage in ("mutate", "verify", "build", "evaluate"):
        seconds = record.timings.get(stage, build.get("seconds") if stage == "build" else None)
        if seconds is not None:
            out[f"{stage}_s"] = seconds
    if ev is not None and ev.correct:
        out.update(speedup_eager=ev.speedup_eager, speedup_compile=ev.speedup_compile,
                   floor_fraction=ev.floor_fraction)
    if ev is not None:
        out.update(per_config(ev))
    return out
