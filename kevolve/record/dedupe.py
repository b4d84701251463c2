"""Duplicate detection: two kernel sources that differ only in comments or in whitespace between tokens
are the same candidate, and are dropped before building.

`normalize_source` runs C's first translation phases (line splices, comments to spaces) and rejoins the
tokens with whitespace only where it separates them; `source_hash` is the sha256 of that text.
Guarantees: comment/whitespace variants normalise equal; sources that differ in one token do not.
Not guaranteed: semantic duplicates (renamed variables, reordered statements) are told apart.
"""
from __future__ import annotations

import hashlib
import re

_LEX = re.compile(r"""
      (?P<ws>[ \t\f\v\r]+)
    | (?P<nl>\n)
    | (?P<lc>//[^\n]*)
    | (?P<bc>/\*.*?(?:\*/|\Z))
    | (?P<raw>(?:u8|u|U|L)?R"(?P<d>[^()\\\s"]{0,16})\(.*?\)(?P=d)")
    | (?P<str>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*"?)
    | (?P<chr>(?:u8|u|U|L)?'(?:\\.|[^'\\\n])*'?)
    | (?P<num>\.?\d(?:[eEpP][+-]|'\w|[\w.])*)
    | (?P<id>[A-Za-z_]\w*)
    | (?P<op>.)
""", re.S | re.X)
# two punctuators that become one token when written together: whitespace between them is kept
_JOINS = frozenset("++ -- += -= *= /= %= &= |= ^= << >> <= >= == != && || -> :: ## .. .* /* // */".split())


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _tokens(src: str) -> list[list[tuple[str, bool]]]:
    """Lines of (token, whitespace-before) after C's phases 1-3: line splices joined, comments → space."""
    src = src.replace("\r\n", "\n").replace("\\\n", "")
    lines: list[list[tuple[str, bool]]] = [[]]
    space = False
    for m in _LEX.finditer(src):
        kind = m.lastgroup
        if kind == "nl":
            lines.append([])
            space = False
        elif kind in ("ws", "lc", "bc"):
            space = True
        else:
            lines[-1].append((m.group(kind or 0), space))
            space = False
    return [line for line in lines if line]


def _join(tokens: list[tuple[str, bool]]) -> str:
    out = [tokens[0][0]]
    for (prev, _), (tok, space) in zip(tokens, tokens[1:]):
        if space and ((_is_word(prev[-1]) and _is_word(tok[0])) or prev[-1] + tok[0] in _JOINS):
            out.append(" ")
        out.append(tok)
    return "".join(out)


def normalize_source(src: str) -> str:
    """The source without comments and without whitespace that does not separate tokens.

    Preprocessor directives stay on their own lines (a newline ends a `#define`); every other line is joined
    into one. `#define F (x)` (object-like) and `#define F(x)` (function-like) stay distinct. String and
    character literals are kept byte for byte."""
    out: list[str] = []
    code: list[tuple[str, bool]] = []
    for line in _tokens(src):
        if line[0][0] != "#":
            code.extend([(line[0][0], True)] + line[1:] if code else line)
            continue
        if code:
            out.append(_join(code))
            code = []
        text = _join(line)
        if len(line) > 3 and line[1][0] == "define" and line[3][0] == "(" and line[3][1]:
            text = _join(line[:3]) + " " + _join(line[3:])
        out.append(text)
    if code:
        out.append(_join(code))
    return "\n".join(out)


def source_hash(src: str) -> str:
    """sha256 (hex) of the normalised source: the duplicate key."""
    return hashlib.sha256(normalize_source(src).encode()).hexdigest()
