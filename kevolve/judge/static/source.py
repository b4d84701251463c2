"""The raw text of a candidate, before any preprocessor: what the compiler's first phases see (`normalize`), the
text with comments and literals blanked (`blank_comments_and_strings`, lines and columns kept), and the checks of
directives that could smuggle code past the token rules (`directives`: includes against an allow-list per target
and ABI, `##`, `#include_next`, `#import`, macro stacking, `#line` and GNU line markers).

Guarantees: line numbers are kept through every transformation, so a reported line is the user's line.
"""
from __future__ import annotations

import re

REASON_PREPROCESSOR = ("token pasting, #import, macro stacking or line markers can assemble a forbidden name "
                       "or hide code from these rules")
C_INCLUDES = {
    "cstdint", "stdint.h", "cstddef", "stddef.h", "cmath", "math.h", "cfloat", "float.h", "climits", "limits.h",
    "limits", "cstring", "string.h", "algorithm", "type_traits", "utility", "array", "numeric", "cassert",
    "assert.h", "omp.h", "immintrin.h", "x86intrin.h", "arm_neon.h", "vector", "tuple", "functional",
    "initializer_list", "cstdlib", "stdlib.h", "cstdio", "stdio.h", "new", "memory", "atomic", "bit",
    "cfenv", "fenv.h",      # a kernel's own rounding mode: the worker restores its FPU state after each call (issue 49)
}
CUDA_INCLUDES = {
    "cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "mma.h",
    "cuda_pipeline.h", "cuda_pipeline_primitives.h", "cooperative_groups.h", "device_launch_parameters.h",
    "vector_types.h", "math_constants.h", "cuda_awbarrier.h", "crt/math_functions.h", "sm_90_rt.h",
}
CUDA_INCLUDE_PREFIXES = ("cooperative_groups/", "cub/", "cuda/", "thrust/", "cute/", "cutlass/")
TORCH_INCLUDE_PREFIXES = ("torch/", "ATen/", "c10/", "pybind11/")


def normalize(src: str) -> str:
    """What the compiler's first phases see: line splices joined (the line count kept, so reported line
    numbers stay right) and `%:` digraphs spelled `#` (so `%:define`, `%:%:` and `%:include` are checked)."""
    out: list[str] = []
    logical, joined = "", 0
    for line in src.split("\n"):
        if line.endswith("\\"):
            logical, joined = logical + line[:-1], joined + 1
            continue
        out.append(logical + line)
        out.extend([""] * joined)
        logical, joined = "", 0
    if joined:
        out.append(logical)
        out.extend([""] * (joined - 1))
    return "\n".join(out).replace("%:", "#")


def blank_comments_and_strings(src: str) -> str:
    """Replaces comments and string/char literals (raw strings too) with spaces, keeping lines and columns.
    A `'` inside a number is a digit separator (1'000), not a character literal."""
    out, i, n = [], 0, len(src)
    while i < n:
        c, nxt = src[i], src[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and nxt == "*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(_spaces(src[i:j]))
            i = j
        elif c == '"' and re.search(r"(?<![\w])(u8|[uUL])?R$", src[max(0, i - 3):i]):
            m = re.match(r'"([^ ()\\\t\n]{0,16})\(', src[i:])
            close = src.find(f"){m.group(1)}\"", i) if m else -1
            j = n if close < 0 else close + len(m.group(1)) + 2
            out.append('"' + _spaces(src[i + 1:j - 1]) + '"')
            i = j
        elif c == "'" and _in_number(src, i):
            out.append(c)
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + (src[j - 1] if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _spaces(text: str) -> str:
    return "".join(ch if ch == "\n" else " " for ch in text)


def _in_number(src: str, i: int) -> bool:
    """Is the `'` at i a digit separator: inside a token that starts with a digit, with a digit after?"""
    j = i
    while j > 0 and (src[j - 1].isalnum() or src[j - 1] in "_."):
        j -= 1
    return j < i and src[j].isdigit() and i + 1 < len(src) and src[i + 1].isalnum()


def directives(text: str, code: str, target: str, abi: str, add) -> bool:
    """Raw-text checks of preprocessor directives; returns whether none was rejected."""
    text_lines = text.split("\n")
    problems = 0
    for lineno, line in enumerate(code.split("\n"), 1):
        if "##" in line or re.search(r"^\s*#\s*(include_next|import|pragma\s+(push_macro|pop_macro))\b", line):
            add("preprocessor", lineno, REASON_PREPROCESSOR)
            problems += 1
        if re.match(r"\s*#\s*(line\b|\d)", line):
            add("preprocessor", lineno, "#line or a line marker would make the code after it look like a system "
                                        "header's")
            problems += 1
        if re.match(r"\s*#\s*include\b", line):   # a directive in code, not in a comment
            m = re.match(r"\s*#\s*include\s*([<\"])([^>\"]+)[>\"]", text_lines[lineno - 1])
            reason = (include_problem(m.group(1), m.group(2).strip(), target, abi) if m else
                      "#include must name a header in <...> (a computed include could name any file)")
            if reason:
                add("include", lineno, reason)
                problems += 1
    return problems == 0


def include_problem(kind: str, header: str, target: str, abi: str) -> str | None:
    if kind == '"':
        return f'#include "{header}": a candidate is one self-contained file'
    if header.startswith(TORCH_INCLUDE_PREFIXES):
        return None if abi == "torch" else f"<{header}>: torch headers are not allowed in the C ABI"
    if header in C_INCLUDES:
        return None
    if target == "cuda" and (header in CUDA_INCLUDES or header.startswith(CUDA_INCLUDE_PREFIXES)):
        return None
    return f"<{header}> is not on the allowed list for target={target} (see kevolve.judge.static.rules)"
