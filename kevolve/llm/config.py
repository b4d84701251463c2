"""`LLMConfig`: the schema of the `llm` config group (conf/llm/*.yaml), with `validate()`.

Hydra composes the YAML, OmegaConf checks it against these dataclasses (types, unknown keys), and `validate`
checks ranges and choices, raising `LLMConfigError` (a ValueError) that names the field: "config field
'llm.models': ...". Nothing here reads the environment or the network; keys are read by `make_provider`.

An ensemble is a list of models, each drawn with probability proportional to its weight; each model may name
its own provider and endpoint, so one run can mix OpenAI, Gemini and a local server. Per call, a temperature and
a reasoning effort are drawn from their lists (see kevolve/llm/sampler.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from kevolve.llm.errors import LLMConfigError

PROVIDERS = ("none", "openai", "gemini", "local")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
CACHE_FILE = "llm_cache.sqlite"          # in the run directory; `replay` reads it from another run's


@dataclass
class ModelSpec:
    name: str = ""                       # the model id the service knows: gpt-5, gemini-2.5-pro, Qwen/Qwen3-…
    weight: float = 1.0                  # drawn with probability weight / sum of weights
    provider: Optional[str] = None       # openai | gemini | local; None: llm.provider
    base_url: Optional[str] = None       # None: llm.base_url
    reasoning: Optional[bool] = None     # takes reasoning_effort and no temperature; None: from the name
                                         # (OpenAI o1/o3/o4…, gpt-5… but not *-chat*; Gemini 3: thinking_level)


@dataclass
class Price:
    input: float = 0.0                   # USD per million input tokens
    output: float = 0.0                  # USD per million output tokens (thinking tokens included)
    above_tokens: Optional[int] = None   # long-context tier: prompts over this many tokens pay the rates below
    input_above: Optional[float] = None
    output_above: Optional[float] = None


@dataclass
class VertexConfig:
    enabled: bool = False                # Gemini through Vertex AI (Application Default Credentials), not an API key
    project: Optional[str] = None        # None: GOOGLE_CLOUD_PROJECT
    location: str = "global"             # a region (us-central1, …) or global


@dataclass
class LLMConfig:
    provider: str = "none"               # none | openai | gemini | local (an OpenAI-compatible server)
    models: list[ModelSpec] = field(default_factory=list)   # the ensemble: [{name: gpt-5, weight: 1}, …], each
                                         # {name, weight, provider, base_url, reasoning} (ModelSpec)
    temperatures: list[float] = field(default_factory=lambda: [1.0])            # one drawn per call
    reasoning_efforts: list[Optional[str]] = field(default_factory=lambda: [None])  # one drawn per call, for
                                         # reasoning models; null: send none (the service's default)
    thinking_budget: Optional[int] = None  # Gemini 2.5 thinking tokens (-1: dynamic, 0: off); None: default
    max_output_tokens: int = 32768       # per reply, thinking / reasoning tokens included
    timeout_s: float = 600.0             # per HTTP request; a request past it is retried
    call_timeout_s: float = 1800.0       # per call: no request or retry starts after this (back-off and waits
                                         # for a slot included); a call ends within it + one request's timeout_s
    max_retries: int = 6                 # after the first request, on 429, 5xx, timeouts, connection errors
    down_after: int = 8                  # failed requests in a row after which an endpoint is down: its calls
                                         # fail at once (the search goes on with knob mutation) …
    probe_s: float = 60.0                # … but for one probe request this often; a reply brings it back
    backoff_s: float = 2.0               # first back-off; doubles per retry, with jitter, capped below
    backoff_max_s: float = 60.0          # (a Retry-After from the service is honoured over this)
    concurrency: int = 16                # requests in flight per provider endpoint
    base_url: Optional[str] = None       # openai / local endpoint, e.g. http://localhost:8000/v1 (openai: None
                                         # means OPENAI_BASE_URL, else api.openai.com); gemini: an API root
    vertex: VertexConfig = field(default_factory=VertexConfig)
    replay: Optional[str] = None         # a run directory: answer only from its response cache, no network
    cache: bool = True                   # keep every reply in RUN_DIR/llm_cache.sqlite (what replay reads)
    prices: dict[str, Price] = field(default_factory=dict)  # USD per million tokens, over kevolve/llm/prices.yaml


def provider_of(cfg: LLMConfig, model: ModelSpec) -> str:
    return model.provider or cfg.provider


def base_url_of(cfg: LLMConfig, model: ModelSpec) -> Optional[str]:
    return model.base_url or cfg.base_url


def validate(cfg: LLMConfig) -> None:
    """Raises LLMConfigError naming the first bad field; returns None when the configuration can work."""
    def need(ok: bool, key: str, got: Any, accepts: str) -> None:
        if not ok:
            raise LLMConfigError(f"config field 'llm.{key}': got {got!r}; expected {accepts}")

    need(cfg.provider in PROVIDERS, "provider", cfg.provider, " | ".join(PROVIDERS))
    for key in ("max_output_tokens", "concurrency", "down_after"):
        need(getattr(cfg, key) >= 1, key, getattr(cfg, key), "an integer >= 1")
    for key in ("timeout_s", "call_timeout_s", "backoff_s", "backoff_max_s", "probe_s"):
        value = getattr(cfg, key)
        need(value > 0 and math.isfinite(value), key, value, "a number of seconds > 0")
    need(cfg.max_retries >= 0, "max_retries", cfg.max_retries, "an integer >= 0")
    need(cfg.thinking_budget is None or cfg.thinking_budget >= -1, "thinking_budget", cfg.thinking_budget,
         "null, -1 (dynamic), 0 (off) or a number of tokens")
    need(bool(cfg.temperatures) and all(0 <= t <= 2 for t in cfg.temperatures), "temperatures",
         list(cfg.temperatures), "a non-empty list of numbers in [0, 2]")
    need(bool(cfg.reasoning_efforts) and all(e is None or e in EFFORTS for e in cfg.reasoning_efforts),
         "reasoning_efforts", list(cfg.reasoning_efforts), f"a non-empty list of null or {' | '.join(EFFORTS)}")
    for name, p in cfg.prices.items():
        rates = [p.input, p.output, p.input_above, p.output_above]
        need(all(r is None or r >= 0 for r in rates), f"prices.{name}", p, "USD per million tokens >= 0")
    if cfg.provider == "none":
        return
    _validate_models(cfg, need)
    if cfg.replay is not None:
        need((Path(cfg.replay) / CACHE_FILE).is_file(), "replay", cfg.replay,
             f"a run directory holding {CACHE_FILE} (a run made with llm.cache=true)")


def _validate_models(cfg: LLMConfig, need) -> None:
    models = cfg.models
    need(bool(models), "models", [], "at least one model, e.g. [{name: gpt-5, weight: 1}]")
    names = [m.name for m in models]
    need(all(names), "models", names, "every model with a name")
    need(len(set(names)) == len(names), "models", names, "distinct model names")
    weights = [m.weight for m in models]
    need(all(w >= 0 and math.isfinite(w) for w in weights) and sum(weights) > 0, "models", weights,
         "weights >= 0, not all zero")
    for m in models:
        need(provider_of(cfg, m) in PROVIDERS[1:], f"models.{m.name}.provider", m.provider,
             "openai | gemini | local (or llm.provider set to one of them)")
        need(provider_of(cfg, m) != "local" or bool(base_url_of(cfg, m)), f"models.{m.name}.base_url", None,
             "the server's URL for a local model, e.g. http://localhost:8000/v1 (llm.base_url or per model)")
    if any(provider_of(cfg, m) == "gemini" for m in models) and cfg.vertex.enabled:
        need(bool(cfg.vertex.location), "vertex.location", cfg.vertex.location, "a region or global")
