"""`make_provider(config)`: the one place the LLM layer reads the environment and opens clients.

Guarantees: the configuration is validated first; every key a configured model needs is read here, once, and a
missing one stops with `LLMConfigError` naming the variable — before any call, so a run fails at start, not an
hour in; models that share a provider and endpoint share one client and one concurrency limit, and with a `run_dir` that
limit holds over every process that makes this run's provider (kevolve/llm/slots.py: the search's Mutator and
Verifier); in replay mode no key is read and no client is made. Not done here: any network request (clients connect on
first use).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

from kevolve.llm.breaker import Breaker
from kevolve.llm.cache import Cache
from kevolve.llm.config import LLMConfig, base_url_of, provider_of, validate
from kevolve.llm.ensemble import Disabled, Ensemble, Route
from kevolve.llm.errors import LLMConfigError
from kevolve.llm.keys import resolve_key
from kevolve.llm.pricing import Pricer
from kevolve.llm.providers import Endpoint
from kevolve.llm.retry import RetryPolicy
from kevolve.llm.slots import Slots
from kevolve.llm.sampler import Sampler

_CLOUD = "https://www.googleapis.com/auth/cloud-platform"


def make_provider(cfg: LLMConfig, *, run_dir: Union[str, Path, None] = None,
                  env: Optional[Mapping[str, str]] = None, sleep: Callable[[float], None] = time.sleep,
                  vertex_credentials: Any = None) -> Union[Ensemble, Disabled]:
    """The configured models, ready to call. `run_dir` holds the response cache (none without it); `env`
    defaults to os.environ; `vertex_credentials` (google.auth credentials) defaults to Application Default
    Credentials; `sleep` is the back-off's sleep (tests pass one that records)."""
    validate(cfg)
    if cfg.provider == "none":
        return Disabled()
    env = os.environ if env is None else env
    cache = Cache.in_run(run_dir) if cfg.cache and run_dir is not None else None
    replay = Cache.in_run(cfg.replay, readonly=True) if cfg.replay else None
    endpoints: dict[tuple[str, Optional[str]], Optional[Endpoint]] = {}
    routes = {}
    for m in cfg.models:
        where = (provider_of(cfg, m), base_url_of(cfg, m))
        if where not in endpoints:
            endpoints[where] = None if replay else _endpoint(cfg, *where, env=env, sleep=sleep,
                                                             credentials=vertex_credentials, run_dir=run_dir)
        routes[m.name] = Route(provider=where[0], endpoint=endpoints[where], reasoning=m.reasoning)
    return Ensemble(routes, Sampler.from_config(cfg), max_output_tokens=cfg.max_output_tokens,
                    thinking_budget=cfg.thinking_budget, cache=cache, replay=replay)


def _endpoint(cfg: LLMConfig, provider: str, base_url: Optional[str], *, env: Mapping[str, str],
              sleep: Callable[[float], None], credentials: Any, run_dir: Union[str, Path, None]) -> Endpoint:
    if provider == "gemini":
        from kevolve.llm.gemini_api import GeminiAdapter
        if cfg.vertex.enabled:
            adapter = GeminiAdapter(None, base_url=base_url, timeout_s=cfg.timeout_s,
                                    vertex=_vertex(cfg, env, credentials))
        else:
            adapter = GeminiAdapter(resolve_key("gemini", env), base_url=base_url, timeout_s=cfg.timeout_s)
    else:
        from kevolve.llm.openai_api import OpenAIAdapter
        adapter = OpenAIAdapter(provider, resolve_key(provider, env), base_url=base_url, timeout_s=cfg.timeout_s,
                                env=env)
    policy = RetryPolicy(cfg.max_retries, cfg.backoff_s, cfg.backoff_max_s)
    shared = f"{Path(run_dir).resolve()}|{provider}|{base_url or ''}" if run_dir is not None else None
    return Endpoint(adapter, concurrency=cfg.concurrency, policy=policy, pricer=Pricer(cfg.prices), sleep=sleep,
                    slots=Slots(cfg.concurrency, shared), breaker=Breaker(cfg.down_after, cfg.probe_s),
                    call_timeout_s=cfg.call_timeout_s)


def _vertex(cfg: LLMConfig, env: Mapping[str, str], credentials: Any) -> tuple[str, str, Any]:
    """(project, location, credentials) for Vertex AI, or LLMConfigError saying what to set."""
    project = cfg.vertex.project or env.get("GOOGLE_CLOUD_PROJECT")
    if credentials is None:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
        try:
            credentials, adc_project = google.auth.default(scopes=[_CLOUD])
        except DefaultCredentialsError:
            raise LLMConfigError("llm.vertex.enabled=true needs Application Default Credentials: run `gcloud auth "
                                 "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS to a service "
                                 "account file (or use llm.vertex.enabled=false with GEMINI_API_KEY)") from None
        project = project or adc_project
    if not project:
        raise LLMConfigError("llm.vertex.enabled=true needs a project: set llm.vertex.project or the environment "
                             "variable GOOGLE_CLOUD_PROJECT")
    return project, cfg.vertex.location, credentials
