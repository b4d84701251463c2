"""Reading C expressions from a token list (`judge.static.tokens`), for the address rules (`judge.static.reach`):
where a name's designator ends, whether a `)` closes a cast and to what type, which call a comma sits in, the first
name of an operand. Token-level only: no types, no data flow.
"""
from __future__ import annotations

CASTS = {"reinterpret_cast", "static_cast", "const_cast", "bit_cast", "__builtin_bit_cast"}


def member(user: list, i: int) -> bool:
    return i > 0 and user[i - 1].text in (".", "->", ".*", "->*")


def designator_end(user: list, i: int) -> int | None:
    """The index after the designator at i (template arguments included), or None where it is called or
    launched there (`f(...)`, `f<T>(...)`, `k<<<...>>>`)."""
    j = i + 1
    if j < len(user) and user[j].text == "<" and not (j + 1 < len(user) and user[j + 1].text == "<"):
        depth, k = 0, j
        while k < len(user) and k < j + 80:
            depth += {"<": 1, ">": -1, ">>": -2}.get(user[k].text, 0)
            if user[k].text in (";", "{", "}"):
                break
            if depth <= 0:
                j = k + 1
                break
            k += 1
    if j < len(user) and (user[j].text == "(" or (user[j].text == "<<" and j + 1 < len(user)
                                                   and user[j + 1].text == "<")):
        return None
    return j


def binary(user: list, p: int) -> bool:
    """Whether the operator at p has a left operand (`a + f`), not only a right one (`+f`, `&f`)."""
    return p > 0 and (user[p - 1].kind in ("ident", "number", "string", "char") or user[p - 1].text in (")", "]"))


def cast_group(user: list, close: int) -> tuple[int, list] | None:
    """If user[close] is the `)` of a C cast `( T )`: (index of its `(`, the tokens of T); else None."""
    depth, j = 0, close
    while j >= 0:
        depth += {")": 1, "(": -1}.get(user[j].text, 0)
        if depth == 0:
            break
        j -= 1
    if j < 0:
        return None
    inner = user[j + 1:close]
    if not inner or any(x.kind not in ("ident", "punct") for x in inner):
        return None
    if any(x.kind == "punct" and x.text not in ("*", "&", "::", "(", ")", "<", ">", ",") for x in inner):
        return None
    before = user[j - 1] if j > 0 else None
    if before is not None and (before.kind == "ident" and before.text not in ("return", "case", "else", "do")
                               or before.text in (")", "]")):
        return None                                              # a call's arguments or a declarator, not a cast
    if before is not None and before.text in (">", ">>") and cast_keyword(user, j - 1) is None:
        return None                                              # `f<T>(x)`: a call, not a cast
    return j, inner


def data_type(target: list, pointer_types: set[str]) -> bool:
    """A cast target that makes an address data: an integer type, or a pointer to anything but void or a
    function."""
    words = [x.text for x in target if x.text not in ("const", "volatile", "__restrict__", "__restrict", "struct")]
    if "(" in words and "*" in words:                            # `void (*)(int)`: a function pointer type
        return False
    if words and words[-1] in pointer_types:
        return False
    if words in (["void", "*"], ["void"]):                      # to void*, or discarded
        return False
    return bool(words)


def _open_angle(user: list, close: int) -> int:
    """The index of the `<` that the `>` at user[close] closes (-1 where none does)."""
    depth, j = 0, close
    while j >= 0:
        depth += {">": 1, "<": -1, ">>": 2}.get(user[j].text, 0)
        if depth == 0:
            break
        j -= 1
    return j


def cast_keyword(user: list, close: int):
    """(keyword, target tokens) if user[close] is the `>` of `xxx_cast<T>`."""
    j = _open_angle(user, close)
    if j > 0 and user[j - 1].text in CASTS:
        return user[j - 1].text.replace("_cast", " cast").replace("bit cast", "bit-cast"), user[j + 1:close]
    return None


def cast_start(user: list, close: int) -> int:
    j = _open_angle(user, close) - 1
    while j > 0 and user[j - 1].text == "::":
        j -= 2
    return max(j, 0)


def enclosing_call(user: list, comma: int) -> str | None:
    depth, j = 0, comma
    while j >= 0:
        depth += {")": 1, "(": -1}.get(user[j].text, 0)
        if depth < 0:
            return user[j - 1].text if j > 0 and user[j - 1].kind == "ident" else None
        if user[j].text in (";", "{", "}"):
            return None
        j -= 1
    return None


def operand_base(user: list, i: int) -> int | None:
    """The first name of the expression starting at i, past `&`, parentheses and casts."""
    j = i
    while j < len(user):
        t = user[j]
        if t.text in ("&", "(", "+", "*"):
            if t.text == "(":
                close = closing_paren(user, j)
                inner = user[j + 1:close]
                if close + 1 < len(user) and inner and all(x.kind in ("ident", "punct") for x in inner) and \
                        any(x.text == "*" for x in inner) and user[close + 1].text not in (";", ",", ")"):
                    j = close + 1                                # a cast `( T* )`: its operand follows
                    continue
            j += 1
        elif t.kind == "ident" and t.text in CASTS:
            j += 1
            if j < len(user) and user[j].text == "<":
                depth = 0
                while j < len(user):
                    depth += {"<": 1, ">": -1, ">>": -2}.get(user[j].text, 0)
                    j += 1
                    if depth <= 0:
                        break
        elif t.kind == "ident":
            return j
        else:
            return None
    return None


def closing_paren(user: list, j: int) -> int:
    depth = 0
    for k in range(j, len(user)):
        depth += {"(": 1, ")": -1}.get(user[k].text, 0)
        if depth == 0:
            return k
    return len(user) - 1
