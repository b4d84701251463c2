"""Secrets kept out of what leaves the run's store for people and services (W&B fields, the HTML report).

`redact(value)` replaces the value of every key that names a secret by "***", at any depth; `redact_arg` does so
for a command-line override `key=value`: what the store writes into `run` and `events`.
`scrub(value)` is `redact` (every key that names a secret — api_key, token, password… — at any depth
becomes "***") and more: any string holding the value of an environment variable whose name names a secret
(OPENAI_API_KEY, GEMINI_API_KEY, WANDB_API_KEY, …; values of 8 characters or more) has that value replaced by
"***", whatever field it sits in (a key pasted into a URL, say).

Guaranteed: the result is a new object; keys are kept; non-string scalars pass unchanged.
Not guaranteed: that a secret the process never saw in its environment, under a key not named for one, is found.
"""
from __future__ import annotations

import os
import re
from typing import Any, Mapping

_SECRET_ENV = re.compile(r"api[_-]?key|passw(or)?d|secret|credential|private[_-]?key|token", re.I)
MIN_SECRET = 8
_SECRET_KEY = re.compile(r"api[_-]?key|passw(or)?d|secret|credential|private[_-]?key|token$", re.I)


def redact(value: Any) -> Any:
    """A copy of JSON-like data with the value of every key that names a secret replaced by "***"."""
    if isinstance(value, Mapping):
        return {k: "***" if _SECRET_KEY.search(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


def redact_arg(arg: str) -> str:
    """A command-line override `key=value` with the value replaced by "***" when the key names a secret."""
    key, sep, _ = str(arg).partition("=")
    return f"{key}=***" if sep and _SECRET_KEY.search(key.rsplit(".", 1)[-1].lstrip("+~")) else str(arg)


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """The values of the secret-named environment variables, longest first."""
    env = os.environ if env is None else env
    return sorted({v for k, v in env.items() if _SECRET_ENV.search(k) and len(v) >= MIN_SECRET}, key=len, reverse=True)


def scrub_text(text: str, secrets: list[str] | None = None) -> str:
    for s in secret_values() if secrets is None else secrets:
        text = text.replace(s, "***")
    return text


def scrub(value: Any, secrets: list[str] | None = None) -> Any:
    """A copy of JSON-like `value` with secrets replaced by "***" (see the module's docstring)."""
    secrets = secret_values() if secrets is None else secrets

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return scrub_text(v, secrets)
        if isinstance(v, Mapping):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        return v
    return walk(redact(value))
