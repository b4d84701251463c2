"""The naive writer's intermediate form (kevolve/task/naive.py): tensor values as index arithmetic (`Val`), loop
nests kept in double in the workspace (`Loop`, `Lowered`), and reading a traced size back as an expression of the
task's sizes (`Sizes`). Pure text: nothing here runs torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable


class NaiveError(ValueError):
    """The reference uses something the naive writer does not cover; the message names it."""


@dataclass
class Val:
    """A tensor value: its shape (C expressions) and how to read element `idx` (a list of C index expressions)."""
    shape: tuple[str, ...]
    load: Callable[[list[str]], str]
    flat: str | None = None             # the pointer when it is a contiguous buffer read from its start


@dataclass
class Loop:
    dest: str                           # the buffer written (a temporary, or an output)
    shape: tuple[str, ...]
    body: Callable[[str, list[str]], str]   # C statements writing dest[i], given the names of the linear index i
                                            # and of the index per dimension (the emitter declares both)
    cast: str = "double"
    inner: str = "1"                    # iterations per element (a reduction's length): the loop's work is numel × it


@dataclass
class Lowered:
    temps: list[tuple[str, str]] = field(default_factory=list)      # (name, element count expression)
    loops: list[Loop] = field(default_factory=list)

    def workspace_bytes(self) -> str:
        return "8 * (" + " + ".join(n for _, n in self.temps) + ")" if self.temps else "0"


def numel(shape) -> str:
    return "*".join(f"({d})" for d in shape) if shape else "1"


def contiguous(ptr: str, shape: tuple[str, ...], cast: str = "(double)") -> Callable[[list[str]], str]:
    def load(idx: list[str]) -> str:
        off = "0"
        for i, d in zip(idx, shape):
            off = f"({off})*({d}) + ({i})"
        return f"{cast}{ptr}[{off}]"
    return load


def decompose(i: str, shape: tuple[str, ...], prefix: str) -> tuple[str, list[str]]:
    """C statements that split linear index `i` over `shape` into `prefix0…`; and those names."""
    names = [f"{prefix}{k}" for k in range(len(shape))]
    if not shape:
        return "", []
    lines = [f"int64_t {prefix}_rest = {i};"]
    for k in range(len(shape) - 1, 0, -1):
        lines.append(f"const int64_t {names[k]} = {prefix}_rest % ({shape[k]}); {prefix}_rest /= ({shape[k]});")
    lines.append(f"const int64_t {names[0]} = {prefix}_rest;")
    return " ".join(lines), names


class Sizes:
    """Reads a traced integer back as an expression of the sizes (their primes), or a literal."""

    def __init__(self, primes: dict[str, int]):
        self.primes = primes

    def expr(self, v: int) -> str:
        v = int(v)
        if v <= 1:
            return str(v)
        parts, rest = [], v
        for name, p in self.primes.items():
            while rest % p == 0:
                parts.append(name)
                rest //= p
        if rest != 1:
            parts.append(str(rest))
        return "*".join(parts) if parts else str(v)

    def number(self, x: float, scalars: dict[str, float]) -> str:
        """A literal of the graph as C: a scalar's name, an expression of the sizes, or the number."""
        for name, trace in scalars.items():
            if x == trace:
                return f"(double){name}"
        if float(x).is_integer() and abs(x) > 1 and any(int(abs(x)) % p == 0 for p in self.primes.values()):
            e = self.expr(int(abs(x)))
            return f"{'-' if x < 0 else ''}(double)({e})"
        if math.isinf(x):
            return "INFINITY" if x > 0 else "-INFINITY"
        if math.isnan(x):
            return "NAN"
        return repr(float(x))


def broadcast(shapes: list[tuple[str, ...]]) -> tuple[str, ...]:
    n = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(n):
        dims = {s[len(s) - n + k] for s in shapes if len(s) - n + k >= 0} - {"1"}
        if len(dims) > 1:
            raise NaiveError(f"shapes {shapes} do not broadcast as the trace read them")
        out.append(dims.pop() if dims else "1")
    return tuple(out)


def aligned(v: Val, shape: tuple[str, ...], idx: list[str]) -> str:
    """`v` read at output index `idx` of a broadcast result of `shape`."""
    lead = len(shape) - len(v.shape)
    return v.load(["0" if d == "1" and shape[lead + k] != "1" else idx[lead + k] for k, d in enumerate(v.shape)])
