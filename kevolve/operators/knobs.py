"""Knob mutation: the operator that needs no LLM. A kernel marks its numeric tunables; this module reads,
rewrites, mutates and crosses them.

The syntax (the contract seed kernels follow) — a declaration with a `// knob:` comment on the same line:

    constexpr int THREADS = 256;          // knob: 128, 256, 512, 1024
    #define ROWS_PER_BLOCK 4              // knob: 1, 2, 4, 8
    constexpr float ALPHA = 0.5f;         // knob: 0.25f, 0.5f, 1.0f
    static constexpr int VEC{4};          // knob: 1, 2, 4
    constexpr int TILE = 32;              // knob: range(8, 128, *2)     8 16 32 64 128
    constexpr int UNROLL = 1;             // knob: range(1, 8, +1)       1 2 ... 8

- The knob's name is the declared identifier: the macro name of a `#define`, else the last identifier
  before `=` or `{` (so `const`, `static`, `constexpr`, any type, or a plain assignment all work).
- Its value is the text after `=` up to `;` (or inside `{}`, or after the macro name), trimmed.
- Its choices are the comma-separated literals after `knob:`, compared as text (`0.5f` ≠ `0.5`), or one
  integer `range(start, stop, *factor)` / `range(start, stop, +step)`, stop included when reached, at
  most 256 values. Nothing may follow the list on that line.
- A line holding only a comment is no knob; a code line with a knob comment that matches neither form
  raises.
- A current value that is not among the choices is kept as an extra choice, listed first: mutation may
  leave it, and cannot come back to it (the comment, which is never rewritten, does not list it).

Guarantees: `apply` changes only the value text of the named knobs, byte for byte everything else (the
knob comments included), and raises ValueError for an unknown knob or a value outside its choices;
`carry` puts back the markers an LLM's rewrite of a kernel dropped (see it), every other byte kept; a
malformed knob line (empty list, bad range, a name declared twice) raises ValueError naming the line.
`mutate`/`crossover` return None when there is nothing to change; every random draw comes from the rng.
Not guaranteed: that a kernel is correct for every combination (the evaluator decides); knob lines inside
`/* */` comments or string literals are not told apart from real ones.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from random import Random

MAX_CHOICES = 256
_KNOB = re.compile(r"//\s*knob\s*:(?P<choices>.*)$")
_DEFINE = re.compile(r"^\s*#\s*define\s+(?P<name>[A-Za-z_]\w*)\s+(?P<value>\S.*?)\s*$")
_ASSIGN = re.compile(r"^(?P<decl>.*?)\b(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>[^;=]+?)\s*;\s*$")
_BRACE = re.compile(r"^(?P<decl>.*?)\b(?P<name>[A-Za-z_]\w*)\s*\{\s*(?P<value>[^;{}]+?)\s*\}\s*;\s*$")
_RANGE = re.compile(r"^range\(\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*([*+])\s*(\d+)\s*\)$")


@dataclass(frozen=True)
class Knob:
    """One tunable: its name, current value text, allowed values (text), and where the value sits."""
    name: str
    value: str
    choices: tuple[str, ...]
    line: int                       # 1-based
    span: tuple[int, int]           # columns of the value within the line

    @property
    def alternatives(self) -> tuple[str, ...]:
        return tuple(c for c in self.choices if c != self.value)


def _choices(text: str, where: str) -> tuple[str, ...]:
    text = text.strip()
    r = _RANGE.match(text)
    if r:
        start, stop, op, step = int(r[1]), int(r[2]), r[3], int(r[4])
        if start > stop or step < 1 or (op == "*" and (step < 2 or start < 1)):
            raise ValueError(f"{where}: {text} must rise from start to stop (+step ≥ 1, or *factor ≥ 2 from ≥ 1)")
        values = []
        v = start
        while v <= stop:
            values.append(str(v))
            if len(values) > MAX_CHOICES:
                raise ValueError(f"{where}: {text} has more than {MAX_CHOICES} values")
            v = v * step if op == "*" else v + step
        return tuple(values)
    values = [c.strip() for c in text.split(",")]
    if not text or any(not c or " " in c for c in values):
        raise ValueError(f"{where}: knob list {text!r} must be literals separated by commas, e.g. 128, 256")
    return tuple(dict.fromkeys(values))


def _knob(line: str, number: int) -> Knob | None:
    k = _KNOB.search(line)
    if not k:
        return None
    code = line[: k.start()]
    if not code.strip():
        return None                  # a comment line that talks about knobs declares none
    m = _DEFINE.match(code) or _ASSIGN.match(code) or _BRACE.match(code)
    if not m:
        raise ValueError(f"line {number}: a knob comment must follow `#define NAME value` or `... NAME = value;`"
                         f" on the same line, got {code.strip()!r}")
    choices = _choices(k["choices"], f"line {number} (knob {m['name']})")
    value = m["value"]
    if value not in choices:
        choices = (value,) + choices
    return Knob(m["name"], value, choices, number, m.span("value"))


def parse(source: str) -> dict[str, Knob]:
    """Every knob of the source, by name, in the order they appear."""
    knobs: dict[str, Knob] = {}
    for number, line in enumerate(source.splitlines(), start=1):
        knob = _knob(line, number)
        if knob is None:
            continue
        if knob.name in knobs:
            raise ValueError(f"line {number}: knob {knob.name} is already declared on line {knobs[knob.name].line}")
        knobs[knob.name] = knob
    return knobs


def apply(source: str, values: dict[str, object]) -> str:
    """The source with the named knobs set to the given values (each one of its choices)."""
    knobs = parse(source)
    lines = source.splitlines(keepends=True)
    for name, value in values.items():
        if name not in knobs:
            raise ValueError(f"no knob {name!r} in the source (knobs: {', '.join(knobs) or 'none'})")
        knob, text = knobs[name], str(value).strip()
        if text not in knob.choices:
            raise ValueError(f"knob {name}: {text!r} is not one of its choices {list(knob.choices)}")
        i, (a, b) = knob.line - 1, knob.span
        lines[i] = lines[i][:a] + text + lines[i][b:]
    return "".join(lines)


Changes = dict[str, tuple[str, str]]     # knob name -> (old value, new value)


def mutate(source: str, rng: Random, n: int = 1) -> tuple[str, Changes] | None:
    """Sets between 1 and n knobs (chosen at random) to another of their choices; None without such knobs."""
    knobs = [k for k in parse(source).values() if k.alternatives]
    if not knobs:
        return None
    picked = rng.sample(knobs, rng.randint(1, max(1, min(n, len(knobs)))))
    changes = {k.name: (k.value, rng.choice(k.alternatives)) for k in picked}
    return apply(source, {name: new for name, (_, new) in changes.items()}), changes


def crossover(a: str, b: str, rng: Random) -> tuple[str, Changes] | None:
    """a's code with some of b's knob values: of the knobs both declare whose values differ and whose b value
    is among a's choices, each is taken from b with probability 1/2 (at least one is). None when none differ."""
    ka, kb = parse(a), parse(b)
    differ = [n for n, k in ka.items() if n in kb and kb[n].value != k.value and kb[n].value in k.choices]
    if not differ:
        return None
    taken = [n for n in differ if rng.random() < 0.5] or [rng.choice(differ)]
    changes = {n: (ka[n].value, kb[n].value) for n in taken}
    return apply(a, {n: new for n, (_, new) in changes.items()}), changes


def carry(parent: str, child: str) -> tuple[str, tuple[str, ...]]:
    """`child` with the knob markers of `parent` it dropped put back: for each knob of the parent that the child
    does not mark, if the child has exactly one line declaring that name (the forms above) and the line holds no
    comment, the parent's `// knob: ...` comment is appended to it. Returns (the source, the knobs restored).

    An LLM that rewrites a whole kernel often drops comments; a marker it rewrote or moved is left as it is, and
    so is every other line, byte for byte. The child is returned unchanged when either kernel's knob lines are
    malformed or the restored markers would not parse (a child value outside the old list is kept, as `parse` does).
    """
    try:
        theirs, ours = parse(parent), parse(child)
    except ValueError:
        return child, ()
    lines = child.splitlines(keepends=True)
    parent_lines = parent.splitlines()
    restored = []
    for name, knob in theirs.items():
        if name in ours:
            continue
        at = [i for i, line in enumerate(lines) if "//" not in line and "/*" not in line and _declares(line, name)]
        if len(at) != 1:
            continue
        comment = _KNOB.search(parent_lines[knob.line - 1]).group(0)
        i = at[0]
        body, end = lines[i].rstrip("\r\n"), lines[i][len(lines[i].rstrip("\r\n")):]
        lines[i] = f"{body}   {comment}{end}"
        restored.append(name)
    source = "".join(lines)
    try:
        parse(source)
    except ValueError:
        return child, ()
    return source, tuple(restored)


def _declares(line: str, name: str) -> bool:
    code = line.rstrip("\r\n")
    m = _DEFINE.match(code) or _ASSIGN.match(code) or _BRACE.match(code)
    return m is not None and m["name"] == name


def neighbours(source: str) -> list[tuple[str, Changes]]:
    """Every source one knob change away, knob by knob in source order, choices in listed order."""
    return [(apply(source, {k.name: v}), {k.name: (k.value, v)})
            for k in parse(source).values() for v in k.alternatives]


def space_size(source: str) -> int:
    """How many knob settings the source admits (1 without knobs): whether exhaustive search is affordable."""
    size = 1
    for k in parse(source).values():
        size *= len(k.choices)
    return size
