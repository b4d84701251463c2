"""The values a run will use where its configuration says null (auto): `python -m kevolve … --resolved`, the store's
`plan` event (`values` under "resolved") and the report's resolved configuration.

`values(plan)` gives, by dotted field, what the plan resolved (kevolve/search/plan.py): the target and shape set,
the evaluators, builders and candidates in flight, the LLM calls in flight, the operator weights and verifiers the
LLM chosen turns on, the baselines' refresh, the seeds. `fill(config, values)` is the configuration with them in
place (the seeds are said, not set: `search.seeds` takes all|listed|best|files). `text(cfg)` resolves on this machine (as the dry run does: its CPUs and GPUs, or one GPU for target=cuda) and
prints the configuration as YAML with what was resolved said first. Pure but for `text` (which loads the task).
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


def text(cfg) -> str:
    import yaml
    from dataclasses import replace
    from omegaconf import OmegaConf
    from kevolve.search.dry_run import device, local_cluster
    from kevolve.search.plan import resolve
    from kevolve.task.load import load_task
    cluster = local_cluster(cfg)
    plan = resolve(cfg, load_task(cfg.task.name), cluster)
    plan = replace(plan, device=device(plan.target))
    given = OmegaConf.to_container(OmegaConf.structured(cfg))
    found = values(plan)
    said = [f"{k}: {v}" for k, v in found.items() if v is not None and k != "search.seeds"
            and (_get(given, k) is None or k == "search.population.operators")]
    said.append(f"seeds (search.seeds={cfg.search.seeds}): {', '.join(found['search.seeds']) or 'none'}")
    head = [f"# resolved on this machine ({int(cluster['CPU'])} CPUs, {int(cluster['GPU'])} GPUs; {plan.device}); "
            "a cluster resolves its own" if cfg.resources.address is None else
            "# resolved as if on this machine: the cluster at resources.address resolves its own evaluators",
            "# null in the configuration, resolved here:", *[f"#   {line}" for line in said]]
    return "\n".join(head) + "\n" + yaml.safe_dump(fill(given, found), sort_keys=False, width=110)


def _get(d: dict, key: str):
    for part in key.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(part)
    return d
