"""`search.dry_run=true`: what a search would send and spend, with nothing called.

`dry_run(cfg)` resolves the plan as a run would (kevolve.search.plan, on this machine's CPUs and GPUs instead of a
Ray cluster's; `resources.target=cuda` counts as one GPU where this machine has none, so a GPU run can be priced
from a laptop), composes the first prompts (kevolve.search.estimate) and returns the text the user reads — the
operators and verifiers on, each first prompt's characters and tokens, the expected cost per call, per
candidate and per run at the configured prices — and, as a last line, the same as one JSON object.

Guarantees: no LLM client is made and no request is sent (nothing reaches the network); Ray is not started;
nothing is built and no store is written. Whether the provider's key is set is said (never its value): a real
run without it stops at start. Not guaranteed: what the real replies cost (see kevolve.search.estimate).
"""
from __future__ import annotations

import json
import os
from dataclasses import replace

from kevolve.config import Config
from kevolve.llm.keys import KEY_VARS
from kevolve.llm.config import provider_of
from kevolve.search.banner import lines, record
from kevolve.search.estimate import estimate
from kevolve.search.plan import resolve
from kevolve.task.load import load_task


def local_cluster(cfg: Config) -> dict[str, float]:
    """This machine's CPUs and GPUs, as `ray.cluster_resources()` would report them for a local Ray."""
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cfg.resources.target == "cuda":
        gpus = max(gpus, 1)
    return {"CPU": float(cfg.resources.num_cpus or os.cpu_count() or 1), "GPU": float(gpus)}


def device(target: str) -> str:
    import torch
    if target == "cuda":
        return torch.cuda.get_device_name() if torch.cuda.is_available() else "a CUDA GPU"
    from kevolve.search.actors import cpu_name
    return cpu_name()


def keys(cfg: Config) -> str:
    """Whether each key the configured models need is set in this environment (names only, never values)."""
    llm = cfg.llm
    if llm.replay:
        return f"no key needed: replies replayed from {llm.replay}"
    said = []
    for provider in dict.fromkeys(provider_of(llm, m) for m in llm.models):
        if provider == "gemini" and llm.vertex.enabled:
            said.append("gemini through Vertex AI: Application Default Credentials")
            continue
        names = KEY_VARS[provider]
        found = next((n for n in names if (os.environ.get(n) or "").strip()), None)
        if found:
            said.append(f"{found} is set")
        elif provider == "local":
            said.append("local server: no key needed")
        else:
            said.append(f"{' or '.join(names)} is NOT set: a real run stops at start until it is")
    return "; ".join(said)


def dry_run(cfg: Config) -> str:
    task = load_task(cfg.task.name)
    plan = resolve(cfg, task, local_cluster(cfg))
    plan = replace(plan, device=device(plan.target))
    est = estimate(plan, task)
    head = ["dry run: nothing is called (no LLM request, no Ray, no build) and no store is written",
            f"task {task.name}, target {plan.target} ({plan.device}), shapes {plan.shapes}, "
            f"{len(plan.seeds)} seed(s): {', '.join(label for label, _ in plan.seeds) or 'none'}"]
    if plan.llm is not None:
        head.append(f"key: {keys(cfg)}")
    data = {"dry_run": True, "task": task.name, "target": plan.target, **record(plan, est),
            "worst_call_usd": round(est.worst_call_usd, 6), "unpriced": list(est.unpriced)}
    return "\n".join(head + lines(plan, est, prompts=True) + [json.dumps(data)])


def resolved(cfg) -> str:
    """`python -m kevolve … --resolved`: the configuration as YAML with the values a run would use where it says null,
    resolved on this machine as the dry run resolves (kevolve/search/resolved.py), what was resolved said first."""
    import yaml
    from omegaconf import OmegaConf
    from kevolve.search.resolved import fill, values
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
