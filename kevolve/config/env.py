"""The KEVOLVE_* environment: every variable kevolve reads, read here and only here, when asked (never on import).

These are per-node overrides (a node of a cluster may set its own) and knobs for tests and measurements; the run's
configuration is the typed schema (`kevolve.config.schema`). Each function reads the environment when called, so
a variable set later (a test's monkeypatch, a worker's own environment) is seen.

- KEVOLVE_CACHE:              the build cache's root on this node (over `resources.cache_dir`);
- KEVOLVE_CACHE_MAX_GB:       what the build cache may hold (8);
- KEVOLVE_MAX_LIBRARY_MB:     the largest library a build may make (32);
- KEVOLVE_CUDA_ARCH:          the nvcc architecture (over `resources.cuda_arch` and the GPU's own);
- KEVOLVE_EXCHANGE:           `files` forces outputs through files (over `resources.exchange`);
- KEVOLVE_LLC_BYTES:          the last-level cache's size the `llc` CPU flush assumes (else sysfs);
- KEVOLVE_TRACE:              any value: each judging phase prints a line to stderr as it ends;
- KEVOLVE_GPU_LOCKS:          the folder of the per-GPU lock files (else <tmp>/kevolve-gpu-locks);
- KEVOLVE_BASELINE_CACHE:     0 | false | no | off turns the shared torch.compile cache of baselines off;
- KEVOLVE_BASELINE_CACHE_GB:  what that cache may hold before it is dropped (2);
- KEVOLVE_DOMAIN_SALT:        an integer: fixes the configurations a judgement draws from the domain (to reproduce
                              a verdict; `kevolve.judge.evaluator.drawn`).
KEVOLVE_PIDNS and KEVOLVE_PIDNS_PARENT are no settings: the evaluator and the worker's relay speak through them
(`kevolve.judge.worker.pidns`, which imports nothing of kevolve before the namespace is made).
"""
from __future__ import annotations

import os
from typing import Mapping


def _get(name: str, env: Mapping[str, str] | None = None) -> str | None:
    return (os.environ if env is None else env).get(name) or None


def cache_dir() -> str | None:
    return _get("KEVOLVE_CACHE")


def cache_max_bytes() -> int:
    return int(float(_get("KEVOLVE_CACHE_MAX_GB") or 8) * (1 << 30))


def max_library_bytes() -> int:
    return int(float(_get("KEVOLVE_MAX_LIBRARY_MB") or 32) * (1 << 20))


def cuda_arch() -> str | None:
    return _get("KEVOLVE_CUDA_ARCH")


def exchange() -> str | None:
    return _get("KEVOLVE_EXCHANGE")


def llc_bytes() -> int | None:
    value = _get("KEVOLVE_LLC_BYTES")
    return int(value) if value else None


def trace() -> bool:
    return bool(_get("KEVOLVE_TRACE"))


def gpu_locks() -> str | None:
    return _get("KEVOLVE_GPU_LOCKS")


def baseline_cache_on() -> bool:
    return (os.environ.get("KEVOLVE_BASELINE_CACHE", "1")) not in ("0", "false", "no", "off")


def baseline_cache_bytes() -> float:
    return float(_get("KEVOLVE_BASELINE_CACHE_GB") or 2) * (1 << 30)


def domain_salt() -> int | None:
    value = _get("KEVOLVE_DOMAIN_SALT")
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"KEVOLVE_DOMAIN_SALT={value!r}: give an integer, or unset it") from None
