"""C and C++ tokens of preprocessed source, each tagged with the file and line it came from.

`preprocess(source, target)` runs the compiler's own preprocessor with the flags `build` uses (`g++ -E` for
cpu, `nvcc -E` for cuda: the host pass, with cuda_runtime.h included as nvcc includes it), so what the rules
read is what the compiler compiles: macros expanded, token pasting done, `_Pragma` turned into `#pragma`,
line splices and digraphs resolved by g++, not by us. `tokenize(text)` splits that output into tokens:
identifiers, punctuators (longest match, digraphs included), pp-numbers (digit separators, exponents with
signs, user-defined suffixes), string and character literals with every prefix (`u8`, `u`, `U`, `L`, raw
`R"d(...)d"`) and user-defined suffixes; line markers (`# 12 "file" 2`) set each token's file and line, and
other directives (`#pragma`) come out as one `directive` token.

Guarantees: every token of the main file is marked `user=True` with its line in the original source. Text
from headers and the command line is not lexed: each stretch of it is one `header` token (`user=False`), which
tells the rules that user code is not contiguous there. A source that does not preprocess gives `PreprocessError` with
the compiler's message (the build would fail the same way). Not guaranteed: meaning — this is lexing, not
parsing; the rules built on it (`judge.static.rules`) decide what a token sequence means.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

MAIN = {"cpu": "kernel.cpp", "cuda": "kernel.cu"}


class PreprocessError(Exception):
    """The preprocessor rejected the source (an #error, a missing header, an unterminated literal...)."""


@dataclass(frozen=True)
class Token:
    kind: str          # ident | number | string | char | punct | directive | header (headers' text, not lexed)
    text: str
    line: int          # the line in the file the token came from
    user: bool         # from the candidate's own file (not a header, not the command line)

    def value(self) -> str:
        """A string literal's contents without prefix, quotes or raw delimiters (escapes left as written)."""
        m = re.match(r'(?:u8|[uUL])?R"([^(]*)\((.*)\)\1"', self.text, re.S)
        if m:
            return m.group(2)
        m = re.match(r'(?:u8|[uUL])?"(.*)"', self.text, re.S)
        return m.group(1) if m else self.text


_PUNCT = sorted("""%:%: ... <=> <<= >>= ->* :: ## -> ++ -- << >> <= >= == != && || += -= *= /= %= &= |= ^= .* <: :>
    <% %> %: { } [ ] ( ) ; : ? . + - * / % ^ & | ~ ! = < > , #""".split(), key=len, reverse=True)
_DIGRAPH = {"<:": "[", ":>": "]", "<%": "{", "%>": "}", "%:": "#", "%:%:": "##"}
_IDENT = re.compile(r"[A-Za-z_\$\x80-\U0010FFFF][\w\$\x80-\U0010FFFF]*")
_NUMBER = re.compile(r"\.?\d(?:[eEpP][+-]|'[\w]|[\w.])*")
_PREFIX = re.compile(r'(u8|[uUL])?(R)?(["\'])')
_MARKER = re.compile(r'#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"')
_MARKER_LINE = re.compile(r"^[ \t\f\v\r]*" + _MARKER.pattern, re.M)     # a marker anywhere: at a line's start


def tokenize(text: str, main: str | None = None) -> list[Token]:
    """Tokens of preprocessed text. Line markers name the file; `main` is the user's file (None: every
    token is user code — for text that was not preprocessed)."""
    out: list[Token] = []
    i, n, line, file = 0, len(text), 1, main
    at_line_start = True
    while i < n:
        c = text[i]
        if c == "\n":
            line, i, at_line_start = line + 1, i + 1, True
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if c == "\\" and text.startswith("\\\n", i):
            i += 2
            line += 1
            continue
        user = main is None or file == main
        if at_line_start and (c == "#" or text.startswith("%:", i)):
            end = text.find("\n", i)
            end = n if end < 0 else end
            directive = text[i:end]
            m = _MARKER.match(directive)
            if m:                                   # `# 12 "file" flags`: the next line is line 12 of file
                line, file = int(m.group(1)), _marker_file(m)
                i = end + 1
                if main is not None and file != main:
                    i, line, file = _skip_header(text, i, main)
                    out.append(Token("header", "", line, False))
                continue
            out.append(Token("directive", directive.strip(), line, user))
            i = end
            continue
        at_line_start = False
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += text.count("\n", i, end)
            i = end
            continue
        m = _PREFIX.match(text, i)
        if m and (m.start() == 0 or not _is_ident_char(text[i - 1])):
            j = _literal_end(text, i, m)
            if j is not None:
                j = _suffix(text, j)
                lit = text[i:j]
                out.append(Token("char" if m.group(3) == "'" else "string", lit, line, user))
                line += lit.count("\n")
                i = j
                continue
        if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            m2 = _NUMBER.match(text, i)
            out.append(Token("number", m2.group(), line, user))
            i = m2.end()
            continue
        m3 = _IDENT.match(text, i)
        if m3:
            out.append(Token("ident", m3.group(), line, user))
            i = m3.end()
            continue
        for p in _PUNCT:
            if text.startswith(p, i):
                if p == "<:" and text.startswith("<::", i) and not text.startswith("<:::", i) \
                        and not text.startswith("<::>", i):
                    p = "<"                         # C++11: `<::` is `<` `::` unless followed by : or >
                out.append(Token("punct", _DIGRAPH.get(p, p), line, user))
                i += len(p)
                break
        else:
            out.append(Token("punct", c, line, user))   # a stray character: let the compiler complain
            i += 1
    return out


def _marker_file(m: re.Match) -> str:
    return m.group(2).encode().decode("unicode_escape")


def _skip_header(text: str, i: int, main: str) -> tuple[int, int, str]:
    """From `i`, inside a header's (or the command line's) text, to the line after the next line marker that
    returns to `main`: (position, line, file). The rules read only the user's tokens, and lexing the headers
    cost seconds per candidate (cuda_runtime.h alone is megabytes); a header's text is the toolchain's, so a
    line in it that looks like a marker is one. The end of the text if no marker returns."""
    for m in _MARKER_LINE.finditer(text, i):
        if _marker_file(m) == main:
            end = text.find("\n", m.end())
            return (len(text) if end < 0 else end + 1), int(m.group(1)), main
    return len(text), 1, ""


def _is_ident_char(c: str) -> bool:
    return c.isalnum() or c in "_$" or ord(c) > 127


def _literal_end(text: str, i: int, m: re.Match) -> int | None:
    """End of the string/char literal starting at i (after its closing quote), or None if it is not one."""
    quote, start = m.group(3), m.end()
    if m.group(2):                                   # raw string: R"delim( ... )delim"
        if quote != '"':
            return None
        d = re.match(r'([^ ()\\\t\n\v\f]{0,16})\(', text[start:start + 18])
        if not d:
            return None
        close = text.find(")" + d.group(1) + '"', start + len(d.group(1)) + 1)
        return len(text) if close < 0 else close + len(d.group(1)) + 2
    j = start
    while j < len(text) and text[j] != quote:
        if text[j] == "\n":
            return j                                  # unterminated: ends at the line (the compiler rejects it)
        j += 2 if text[j] == "\\" else 1
    return min(j + 1, len(text))


def _suffix(text: str, j: int) -> int:
    """A user-defined literal's suffix (`"x"_s`, `'c'_ch`) belongs to the literal token."""
    m = _IDENT.match(text, j)
    return m.end() if m else j


def preprocess(source: str, target: str, flags: list[str] | None = None, timeout: float = 120) -> str:
    """The host-side preprocessed text of `source`, made by the toolchain that builds it."""
    from kevolve.judge import build
    from kevolve.judge.sandbox import clean_env
    with tempfile.TemporaryDirectory(prefix="kevolve-pp-") as work:
        src = Path(work) / MAIN[target]
        src.write_text(source)
        if target == "cuda":
            nvcc = os.path.join(build.cuda_home(), "bin", "nvcc")
            cmd = [nvcc, "-E", "-std=c++17", "-Xcompiler", "-fPIC", MAIN[target]]
        else:
            cmd = ["g++", "-E", *[f for f in build.GXX_FLAGS if f not in ("-shared",)], MAIN[target]]
        cmd[1:1] = flags or []
        out = Path(work) / "preprocessed.ii"
        cmd += ["-o", str(out)]
        try:                                # bounded as a build is (`build._bounded`): a macro bomb writes no GiB
            proc = subprocess.run(build._bounded(cmd, memory=True), capture_output=True, text=True, timeout=timeout,
                                  cwd=work, env=clean_env({"CUDA_HOME": build.cuda_home()}))
        except subprocess.TimeoutExpired:
            raise PreprocessError(f"the preprocessor did not finish within {timeout:.0f} s") from None
        if proc.returncode != 0:
            if proc.returncode == -25 or "File size limit exceeded" in proc.stderr or "File too large" in proc.stderr:
                raise PreprocessError(f"the preprocessed source is over {2 * build.max_library_bytes() >> 20} MiB")
            raise PreprocessError(build.trim_errors(proc.stderr, Path(work)))
        return out.read_text(errors="replace")
