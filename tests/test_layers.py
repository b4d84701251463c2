"""The house's layers, read from the imports: every import points down `LAYERS` (or stays in its package), no
module imports itself back through others, and no module is over `MAX_LINES` lines.

An import is any `import` or `from ... import` of a kevolve module, at module level or inside a function (a
deferred import is still a dependency); imports under `if TYPE_CHECKING:` count too (types are part of the
contract). A package's own modules may import each other freely, but not in a circle.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kevolve"

# top to bottom: a module may import its own package and anything below its layer
LAYERS = [
    ["cli"],
    ["export"],
    ["report"],
    ["search"],
    ["tracking"],
    ["record"],
    ["operators"],
    ["judge"],
    ["task"],
    ["config"],
    ["llm"],
    ["messages", "progress", "__init__"],
]
MAX_LINES = 400
ENTRY_POINTS = {"kevolve.evaluate", "kevolve.tasks"}       # `python -m kevolve.evaluate|tasks`: shims over kevolve.cli


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path, known: set[str]) -> set[str]:
    """The kevolve modules `path` imports (a `from pkg import name` of a module counts as that module)."""
    tree = ast.parse(path.read_text())
    out = set()
    me = _module(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("kevolve")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kevolve"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if full in known else node.module)
    out.discard(me)
    return {m for m in out if m in known}


def _layer(module: str) -> tuple[int, str]:
    parts = module.split(".")
    if parts[-1] == "__main__" or module in ENTRY_POINTS:      # `python -m ...` shims: entry points, the top layer
        return 0, "cli"
    top = parts[1] if len(parts) > 1 else "__init__"
    for i, names in enumerate(LAYERS):
        if top in names:
            return i, top
    raise AssertionError(f"{module}: in no layer of tests/test_layers.py (add its package to LAYERS)")


def graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: _imports(p, known) for m, p in mods.items()}


def test_every_import_points_down_the_layers():
    against = []
    for mod, deps in graph().items():
        (mine, pkg) = _layer(mod)
        for dep in deps:
            (theirs, dpkg) = _layer(dep)
            if dpkg != pkg and theirs <= mine:
                against.append(f"{mod} -> {dep}")
    assert not against, f"{len(against)} imports against the layers:\n" + "\n".join(sorted(against))


def test_no_module_imports_itself_back():
    g = graph()
    circles, seen = [], set()

    def visit(node: str, stack: list[str]) -> None:
        if node in stack:
            circle = stack[stack.index(node):]
            key = frozenset(circle)
            if key not in seen:
                seen.add(key)
                circles.append(" -> ".join(circle + [node]))
            return
        if node in done:
            return
        for dep in sorted(g.get(node, ())):
            visit(dep, stack + [node])
        done.add(node)
    done: set[str] = set()
    for m in sorted(g):
        visit(m, [])
    assert not circles, "import circles:\n" + "\n".join(circles)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_are_short(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)}: {n} lines (at most {MAX_LINES}: one concept per module)"
