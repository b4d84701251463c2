"""Static rules against reaching code by address: a function's address used as data, and a library's own
structures named in strings or numbers.

C reaches any function of any loaded library from the address of one it may call: cast it to an integer or a
byte pointer, step back to the library's ELF header, walk its dynamic section to the symbol table, and look up
any other (docs/decisions/judge.md, "Issue 37: reaching code by address"). `violations(toks)` reads the user's
preprocessed tokens (`judge.static.tokens`) and returns (rule, line, reason) for:
- `function-address`: a function designator — a name the file calls or launches, a library function, a
  variable or parameter declared as a function pointer or assigned one, `stdout`/`stderr` — that is cast to an
  integer or a data pointer (C casts, `*_cast<...>`, `bit_cast`, `__builtin_bit_cast`, functional casts such as
  `uintptr_t(f)`), stepped (`f + 1`, `f[0]`, comparisons), handed to memcpy-like or printf-like calls
  (`memcpy(&v, &fp, 8)`, `snprintf(buf, "%p", f)`), or punned through a union holding a function pointer.
  Casts to `void*` and to function-pointer types stay allowed (`cudaFuncSetAttribute((const void*)kernel, ...)`,
  `cudaLaunchKernel`), as do calls, launches and passing a function to another;
- `library-walk`: a string naming /proc/ (`/proc/self/maps`), the ELF magic as a string or a number, and
  `symbol-by-name`: a string that is exactly a forbidden function's name (a symbol looked up by name:
  `"dl_iterate_phdr"`, `"PyRun_SimpleString"`, `"open"`).
The vocabulary of library structures (`Elf64_*`, `link_map`, `DT_*`, `PT_*`, ...) is `judge.static.vocabulary`'s.

Guarantees: each spelling above is found however it is written around (macros are expanded first, parentheses,
`&`, nested casts through `void*`, a `const` anywhere). Not guaranteed: that no address reaches a library — this
reads tokens, not types or data flow. A template parameter that receives a function (`addr(printf)` with
`template<class T> uintptr_t addr(T t)`), a function pointer laundered through an array or a struct, a data
pointer the kernel holds legitimately (a static array's address, the stack, a freed heap chunk, which holds
libc's own pointers) stepped back to its library's header with byte compares, and a name matched by hash
rather than by string all pass here. The symbol check (`judge.static.symbols`) rejects an imported function's address
taken as data whatever the spelling (a data relocation in the library); the confinement and its evidence
(`judge.worker.confine`, `judge.evaluator.evidence`) are what holds after that.
"""
from __future__ import annotations

import re
from functools import lru_cache

from kevolve.judge.static import literals, symbols
from kevolve.judge.static.expressions import (CASTS, binary, cast_group, cast_keyword, cast_start, data_type,
                                              designator_end, enclosing_call, member, operand_base)
from kevolve.judge.static.vocabulary import VOCABULARY

TYPE_WORDS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct", "unsigned", "signed", "long",
              "short", "int", "char", "float", "double", "bool", "void", "auto", "std", "::", "*", "&", "__int128",
              "typename"}
INTEGER_TYPES = {"uintptr_t", "intptr_t", "size_t", "ssize_t", "ptrdiff_t", "uint64_t", "int64_t", "uint32_t",
                 "int32_t", "uint16_t", "int16_t", "uint8_t", "int8_t", "unsigned", "long", "int", "char", "short",
                 "signed", "__int128", "__uint128_t", "uintmax_t", "intmax_t", "u64", "u32", "byte", "bool"}
MEMORY_CALLS = {"memcpy", "memmove", "memcmp", "memchr", "memset", "memccpy", "bcopy", "bcmp", "strcmp", "strncmp",
                "strlen", "strnlen", "strchr", "strrchr", "strstr", "strcpy", "strncpy", "printf", "fprintf",
                "sprintf", "snprintf", "vprintf", "vfprintf", "vsnprintf", "vsprintf", "puts", "fputs", "fwrite",
                "__builtin_memcpy", "__builtin_memmove", "__builtin_memcmp", "__builtin_memset", "__builtin_strlen",
                "__builtin_strcmp", "__builtin_printf", "__builtin_sprintf", "__builtin_snprintf", "copy", "copy_n",
                "__builtin___memcpy_chk", "__builtin___memmove_chk", "__builtin___snprintf_chk",
                "__builtin___sprintf_chk"}
PRINTS = {"printf", "fprintf", "fputs", "fwrite", "puts", "vfprintf", "fflush", "fputc", "putc"}   # take a FILE*
FILE_HANDLES = {"stdout", "stderr"}          # libc's data: cast or stepped, they lead into libc's image
NOT_FUNCTIONS = {"if", "for", "while", "switch", "return", "sizeof", "alignof", "alignas", "decltype", "catch",
                 "static_assert", "new", "delete", "typeid", "noexcept", "__attribute__", "__attribute",
                 "__declspec", "asm", "__asm__", "__asm", "operator", "defined", "throw", "case", "do", "else",
                 "__launch_bounds__", "__align__", "_Pragma", "__builtin_expect", "__builtin_assume_aligned",
                 "__builtin_offsetof", "offsetof", "__typeof__", "typeof", "__alignof__", "__extension__"} \
    | CASTS | TYPE_WORDS | INTEGER_TYPES
STEPS = {"+", "-", "[", "+=", "-=", "^", "|", "%", "/", "&"}       # after a designator: arithmetic on it
DECLARATOR_END = {"=", ";", ",", "[", ")", "{", ":"}
USED_AS_DATA = {"[", ".", "->", "++", "--", "=", "+=", "-=", "*=", "/="}   # no function is subscripted or assigned
NOT_TYPES = {"return", "case", "else", "goto", "new", "delete", "throw", "sizeof", "typename", "operator", "do",
             "co_return", "co_yield", "using", "namespace"}


def violations(toks: list) -> list[tuple[str, int, str]]:
    """(rule, line, reason) for each address reach in the user's tokens (see the module's docstring)."""
    user = [t for t in toks if t.user and t.kind != "directive"]
    out = literals.violations(user)
    functions = _functions(user)
    holders, pointer_types = _holders(user, functions)
    designators = functions | holders | FILE_HANDLES
    seen = set()
    for i, t in enumerate(user):
        if t.kind != "ident" or t.text not in designators or member(user, i):
            continue
        end = designator_end(user, i)
        if end is None:                                          # a call or a launch, not an address
            continue
        why = _misuse(user, i, end, pointer_types, t.text in FILE_HANDLES)
        if why and (t.line, why) not in seen:
            seen.add((t.line, why))
            out.append(("function-address", t.line, f"{why} `{t.text}`: a function's (or libc's) address used as "
                                                    "data reaches code no rule sees — call functions, never read "
                                                    "them"))
    out += _unions(user) + _callables(user, designators, pointer_types)
    return out


def _callables(user: list, designators: set[str], pointer_types: set[str]) -> list[tuple[str, int, str]]:
    """Casts to a function-pointer type of anything but a function: an address found in data, made callable."""
    out = []
    for k, t in enumerate(user[:-1]):
        target, operand = None, None
        if t.text == ")":
            group = cast_group(user, k)
            if group is not None and user[k + 1].text not in (";", ",", ")", "{", "=", "]"):
                target, operand = group[1], k + 1
        elif t.text in (">", ">>") and user[k + 1].text == "(" and cast_keyword(user, k):
            target, operand = cast_keyword(user, k)[1], k + 2
        if target is None or not _function_pointer_type(target, pointer_types):
            continue
        base = operand_base(user, operand)
        if base is None or user[base].text not in designators:
            typed = " ".join(x.text for x in target)
            out.append(("function-address", t.line, f"casts data to the function type `{typed}`: an address found "
                                                    "in memory, made callable, reaches code no rule sees"))
    return out


def _function_pointer_type(target: list, pointer_types: set[str]) -> bool:
    words = [x.text for x in target if x.text not in ("const", "volatile")]
    return any(words[m:m + 3] == ["(", "*", ")"] for m in range(len(words))) or \
        bool(words) and words[-1] in pointer_types


# ------------------------------------------------------------------ which names are functions
def _functions(user: list) -> set[str]:
    """Names the file calls, declares with parameters or launches, and every library function the symbol check
    knows (so `printf` is one even where it is only named) — less the names the file declares as variables
    (`const float* gamma`, `float y0 = ...`: libm's gamma and y0 are functions, a kernel's are not)."""
    out = set(_library_functions()) | {"forward", "backward"}           # the entry points, declared or not
    for i, t in enumerate(user[:-1]):
        nxt = user[i + 1].text
        if t.kind == "ident" and t.text not in NOT_FUNCTIONS and not t.text.endswith("_t") and \
                (nxt == "(" or (nxt == "<<" and i + 2 < len(user) and user[i + 2].text == "<")):
            out.add(t.text)
    return out - FILE_HANDLES - _variables(user)


def _variables(user: list) -> set[str]:
    """Names declared as variables, parameters or fields: after a type (a keyword, a name, `*`) and before what
    ends a declarator (`=`, `;`, `,`, `[`, `)`, `{`, `:`)."""
    out = set()
    for i in range(1, len(user) - 1):
        t, prev, nxt = user[i], user[i - 1], user[i + 1]
        if t.kind != "ident":
            continue
        if (nxt.text in DECLARATOR_END and (prev.text in ("*", ">") or (prev.kind == "ident" and prev.text not in
                                                                        NOT_TYPES))) \
                or (prev.text == "," and nxt.text == "=") or (prev.text == ">" and nxt.text == "(") \
                or (nxt.text in USED_AS_DATA and prev.text not in (".", "->")):
            out.add(t.text)                   # `T* a;`, `T a = ...`, `, b = ...`, `vector<T> v(n)`, `a[i]`, `a.x`
    return out


@lru_cache(maxsize=1)
def _library_functions() -> frozenset[str]:
    names = set(symbols.MEMORY) | set(symbols.CXX) | set(symbols.CUDA) | set(symbols.libm())
    for _, vocabulary, _ in VOCABULARY.values():
        names |= vocabulary
    return frozenset(n for n in names if re.match(r"^[A-Za-z_]\w*$", n))


def _holders(user: list, functions: set[str]) -> tuple[set[str], set[str]]:
    """Variables holding a function's address: declared as function pointers (`R (*p)(...)`, a type made so by
    typedef or using), or assigned a designator (`auto p = &f;`, `q = (void*)p;`); and those pointer types."""
    types = set()
    for i, t in enumerate(user):
        if t.text == "typedef":
            name = _pointer_declarator(user, i + 1, stop=";")
            if name:
                types.add(name)
        elif t.text == "using" and i + 2 < len(user) and user[i + 2].text == "=":
            if _pointer_declarator(user, i + 3, stop=";", anonymous=True):
                types.add(user[i + 1].text)
    held = set()
    for i in range(len(user) - 4):
        if [x.text for x in user[i:i + 2]] == ["(", "*"]:
            j = i + 2
            while j < len(user) and user[j].text in ("const", "volatile", "__restrict__"):
                j += 1
            if j + 2 < len(user) and user[j].kind == "ident" and user[j + 1].text == ")" and user[j + 2].text == "(":
                held.add(user[j].text)
        if user[i].text in types and user[i + 1].kind == "ident":
            held.add(user[i + 1].text)
    for _ in range(3):                                           # assignments, chained a few times
        for i, t in enumerate(user[:-2]):
            if t.kind == "ident" and user[i + 1].text == "=" and t.text not in held:
                base = operand_base(user, i + 2)
                end = designator_end(user, base) if base is not None else None
                if end is not None and user[base].text in functions | held | FILE_HANDLES and \
                        _expression_ends(user, end):
                    held.add(t.text)
    return held, types


def _expression_ends(user: list, j: int) -> bool:
    """Whether the expression is over at j (past closing parentheses): `= (void*)&f;` is the designator alone."""
    while j < len(user) and user[j].text == ")":
        j += 1
    return j >= len(user) or user[j].text in (";", ",", "}")


def _pointer_declarator(user: list, i: int, stop: str, anonymous: bool = False) -> str | None:
    """In a declaration starting at i: the name of a function-pointer declarator `( * name ) (` (or, with
    `anonymous`, any `( * ) (`), before `stop`."""
    j = i
    while j < len(user) - 3 and user[j].text != stop:
        if user[j].text == "(" and user[j + 1].text == "*":
            if anonymous and user[j + 2].text == ")" and user[j + 3].text == "(":
                return "*"
            if user[j + 2].kind == "ident" and user[j + 3].text == ")":
                return user[j + 2].text
        j += 1
    return None


# ------------------------------------------------------------------ where a designator is used


def _misuse(user: list, i: int, end: int, pointer_types: set[str], handle: bool) -> str | None:
    """Why the designator user[i:end] is used as data there, or None."""
    if end < len(user) and user[end].text in STEPS:
        return "steps the address of"
    s = i
    while True:                                                  # out through `&`, parentheses and allowed casts
        p = s - 1
        if p < 0:
            return None
        if user[p].text in ("&", "+", "-") and not binary(user, p):   # `&f`, `+f` (a lambda to a pointer)
            s = p
        elif user[p].text == "(":
            head = user[p - 1] if p > 0 else None
            if head is not None and head.text in (">", ">>") and cast_keyword(user, p - 1):
                kind, target = cast_keyword(user, p - 1)
                if data_type(target, pointer_types):
                    return f"{kind}s to `{' '.join(x.text for x in target)}` the address of"
                s = cast_start(user, p - 1)
            elif head is not None and head.text in ("__builtin_bit_cast",):
                return "bit-casts the address of"
            elif head is not None and head.kind == "ident" and head.text in INTEGER_TYPES:
                return f"converts to `{head.text}` the address of"
            elif head is not None and head.kind == "ident" and head.text in MEMORY_CALLS and not (
                    handle and head.text in PRINTS):
                return f"passes to `{head.text}` the address of"
            else:
                s = p
        elif user[p].text == ")":
            group = cast_group(user, p)
            if group is None:
                return None
            start, target = group
            if data_type(target, pointer_types):
                return f"casts to `{' '.join(x.text for x in target)}` the address of"
            s = start
        elif user[p].text == ",":
            call = enclosing_call(user, p)
            if call == "__builtin_bit_cast":
                return "bit-casts the address of"
            if call is not None and call in MEMORY_CALLS and not (handle and call in PRINTS):
                return f"passes to `{call}` the address of"
            return None
        elif user[p].text in STEPS - {"["}:
            return "steps the address of"
        else:
            return None


def _unions(user: list) -> list[tuple[str, int, str]]:
    """A union with a function-pointer member: the pointer read back as an integer."""
    out = []
    for i, t in enumerate(user):
        if t.text != "union":
            continue
        j = i + 1
        while j < len(user) and user[j].text not in ("{", ";"):
            j += 1
        if j >= len(user) or user[j].text != "{":
            continue
        depth, k = 0, j
        while k < len(user):
            depth += {"{": 1, "}": -1}.get(user[k].text, 0)
            if depth == 0:
                break
            k += 1
        if any([x.text for x in user[m:m + 2]] == ["(", "*"] and user[m + 2].kind == "ident" and
               user[m + 3].text == ")" and user[m + 4].text == "(" for m in range(j, min(k, len(user) - 4))):
            out.append(("function-address", t.line, "a union holding a function pointer: its address read back as "
                                                    "data reaches code no rule sees"))
    return out




