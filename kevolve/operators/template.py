"""Prompt templates: Markdown files under `kevolve/operators/prompts/`, with `{{name}}` placeholders.

Guarantees: `render(name, **values)` reads `prompts/<name>.md` and substitutes every `{{key}}` with the text of
`values[key]`; a placeholder without a value, or a value no placeholder uses, raises `KeyError` naming it (a
template and its caller cannot drift apart silently). Substitution is one pass: text inside a value (a kernel
that happens to contain `{{x}}`) is never expanded. Nothing else is special: no loops, no conditionals — the
callers compose sections. Not guaranteed: that the rendered text fits a model's context window.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

PROMPTS = Path(__file__).with_name("prompts")
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_]\w*)\s*\}\}")


@lru_cache(maxsize=None)
def load(name: str) -> str:
    path = PROMPTS / f"{name}.md"
    if not path.exists():
        raise KeyError(f"no prompt template {path}")
    return path.read_text()


def placeholders(name: str) -> set[str]:
    return set(_PLACEHOLDER.findall(load(name)))


def render(template: str, /, **values: object) -> str:
    """The template with its placeholders filled; trailing blank lines trimmed to one newline."""
    wanted = placeholders(template)
    missing, unused = wanted - set(values), set(values) - wanted
    if missing or unused:
        raise KeyError(f"template {template}.md: missing values {sorted(missing)}, unused values {sorted(unused)}")
    text = _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), load(template))
    return text.rstrip() + "\n"
