"""The kernel's entry point against the task's C signature, before any build: a kernel whose `forward` (or
`backward`) misses an argument, takes them in another order or reads a float scalar as a double is refused with the
mismatch named, instead of being judged on garbage (all outputs NaN, "not written?").

`violations(tokens, task, target)` reads the entry point's parameter list from the user's tokens (the preprocessed
stream `rules.check` lexes: macros expanded) — its definition where there is one, else its declaration — and
compares it, argument by argument, with the one the harness calls (`kevolve.task.abi.c_prototype`): inputs and
outputs are pointers to their element type, sizes integers, scalars their C type, then `void* workspace`, `int64_t
workspace_bytes` and, on CUDA, `cudaStream_t stream`.

Compared by ABI class, not spelling: any integer type for an integer (a size declared `int` works on the sizes
judged), any pointer for the workspace and the stream, `const` and `__restrict__` ignored; a pointer's element type
and a floating scalar's width must match (a `double*` reads a float32 buffer wrongly; a `double eps` reads a float
argument as garbage). Guarantees: one violation per entry point at most (rule `entry-point`), naming its line, the
first argument that differs or what is missing or extra, and the prototype to write. Not guaranteed: anything about
a kernel without an entry point it can read (a name built by token pasting, say): the library's symbol check says
what is missing.
"""
from __future__ import annotations

INTS = {"int", "long", "short", "int64_t", "int32_t", "ptrdiff_t", "size_t", "ssize_t", "uint64_t", "uint32_t",
        "intptr_t", "uintptr_t", "unsigned", "signed", "char", "int16_t", "int8_t"}
IGNORED = {"const", "volatile", "__restrict__", "__restrict", "restrict", "std", "::", "struct"}
FLOATS = {"float": "float", "double": "double", "half": "half", "__half": "half", "__nv_bfloat16": "bfloat16",
          "nv_bfloat16": "bfloat16"}


def kind(type_tokens: list[str]) -> str:
    """An argument's ABI class: `ptr:<element>`, `ptr` (another pointer), `int`, `float`, `double`, or its text."""
    words = [t for t in type_tokens if t not in IGNORED]
    stars = words.count("*") + words.count("&")
    base = [w for w in words if w not in ("*", "&")]
    if stars:
        elem = next((FLOATS[w] for w in base if w in FLOATS), None)
        if elem is None and base and all(w in INTS for w in base):
            elem = "int64" if any(w in ("int64_t", "long") for w in base) else "int"
        return f"ptr:{elem}" if elem and stars == 1 else "ptr"
    if base in (["cudaStream_t"], ["CUstream"]):
        return "ptr"
    if base and all(w in INTS for w in base):
        return "int"
    if len(base) == 1 and base[0] in FLOATS:
        return FLOATS[base[0]]
    return " ".join(base) or "?"


def expected(task, target: str) -> list[tuple[str, str, str]]:
    """(ABI class, name, C text) of each argument the harness passes, in order."""
    from kevolve.task.abi import SCALAR_TYPES
    elem = {"float32": "float", "float64": "double", "int64": "int64", "int32": "int", "float16": "half",
            "bfloat16": "bfloat16"}
    out = [(f"ptr:{elem.get(s.dtype, s.dtype)}", s.name, f"const {s.ctype()}* {s.name}") for s in task.inputs]
    out += [(f"ptr:{elem.get(s.dtype, s.dtype)}", s.name, f"{s.ctype()}* {s.name}") for s in task.outputs]
    out += [("int", n, f"int64_t {n}") for n in task.sizes]
    for s in task.scalars:
        c = SCALAR_TYPES[s.type]
        out.append((kind([c]), s.name, f"{c} {s.name}"))
    out += [("ptr", "workspace", "void* workspace"), ("int", "workspace_bytes", "int64_t workspace_bytes")]
    if target == "cuda":
        out.append(("ptr", "stream", "cudaStream_t stream"))
    return out


def _matches(want: str, got: str) -> bool:
    """Whether an argument of class `got` receives what the harness passes as `want` (`ptr`: any pointer)."""
    return want == got or (want == "ptr" and got.startswith("ptr"))


def _params(toks: list, i: int) -> list[list[str]]:
    """The parameter list that opens at toks[i] ("("), split at its top-level commas, each as its token texts."""
    depth, params, cur = 0, [], []
    for t in toks[i:]:
        if t.text in ("(", "[", "{", "<"):
            depth += 1
            if depth == 1:
                continue
        elif t.text in (")", "]", "}", ">"):
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and t.text == ",":
            params.append(cur)
            cur = []
        else:
            cur.append(t.text)
    if cur:
        params.append(cur)
    return [] if params == [["void"]] else params


def _split(param: list[str]) -> tuple[list[str], str]:
    """(type tokens, name) of one parameter; an unnamed one has name ""."""
    if len(param) > 1 and param[-1].isidentifier() and param[-1] not in INTS | set(FLOATS) | IGNORED \
            and param[-2] not in ("::",):
        return param[:-1], param[-1]
    return param, ""


def _extern_c(toks: list) -> list[bool]:
    """Per token: whether it sits in an `extern "C"` declaration (the 8 tokens before it say `extern`, or an
    `extern "C" {` block holds it)."""
    out: list[bool] = []
    stack: list[bool] = []                             # per open brace: whether it opened an extern "C" block
    for i, t in enumerate(toks):
        if t.text == "{":
            stack.append(i >= 2 and toks[i - 1].kind == "string" and toks[i - 1].value() == "C"
                         and toks[i - 2].text == "extern")
        elif t.text == "}" and stack:
            stack.pop()
        out.append(any(stack) or any(x.text == "extern" for x in toks[max(0, i - 8):i]))
    return out


def find(toks: list, name: str) -> tuple[int, int] | None:
    """(index of the "(", line) of the entry point's parameter list: its definition (an `extern "C"` one first),
    else its last declaration."""
    found, defs, c = None, [], _extern_c(toks)
    for i, t in enumerate(toks[:-1]):
        if not t.user or t.kind != "ident" or t.text != name or toks[i + 1].text != "(":
            continue
        if i > 0 and toks[i - 1].text in (".", "->", "::"):
            continue
        depth, j = 0, i + 1                            # after the list: `{` for a definition, `;` a declaration
        while j < len(toks):
            depth += toks[j].text == "("
            depth -= toks[j].text == ")"
            j += 1
            if depth == 0:
                break
        follow = toks[j].text if j < len(toks) else ""
        if follow == "{":
            defs.append((not c[i], i + 1, t.line))
        if follow == ";" and found is None:
            found = (i + 1, t.line)
    if defs:
        _, i, line = min(defs, key=lambda d: d[0])     # an extern "C" definition before any other
        return i, line
    return found


def violations(toks: list, task, target: str) -> list[tuple[str, int, str]]:
    from kevolve.task.abi import c_prototype
    name = task.direction
    at = find(toks, name)
    want = expected(task, target)
    proto = c_prototype(task, target)
    if at is None:
        return [("entry-point", 1, f"no `{name}(...)` entry point found: the task calls `{proto}`")]
    i, line = at
    got = [(_split(p), p) for p in _params(toks, i)]
    names = [pname for (_, pname), _ in got]
    if len(got) != len(want) and all(names) and set(names) <= {w[1] for w in want}:    # named as the task names
        missing = [w[2] for w in want if w[1] not in names]                             # them: say which are gone
        return [("entry-point", line, f"`{name}` takes {len(got)} arguments, the task passes {len(want)}: missing "
                 + ", ".join(f"`{m}`" for m in missing) + f"; write `{proto}`")]
    for k, (w, ((types, pname), raw)) in enumerate(zip(want, got)):
        if not _matches(w[0], kind(types)):
            said = " ".join(raw)
            return [("entry-point", line, f"`{name}` argument {k + 1} is `{said}` where the task passes `{w[2]}` "
                     f"(arguments in order: inputs, outputs, sizes, scalars, workspace, workspace_bytes"
                     f"{', stream' if target == 'cuda' else ''}); write `{proto}`")]
    if len(got) != len(want):
        if len(got) < len(want):
            missing = ", ".join(f"`{w[2]}`" for w in want[len(got):])
            why = f"takes {len(got)} arguments, the task passes {len(want)}: missing {missing}"
        else:
            why = f"takes {len(got)} arguments, the task passes {len(want)}: the last {len(got) - len(want)} " \
                  "are never passed"
        return [("entry-point", line, f"`{name}` {why}; write `{proto}`")]
    return []
