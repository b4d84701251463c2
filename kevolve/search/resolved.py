"""The values a run will use where its configuration says null (auto): `python -m kevolve … --resolved`, the store's
`plan` event (`values` under "resolved") and the report's resolved configuration.

`values(plan)` gives, by dotted field, what the plan resolved (kevolve/search/plan.py): the target and shape set,
the evaluators, builders and candidates in flight, the LLM calls in flight, the operator weights and verifiers the
LLM chosen turns on, the baselines' refresh, the seeds. `fill(config, values)` is the configuration with them in
place (the seeds are said, not set: `search.seeds` takes all|listed|best|files). Pure; `--resolved` itself is
kevolve/search/dry_run.py's `resolved`.
"""
from __future__ import annotations

import copy
from typing import Any


def values(plan) -> dict[str, Any]:
    return {"task.shapes": plan.shapes, "resources.target": plan.target, "resources.evaluators": plan.evaluators,
            "resources.builders": plan.builders,
            "search.in_flight": (f"{plan.in_flight} at the start, following the LLM calls' and the builds' pace"
                                 if plan.in_flight_follows_llm else plan.in_flight),
            "search.llm_calls": (f"{plan.llm_calls} at the start, adapted within {plan.llm_calls_min}.."
                                 f"{plan.llm_calls_max}" if plan.llm_calls_min < plan.llm_calls_max
                                 else plan.llm_calls or None),
            "search.population.operators": {k: float(v) for k, v in plan.population.operators.items()},
            "search.verifiers.checks": list(plan.verifiers.checks or []),
            "search.baseline_refresh_s": plan.baseline_refresh_s,
            "resources.reference_cache_gb": (round(plan.reference_bytes / (1 << 30), 3)
                                             if plan.reference_bytes is not None else "a quarter of the GPU's memory"),
            "resources.cuda_arch": plan.arch if plan.target == "cuda" else None,
            "search.seeds": [label for label, _ in plan.seeds]}


def fill(config: dict, resolved: dict[str, Any]) -> dict:
    """`config` (nested) with each dotted field of `resolved` set, where the configuration left it null (auto) or
    where the resolved value is the whole story (operator weights, seeds)."""
    out = copy.deepcopy(config)
    for key, value in resolved.items():
        node, *path, last = [out, *key.split(".")]
        for part in path:
            node = node.setdefault(part, {})
        if key != "search.seeds" and value is not None and (node.get(last) is None or isinstance(node.get(last), dict)):
            node[last] = value
    return out
