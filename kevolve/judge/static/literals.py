"""Literals that name what a kernel must not reach: a string naming a path under /proc, the ELF magic as a string
or a number, a string that is exactly a forbidden function's name (a symbol looked up by name).

Guarantees: adjacent string literals are joined as C joins them and escapes are decoded before the checks.
"""
from __future__ import annotations

import codecs
import re

from kevolve.judge.static.vocabulary import forbidden

ELF_MAGIC = {0x464C457F, 0x7F454C46}
PROC = re.compile(r"(^|/)proc(/|$)")


def violations(user: list) -> list[tuple[str, int, str]]:
    """(rule, line, reason) for each string and number of the user's tokens that names a path, a header or a symbol."""
    return _strings(user) + _numbers(user)


def _strings(user: list) -> list[tuple[str, int, str]]:
    """Adjacent string literals joined (as C joins them), then: /proc paths, the ELF magic, a forbidden name."""
    out, i = [], 0
    while i < len(user):
        if user[i].kind != "string":
            i += 1
            continue
        j, text = i, ""
        while j < len(user) and user[j].kind == "string":
            text += _unescape(user[j].value())
            j += 1
        line = user[i].line
        if PROC.search(text) and "/" in text:
            out.append(("library-walk", line, "names a path under /proc (the process's maps, memory or other "
                                              "processes): a kernel reads only its arguments"))
        if "\x7fELF" in text:
            out.append(("library-walk", line, "the ELF magic: looks for a library's header in memory"))
        name = text.strip()
        rule = forbidden(name, False) if re.match(r"^[A-Za-z_]\w*$", name) else None
        if rule:
            out.append(("symbol-by-name", line, f"the string \"{name}\" names a forbidden function ({rule}): "
                                                "looking a symbol up by name reaches it without calling it"))
        i = j
    return out


def _unescape(raw: str) -> str:
    try:
        return codecs.decode(raw.encode("latin-1", "backslashreplace"), "unicode_escape")
    except (UnicodeDecodeError, ValueError):
        return raw


def _numbers(user: list) -> list[tuple[str, int, str]]:
    out = []
    for t in user:
        if t.kind == "number":
            m = re.match(r"^(0[xX][0-9a-fA-F']+|\d[\d']*)", t.text)
            if m:
                try:
                    v = int(m.group(1).replace("'", ""), 0)
                except ValueError:
                    continue
                if v in ELF_MAGIC:
                    out.append(("library-walk", t.line, "the ELF magic as a number: looks for a library's header "
                                                        "in memory"))
    return out
