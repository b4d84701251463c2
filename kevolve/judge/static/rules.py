"""Static rules: reject a candidate before any build, with the rule and the line that broke it.

A kernel is one source file that computes; it has no business starting threads or processes, touching files,
sockets or the environment, loading libraries, making system calls, handling signals, sleeping, running code at
load time, binding names to other symbols, or (in the C ABI) reaching into torch or the Python interpreter.

Two passes. On the raw text (comments and literals blanked): includes against an allow-list per target and
ABI, and the directives that could smuggle code past the second pass (`##`, `#include_next`, `#import`,
macro stacking, `#line` and GNU line markers, which would make user code look like a system header's).
Then on the *preprocessed* token stream (`judge.static.tokens`: the toolchain's own preprocessor with the build's
flags, then a real C++ tokenizer): every identifier of the user's file (tokens of system headers are skipped
by the line markers, but a header's macro expanded in user code is user code) is looked up in the
vocabulary (`judge.static.vocabulary`) — any use, not only `name(`: taking its address, `(f)(x)`, a `(` on the next
line, a macro; members (`x.open`, `p->write`) are not uses, except the fields of an access-policy window
(`MEMBERS_FORBIDDEN`: `.accessPolicyWindow`, `.hitProp`, `.missProp`, `.hitRatio`). Token sequences catch
`std::thread` and friends, attributes however spelled (`__attribute__((__constructor__))`,
`[[gnu::constructor]]`, `alias`, `section`), asm labels and file-scope asm, `extern "C"` declarations other than the
entry point (however spelled), and `#pragma`s outside an allow-list (`#pragma weak`, `redefine_extname` bind names).

A library's own structures are vocabulary too (`library-walk`: `Elf64_*`, `link_map`, `DT_*`, `PT_*`, the
auxiliary vector, the ELF structs' field names as members), and `judge.static.reach` reads the same tokens for a
function's address used as data (cast to an integer or a byte pointer, stepped, copied, punned), data made
callable, /proc paths, the ELF magic and forbidden names in strings.

Guarantees: `check(source, target, abi)` returns a `Verdict`; `ok=False` carries every violated rule with its
reason and line number. Not guaranteed: that a kernel which passes is harmless — C reaches any function by
address arithmetic from any pointer it holds, which no rule sees whole (`judge.static.reach` says which spellings pass;
`tests/adversarial/cpu/slows_torch.cpp` passes every rule). The symbol check of the built library
(`judge.static.symbols`), the worker's confinement (`judge.worker.confine`) and the evidence of what it refused
(`judge.evaluator.evidence`) are the next layers; no layer is trusted alone.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kevolve.judge.static import entry, reach
from kevolve.judge.static import tokens as lex
from kevolve.judge.static.source import (C_INCLUDES, CUDA_INCLUDE_PREFIXES, CUDA_INCLUDES,  # noqa: F401 (the prompt's list)
                                         REASON_PREPROCESSOR, TORCH_INCLUDE_PREFIXES, blank_comments_and_strings,
                                         directives, normalize)
from kevolve.judge.static.vocabulary import (L2_PRIORITY_TEXT, MEMBERS_FORBIDDEN, VOCABULARY,  # noqa: F401
                                             forbidden)

ATTRIBUTES = {"constructor": "constructor", "destructor": "constructor", "init_priority": "constructor",
              "section": "constructor", "alias": "symbol-alias", "weakref": "symbol-alias",
              "ifunc": "symbol-alias", "symver": "symbol-alias", "weak": "symbol-alias"}
PRAGMAS = re.compile(r"#\s*pragma\s+(omp\b|unroll\b|nounroll\b|once\b|message\b|pack\b|nv_diag_\w+|diag_\w+|"
                     r"GCC\s+(unroll|ivdep|diagnostic|optimize|push_options|pop_options|target)\b|clang\s+loop\b|"
                     r"GCC\s+visibility\s+(push|pop)\b)")
ASM = {"asm", "__asm__", "__asm"}
ASM_TEXT = re.compile(r"\.(pushsection|section|symver|weak|globl|init_array|fini_array|ctors|dtors)\b|"
                      r"\bsys(call|enter)\b|\bint\s+\$?0x80\b")
CODE_OPENERS = {")", "]", "const", "noexcept", "override", "final", "mutable", "else", "do", "try"}
REASONS = {"constructor": "runs code at load or unload time, outside the harness's call",
           "symbol-alias": "binds a name to another symbol (a way to reach C functions without declaring them)",
           "inline-assembly": "inline assembly in a CPU kernel",
           "extern-c": "only the entry point (forward/backward) may be extern \"C\" — declaring C functions "
                       "yourself reaches what the headers don't give",
           "preprocessor": REASON_PREPROCESSOR}
TORCH_RULES: tuple[tuple[str, str, str], ...] = (
    ("aten-fallback", r"\b(at|torch)\s*::\s*(matmul|mm|bmm|layer_norm|native_layer_norm\w*|rms_norm|softmax|"
                      r"log_softmax|cross_entropy\w*|nll_loss\w*|linear|conv\w*|var_mean|var|mean|sum|std)\s*\(|"
                      r"\.\s*(layer_norm|softmax|log_softmax|mean|sum|var|matmul|mm)\s*\(",
     "calls a torch operator that computes the task: the kernel must compute it itself"),
)


@dataclass(frozen=True)
class Violation:
    rule: str
    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.rule}: {self.reason} (`{self.text.strip()[:80]}`)"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    violations: tuple[Violation, ...] = ()
    verifier: str = "static"
    seconds: float = 0.0

    @property
    def reason(self) -> str | None:
        return None if self.ok else "; ".join(str(v) for v in self.violations[:5])


def check(source: str, target: str, abi: str = "c", preprocess: bool = True, task=None) -> Verdict:
    """Applies every static rule; returns all violations found. `preprocess=False` reads the raw text only
    (for tests of the token rules; the harness always preprocesses). With `task` (C ABI), the entry point's
    arguments are checked against the task's signature too (`judge.static.entry`)."""
    from kevolve.judge.build import MAX_SOURCE_BYTES
    if len(source.encode()) > MAX_SOURCE_BYTES:           # not read further: a kernel is one file of code, not data
        return Verdict(False, (Violation("size", 1, "", f"the source is {len(source.encode()) >> 10} KiB, over the cap "
                                                        f"of {MAX_SOURCE_BYTES >> 10} KiB on a kernel's source"),))
    text = normalize(source)
    code = blank_comments_and_strings(text)
    raw_lines = source.split("\n")
    found: list[Violation] = []

    def add(rule: str, lineno: int, reason: str) -> None:
        v = Violation(rule, lineno, raw_lines[lineno - 1] if 0 < lineno <= len(raw_lines) else "", reason)
        if v not in found:
            found.append(v)

    clean = directives(text, code, target, abi, add)
    if abi == "torch":
        for lineno, line in enumerate(code.split("\n"), 1):
            for name, pattern, reason in TORCH_RULES:
                if re.search(pattern, line):
                    add(name, lineno, reason)
    toks = None
    if preprocess and clean:               # a rejected include or directive: the raw tokens are enough
        try:
            toks = lex.tokenize(lex.preprocess(source, target), lex.MAIN[target])
        except lex.PreprocessError as e:
            if str(e).startswith("the preprocessed source is over"):
                add("size", 1, f"{e} (macros that expand without bound)")
            toks = None                    # the build fails the same way; still read what is there
    if toks is None:
        toks = [t for t in lex.tokenize(code) if t.kind != "directive"]
    for rule, lineno, reason in token_violations(toks, target) + reach.violations(toks):
        add(rule, lineno, reason)
    if task is not None and abi == "c":
        for rule, lineno, reason in entry.violations(toks, task, target):
            add(rule, lineno, reason)
    if not source.strip():
        found.append(Violation("empty", 1, "", "the source is empty"))
    return Verdict(not found, tuple(found))


def token_violations(toks: list, target: str) -> list[tuple[str, int, str]]:
    """(rule, line, reason) for every forbidden use in the user's tokens."""
    out: list[tuple[str, int, str]] = []
    stack: list[str] = []                          # brace kinds: "code" (a function body) or "decl"
    prev = None
    n = len(toks)
    for i, t in enumerate(toks):
        if not t.user:
            prev = None
            continue
        if t.kind == "directive":
            if re.match(r"#\s*pragma\b", t.text) and not PRAGMAS.match(t.text):
                out.append(("symbol-alias" if re.search(r"\b(weak|redefine_extname)\b", t.text) else "preprocessor",
                            t.line, f"`{t.text[:60]}` is not an allowed pragma (omp, unroll, GCC unroll/ivdep/"
                                    "diagnostic/optimize)"))
            continue
        if t.kind == "punct" and t.text == "{":
            stack.append("code" if (stack and stack[-1] == "code") or (prev is not None and prev.text in CODE_OPENERS)
                         else "decl")
        elif t.kind == "punct" and t.text == "}" and stack:
            stack.pop()
        elif t.kind == "ident":
            member = prev is not None and prev.text in (".", "->", ".*", "->*")
            qualified_std = (prev is not None and prev.text == "::" and i >= 2 and toks[i - 2].text == "std")
            if t.text in ASM:
                out.extend(_asm_problems(toks, i, prev, stack, target))
            elif t.text in ("__attribute__", "__attribute", "__declspec"):
                out.extend(_attribute_problems(toks, i + 1, t.line))
            elif t.text == "extern" and i + 1 < n and toks[i + 1].kind == "string":
                out.extend(_extern_c_problems(toks, i + 1))
            elif prev is not None and prev.text == "::" and t.text in ("exec", "eval", "eval_file", "import"):
                out.append(("python", t.line, VOCABULARY["python"][0]))
            elif not member or t.text in MEMBERS_FORBIDDEN:
                rule = forbidden(t.text, qualified_std)
                if rule:
                    out.append((rule, t.line, VOCABULARY[rule][0]))
        elif t.kind == "punct" and t.text == "[" and i + 1 < n and toks[i + 1].text == "[":
            out.extend(_attribute_problems(toks, i, t.line))
        prev = t
    return out


def _group(toks: list, i: int) -> tuple[list, int]:
    """The tokens of the balanced bracket group that opens at toks[i], and the index after it."""
    opener = toks[i].text
    closer = {"(": ")", "[": "]", "{": "}"}.get(opener)
    if closer is None:
        return [], i
    depth, j = 0, i
    while j < len(toks):
        if toks[j].text == opener:
            depth += 1
        elif toks[j].text == closer:
            depth -= 1
            if depth == 0:
                return toks[i + 1:j], j + 1
        j += 1
    return toks[i + 1:], j


def _attribute_problems(toks: list, i: int, line: int) -> list[tuple[str, int, str]]:
    inner, _ = _group(toks, i)
    out = []
    for t in inner:
        name = t.text.strip("_") if t.kind == "ident" else None
        if name in ATTRIBUTES:
            rule = ATTRIBUTES[name]
            out.append((rule, t.line, f"attribute `{t.text}`: {REASONS[rule]}"))
    return out


def _asm_problems(toks: list, i: int, prev, stack: list[str], target: str) -> list[tuple[str, int, str]]:
    t = toks[i]
    if target == "cpu":
        return [("inline-assembly", t.line, REASONS["inline-assembly"])]
    out = []
    statement = bool(stack) and stack[-1] == "code" and (prev is None or prev.text in (";", "{", "}", ":", "else", "do")
                                                          or _after_statement_header(toks, i - 1))
    if not statement:
        out.append(("symbol-alias", t.line, "asm outside a statement (an asm label after a declaration, or file-"
                                            "scope asm) binds names to symbols or emits sections"))
    j = i + 1
    while j < len(toks) and toks[j].kind == "ident":          # volatile, __volatile__, goto, inline
        j += 1
    body, _ = _group(toks, j) if j < len(toks) else ([], j)
    text = " ".join(b.value() for b in body if b.kind == "string")
    if ASM_TEXT.search(text):
        out.append(("syscall", t.line, "inline assembly that makes system calls or emits sections/symbols"))
    joined = "".join(b.value() for b in body if b.kind == "string")     # adjacent literals are one string to C
    if L2_PRIORITY_TEXT.search(joined):
        out.append(("l2-priority", t.line, VOCABULARY["l2-priority"][0]))
    return out


def _after_statement_header(toks: list, j: int) -> bool:
    """Whether toks[j] is the `)` that closes an `if`, `while`, `for` or `switch` header: asm right after it is
    the statement that header governs (`while (!done) asm volatile(...);`), not an asm label of a declarator
    (`int f(void) asm("name");`, whose `(` follows a name)."""
    if j < 0 or toks[j].text != ")":
        return False
    depth = 0
    while j >= 0:
        if toks[j].text == ")":
            depth += 1
        elif toks[j].text == "(":
            depth -= 1
            if depth == 0:
                return j > 0 and toks[j - 1].text in ("if", "while", "for", "switch")
        j -= 1
    return False


def _extern_c_problems(toks: list, i: int) -> list[tuple[str, int, str]]:
    """`extern "C"` items other than the entry point: functions, variables, blocks."""
    lit = toks[i]
    if lit.value() != "C":
        return []
    j = i + 1
    if j < len(toks) and toks[j].text == "{":
        body, _ = _group(toks, j)
        items, start, depth = [], 0, 0
        for k, b in enumerate(body):                  # split the block into top-level items
            depth += b.text in "({[" and len(b.text) == 1
            depth -= b.text in ")}]" and len(b.text) == 1
            if depth == 0 and (b.text == ";" or (b.text == "}" and b.kind == "punct")):
                items.append(body[start:k + 1])
                start = k + 1
        items.append(body[start:])
        return [p for item in items if item for p in _c_item(item, lit.line)]
    return _c_item(toks[j:], lit.line)


def _c_item(toks: list, line: int) -> list[tuple[str, int, str]]:
    """Every declarator of the one declaration `toks` starts with must be forward/backward: `extern "C" int
    forward(...), GOMP_parallel_start(...);` declares two C functions, and the second is checked like the first
    (issue 49: a second declarator once passed on the first one's name). A function's body ends the item."""
    names = [_declarator_name(d) for d in _declarators(toks)]
    bad = [n for n in names if n not in ("forward", "backward")] or ([] if names else [None])
    return [("extern-c", toks[0].line if toks else line,
             f'extern "C" declares `{name or "{ ... }"}`: ' + REASONS["extern-c"]) for name in bad]


def _declarators(toks: list) -> list[list]:
    """The declarators of the declaration `toks` starts with, each as its tokens (the first with the declaration's
    specifiers): split at every comma outside brackets, up to the `;` that ends it or the body of a function
    definition. A comma outside brackets always separates declarators (an initializer is an assignment
    expression, which holds none), and no `<` counts as a bracket: a comma in a template's arguments splits too,
    which can only reject (`int> forward(...)` names no entry point), never hide a name. A struct's body within the
    specifiers is stepped over (`struct S { ... } s, *f(void);` declares `s` and `f`)."""
    out, current, k = [], [], 0
    while k < len(toks):
        t = toks[k]
        if t.text == ";":
            break
        if t.text in ("(", "["):
            inner, after = _group(toks, k)
            current += toks[k:after]
            k = after
            continue
        if t.text == "{":
            _, after = _group(toks, k)
            initializer = bool(current) and current[-1].text == "="
            if not initializer and _declares_function(current):
                break                                     # a function definition's body: the item ends
            if initializer:
                current += toks[k:after]
            k = after                                     # a struct/enum body in the specifiers: stepped over
            continue
        if t.text == ",":
            out.append(current)
            current = []
        else:
            current.append(t)
        k += 1
    out.append(current)
    return [d for d in out if d]


def _declares_function(toks: list) -> bool:
    """Whether a declarator's tokens hold a parameter list: an identifier (or a parenthesised declarator) followed
    by `(` outside any initializer."""
    for k in range(1, len(toks)):
        if toks[k].text == "=":
            return False
        if toks[k].text == "(" and (toks[k - 1].kind == "ident" or toks[k - 1].text == ")"):
            return True
    return False


def _declarator_name(toks: list) -> str | None:
    """The name one declarator declares: the identifier before its parameter list (`int (system)(...)` and
    `int (*fp)(...)` read inside the parentheses), or before `;`, `=`, `[` or the declarator's end."""
    depth, name, last = 0, None, None
    for k, t in enumerate(toks):
        if t.text in (";", "=", "{") and depth == 0:
            break
        if t.text == "(":
            if depth == 0 and name is None:
                inner, after = _group(toks, k)          # `int (system)(...)`, `int (*fp)(...)`
                idents = [x.text for x in inner if x.kind == "ident"]
                if after < len(toks) and toks[after].text == "(" and idents and all(x.kind != "string" for x in inner):
                    return idents[-1]
                prev = toks[k - 1] if k else None
                return prev.text if prev is not None and prev.kind == "ident" else None
            depth += 1
        elif t.text == ")":
            depth -= 1
        elif t.kind == "ident" and depth == 0:
            last = t.text
            if k + 1 < len(toks) and toks[k + 1].text in (";", "=", "[", ","):
                return last
    return name or last
