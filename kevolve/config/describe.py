"""What each configuration field means, read from the schema's own source: `python -m kevolve --help [PREFIX]`.

`fields()` walks the typed schema (`Config`, kevolve/config/schema.py; `LLMConfig`, kevolve/llm/config.py) and gives
every field as (dotted name, default, meaning). The meaning is the comment on the field's line in the schema, with
the comment lines that continue it, or, for the classes that document their fields in their docstring
(`PopulationConfig`, `VerifiersConfig`, `LoggerConfig`), the docstring's `name: text` entry. `text(prefix)` is the
help: usage, the config groups and their options, and the fields under `prefix`.

Guarantees: reads source files and conf/ only (no Hydra, no environment); a field without a comment still appears
(with its default), so the list is complete; every field the schema has is listed once.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
from typing import Any, Iterator


def _comments(cls) -> dict[str, str]:
    """Field name -> its comment in the class's source (the line's own, then the comment-only lines under it)."""
    lines, _ = inspect.getsourcelines(cls)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    body = getattr(tree.body[0], "body", [])
    out: dict[str, str] = {}
    doc = inspect.getdoc(cls) or ""
    for m in re.finditer(r"^(\w+):\s+(.*(?:\n(?!\w+:\s).*)*)", doc, re.M):
        out[m.group(1)] = " ".join(m.group(2).split())
    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())

    for node in body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        k = node.lineno - 1
        own = indent(lines[k])
        text = lines[k].split("#", 1)[1].strip() if "#" in lines[k] else ""
        if not text:                              # a comment block right above it, at its indentation
            j, above = k - 1, []  # type: tuple[int, list[str]]
            while j >= 0 and lines[j].strip().startswith("#") and indent(lines[j]) == own:
                above.insert(0, lines[j].strip().lstrip("#").strip())
                j -= 1
            text = " ".join(above)
        j = k + 1                                 # continuations: comment lines indented past the field
        while j < len(lines) and lines[j].strip().startswith("#") and indent(lines[j]) > own + 4:
            text += " " + lines[j].strip().lstrip("#").strip()
            j += 1
        if text:
            out[node.target.id] = " ".join(text.split())
    return out


def fields(cls=None, prefix: str = "") -> Iterator[tuple[str, Any, str]]:
    """(dotted name, default, meaning) of every field of the schema, in the schema's order."""
    if cls is None:
        from kevolve.config.schema import Config
        cls = Config
    said = _comments(cls)
    default = cls()
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        value = getattr(default, f.name)
        if dataclasses.is_dataclass(value):
            if said.get(f.name):
                yield name + ".*", SECTION, said[f.name]
            yield from fields(type(value), name + ".")
        else:
            yield name, value, said.get(f.name, "")


SECTION = object()          # a section's own line (its fields follow)


def _value(v: Any) -> str:
    if v is SECTION:
        return ""
    if isinstance(v, dict) and v and all(x is None for x in v.values()):
        return "{" + ", ".join(f"{k}: null" for k in v) + "}"
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def groups() -> dict[str, list[str]]:
    from kevolve import ROOT
    from kevolve.config.tasks import list_tasks
    out = {"task": list_tasks()}
    for d in sorted((ROOT / "conf").iterdir()):
        if d.is_dir():
            out[d.name] = sorted(p.stem for p in d.glob("*.yaml"))
    return out


def text(prefix: str = "") -> str:
    rows = [(n, _value(v), m) for n, v, m in fields() if n.startswith(prefix)]
    if not rows:
        names = sorted({n.split(".")[0] for n, _, _ in fields()})
        return f"no field starts with {prefix!r}: the sections are {', '.join(names)}"
    head = [
        "usage: python -m kevolve [task=NAME|PATH] [GROUP=OPTION ...] [FIELD=VALUE ...]   (or: kevolve ...)",
        "  -m / --multirun sweeps (FIELD=a,b,c); --resolved prints the values a run will use (target, evaluators,",
        "  operators, seeds…) and exits; --cfg job the composed YAML; --help PREFIX only the fields under PREFIX",
        "  (--help llm); --hydra-help Hydra's own. target=cpu|cuda is resources.target, as kevolve.evaluate spells it.",
        "",
        *textwrap.wrap("groups (GROUP=OPTION): " + "; ".join(f"{g}: {', '.join(o)}" for g, o in groups().items() if o),
                       118, subsequent_indent="  "),
        "",
        "fields (FIELD=VALUE; the default after `=`; every default lives in kevolve/config/schema.py):"]
    width = min(34, max(len(n) + len(v) + 3 for n, v, _ in rows))
    body = []
    for name, value, meaning in rows:
        left = f"  {name}={value}" if value else f"  {name}"
        wrapped = textwrap.wrap(meaning, 118 - width) or [""]
        if len(left) > width:
            body.append(left)
            body += [" " * (width + 1) + w for w in wrapped if w]
        else:
            body.append(left.ljust(width) + " " + wrapped[0])
            body += [" " * (width + 1) + w for w in wrapped[1:]]
    return "\n".join(head + body)
