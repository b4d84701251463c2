"""Reply parsing: an LLM's text in, a kernel source (or the reason there is none) out.

Two forms of reply carry a kernel:
- a whole kernel in a fenced code block (```cuda, ```cu, ```cpp, ```c++, ```c, or an unlabelled fence). Of
  several blocks, the last one that defines the entry point (`extern "C" int forward(`) is taken — a model that
  revises itself puts its final version last — and blocks in other languages (python, json, shell) are
  ignored. A reply with no fence at all is taken whole only when it is plainly a source file (it begins with a
  `#include`, a comment or a directive) and defines the entry point.
- SEARCH/REPLACE edit blocks (Aider / OpenEvolve style) applied in order to the parent:

      <<<<<<< SEARCH
      exact lines of the parent
      =======
      their replacement
      >>>>>>> REPLACE

  Each SEARCH text must occur exactly once in the text as the edits before it left it.

Guarantees: `parse_reply` never raises for any reply text; it returns a `Parsed` whose `source` is None exactly
when `failure` says why (no code, only non-kernel blocks, no entry point, an unclosed fence — a reply cut off —,
an edit whose SEARCH text occurs 0 or 2+ times, a malformed edit block, edits without a parent). Edits change
only the text they match, so everything else (knob lines included) is kept byte for byte. Not guaranteed: that
the source compiles or is correct — the verifiers and the judge decide that.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

KERNEL_LANGS = {"", "cuda", "cu", "cpp", "c++", "cxx", "cc", "c", "h", "hpp", "cuh"}
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)
_OPEN_FENCE = re.compile(r"^[ \t]*```", re.M)
_SEARCH = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH[ \t]*$")
_DIVIDER = re.compile(r"^[ \t]*={5,9}[ \t]*$")
_REPLACE = re.compile(r"^[ \t]*>{5,9}[ \t]*REPLACE[ \t]*$")


@dataclass(frozen=True)
class Parsed:
    """What a reply yields: `source` (None on failure), its form (kernel | edits | none), edits applied."""
    source: str | None
    form: str = "none"
    edits: int = 0
    failure: str | None = None


def _fail(reason: str, form: str = "none", edits: int = 0) -> Parsed:
    return Parsed(None, form, edits, reason)


def defines_entry(code: str, direction: str) -> bool:
    """Whether `code` defines `extern "C" int <direction>(` (a definition, not only a declaration)."""
    m = re.search(rf'extern\s*"C"\s*(?:(?:__attribute__\s*\(\([^;{{]*?\)\)|\w+)\s+)*?int\s+'
                  rf'{re.escape(direction)}\s*\(', code)
    if not m:
        return False
    depth, i = 0, code.find("(", m.end() - 1)
    for j in range(i, len(code)):           # the parameter list, then `{` (a definition) or `;` (a declaration)
        depth += {"(": 1, ")": -1}.get(code[j], 0)
        if depth == 0:
            rest = code[j + 1:].lstrip()
            return rest.startswith("{")
    return False


def code_blocks(text: str) -> list[tuple[str, str]]:
    """Every closed fenced block as (language tag lower-cased, body)."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def extract_kernel(text: str, direction: str) -> Parsed:
    """A whole kernel from a reply (see the module docstring for the choice among several blocks)."""
    blocks = code_blocks(text)
    kernels = [body for lang, body in blocks if lang in KERNEL_LANGS]
    defining = [body for body in kernels if defines_entry(body, direction)]
    if defining:
        return Parsed(defining[-1].rstrip() + "\n", "kernel")
    if not blocks:
        fences = len(_OPEN_FENCE.findall(text))
        if fences % 2 == 1:
            return _fail("a code block is opened and never closed (the reply was cut off?)")
        bare = text.strip()
        if re.match(r"(#|//|/\*)", bare) and defines_entry(bare, direction):
            return Parsed(bare + "\n", "kernel")
        return _fail("the reply contains no code block" + (" (text only)" if bare else " (empty reply)"))
    if not kernels:
        langs = ", ".join(sorted({lang or "unlabelled" for lang, _ in blocks}))
        return _fail(f"the reply's code blocks are not C/C++/CUDA ({langs})")
    if len(_OPEN_FENCE.findall(text)) % 2 == 1:
        return _fail("the last code block is opened and never closed (the reply was cut off?)")
    return _fail(f'no code block defines the entry point `extern "C" int {direction}(...)` '
                 f"({len(kernels)} C/C++/CUDA block{'s' if len(kernels) > 1 else ''})")


def has_edits(text: str) -> bool:
    return any(_SEARCH.match(line) for line in text.splitlines())


def edit_blocks(text: str) -> list[tuple[str, str]] | str:
    """The (search, replace) pairs of a reply in order, or the reason the blocks are malformed."""
    blocks, state, search, replace = [], None, [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if _SEARCH.match(line):
            if state is not None:
                return f"line {number}: a SEARCH marker inside an unfinished edit block"
            state, search, replace = "search", [], []
        elif _DIVIDER.match(line) and state == "search":
            state = "replace"
        elif _REPLACE.match(line):
            if state != "replace":
                return f"line {number}: a REPLACE marker without its SEARCH and ======= lines"
            blocks.append(("\n".join(search), "\n".join(replace)))
            state = None
        elif state == "search":
            search.append(line)
        elif state == "replace":
            replace.append(line)
    if state is not None:
        return "an edit block is not closed with >>>>>>> REPLACE (the reply was cut off?)"
    return blocks


def apply_edits(parent: str, text: str) -> Parsed:
    """The parent with the reply's edit blocks applied in order; a failure names the first edit that cannot."""
    blocks = edit_blocks(text)
    if isinstance(blocks, str):
        return _fail(f"malformed edit blocks: {blocks}", "edits")
    if not blocks:
        return _fail("no edit blocks found", "edits")
    source = parent
    for i, (search, replace) in enumerate(blocks, start=1):
        where = f"edit {i} of {len(blocks)}"
        if not search.strip():
            return _fail(f"{where}: the SEARCH text is empty (SEARCH for lines next to the new code)", "edits", i - 1)
        count = source.count(search)
        if count != 1:
            first = next(line.strip() for line in search.splitlines() if line.strip())[:80]
            how = "does not occur in" if count == 0 else f"occurs {count} times in"
            return _fail(f"{where}: the SEARCH text (starting `{first}`) {how} the kernel"
                         f"{' as the earlier edits left it' if i > 1 else ''}; it must occur exactly once",
                         "edits", i - 1)
        source = source.replace(search, replace, 1)
    return Parsed(source, "edits", len(blocks))


def parse_reply(text: str, direction: str, parent: str | None = None) -> Parsed:
    """A kernel from a reply: edit blocks when the reply has any (applied to `parent`), else a whole kernel.
    Without a parent (translate), edit blocks are a failure."""
    if has_edits(text):
        if parent is None:
            return _fail("the reply holds edit blocks but there is no parent kernel to apply them to", "edits")
        parsed = apply_edits(parent, text)
        if parsed.source is not None and not defines_entry(parsed.source, direction):
            return _fail(f'after the edits, the kernel no longer defines `extern "C" int {direction}(...)`',
                         "edits", parsed.edits)
        return parsed
    return extract_kernel(text, direction)
