"""Static rules: reject a candidate before any build, with the rule and the line that broke it.

A kernel is one source file that computes; it has no business starting threads or processes, touching files,
sockets or the environment, loading libraries, making system calls, or (in the C ABI) reaching into torch.
The rules run on the source with comments and string literals blanked (so a rule can't be dodged by, nor
trip over, a comment), and on the raw text for preprocessor tricks (token pasting that could assemble a
forbidden name). Includes are checked against an allow-list per target and ABI.

Guarantees: `check(source, target, abi)` returns a `Verdict`; `ok=False` carries every violated rule with
its reason and line number. Not guaranteed: that a kernel which passes is harmless — the harness still runs
it in a separate process with no secrets and a timeout.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# (rule name, pattern on code with comments/strings blanked, reason)
RULES: tuple[tuple[str, str, str], ...] = (
    ("thread", r"\bstd\s*::\s*(thread|jthread|async)\b|\bpthread_\w+|\bthrd_create\b|\bclone\s*\(",
     "starts a thread: work outside the call escapes timing and correctness checks (use OpenMP or CUDA)"),
    ("process", r"(?<![\w.>])(fork|vfork|execl|execlp|execle|execv|execvp|execvpe|execve|fexecve|execveat|system|"
                r"popen|posix_spawn\w*|daemon)\s*\(",
     "starts or replaces a process"),
    ("file", r"(?<![\w.>])(fopen|freopen|fdopen|open|openat|creat|unlink|unlinkat|mkdir|rmdir|opendir|readlink|"
             r"truncate|ftruncate|stat|lstat|fstat|access|chmod|chown|symlink|link)(64)?\s*\(|"
             r"(?<![\w.>])(read|write|pread|pwrite|readv|writev|close|lseek|dup|dup2|dup3|fcntl|ioctl|pipe|pipe2|"
             r"sendfile|splice|tee|fsync|fdatasync)(64)?\s*\(|"
             r"(?<!std::)(?<![\w.>])(remove|rename)\s*\(|"
             r"\bstd\s*::\s*[io]?fstream\b|\b[io]?fstream\b|\bstd\s*::\s*filesystem\b|\bFILE\s*\*",
     "touches files: a kernel reads only its arguments"),
    ("socket", r"(?<![\w.>])(socket|connect|bind|listen|accept|sendto|recvfrom|getaddrinfo|gethostbyname)\s*\(",
     "opens a network connection"),
    ("environment", r"\b(getenv|secure_getenv|setenv|putenv|unsetenv|clearenv|_*environ)\b",
     "reads or changes the environment (which holds no secrets, but a kernel has no use for it)"),
    ("dynamic-loading", r"\b(dlopen|dlsym|dlmopen|dlvsym)\b", "loads code at run time"),
    ("syscall", r"\bsyscall\b|\bsysenter\b|\bint\s*\$?0x80\b|\b__NR_\w+", "makes a raw system call"),
    ("signal", r"(?<![\w.>])(signal|sigaction|raise|kill|setjmp|longjmp|alarm|ptrace)\s*\(",
     "handles or sends signals"),
    ("memory-mapping", r"(?<![\w.>])(mmap|munmap|mprotect|shm_open|shmget|shmat|madvise)\s*\(",
     "maps memory outside the harness's buffers"),
    ("process-exit", r"(?<![\w.>])(exit|_exit|_Exit|abort|quick_exit|atexit|at_quick_exit)\s*\(",
     "ends or hooks the process; return a nonzero status instead"),
    ("constructor", r"__attribute__\s*\(\(\s*(constructor|destructor|init_priority)",
     "runs code at load time, outside the harness's call"),
    ("symbol-alias", r"\b(weakref|alias|ifunc|symver)\s*\(|\)\s*(__asm__|__asm|asm)\s*\(",
     "binds a name to another symbol (a way to reach C functions without declaring them)"),
    ("host-memory", r"\bcudaMallocManaged\b|\bcudaHostAlloc\b|\bcudaMallocHost\b|\bcudaHostRegister\b",
     "allocates managed or pinned host memory; use the workspace the harness passes"),
    ("device-reset", r"\bcudaDeviceReset\b|\bcudaSetDevice\b|\bcudaDeviceSetLimit\b|\bcudaSetDeviceFlags\b",
     "changes device-wide state that the harness owns"),
    ("python", r"\bPy[A-Z]\w*\s*\(|\bpybind11\s*::\s*(module|exec|eval|import)",
     "calls into the Python interpreter"),
)
TORCH_RULES: tuple[tuple[str, str, str], ...] = (
    ("aten-fallback", r"\b(at|torch)\s*::\s*(matmul|mm|bmm|layer_norm|native_layer_norm\w*|rms_norm|softmax|log_softmax|"
                      r"cross_entropy\w*|nll_loss\w*|linear|conv\w*|var_mean|var|mean|sum|std)\s*\(|"
                      r"\.\s*(layer_norm|softmax|log_softmax|mean|sum|var|matmul|mm)\s*\(",
     "calls a torch operator that computes the task: the kernel must compute it itself"),
)

C_INCLUDES = {
    "cstdint", "stdint.h", "cstddef", "stddef.h", "cmath", "math.h", "cfloat", "float.h", "climits", "limits.h",
    "limits", "cstring", "string.h", "algorithm", "type_traits", "utility", "array", "numeric", "cassert",
    "assert.h", "omp.h", "immintrin.h", "x86intrin.h", "arm_neon.h", "vector", "tuple", "functional",
    "initializer_list", "cstdlib", "stdlib.h", "cstdio", "stdio.h", "new", "memory", "atomic", "bit",
}
CUDA_INCLUDES = {
    "cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "mma.h",
    "cuda_pipeline.h", "cuda_pipeline_primitives.h", "cooperative_groups.h", "device_launch_parameters.h",
    "vector_types.h", "math_constants.h", "cuda_awbarrier.h", "crt/math_functions.h", "sm_90_rt.h",
}
CUDA_INCLUDE_PREFIXES = ("cooperative_groups/", "cub/", "cuda/", "thrust/", "cute/", "cutlass/")
TORCH_INCLUDE_PREFIXES = ("torch/", "ATen/", "c10/", "pybind11/")


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
            out.append(" " * (j - i)); i = j
        elif c == "/" and nxt == "*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(_spaces(src[i:j])); i = j
        elif c == '"' and re.search(r"(?<![\w])(u8|[uUL])?R$", src[max(0, i - 3):i]):
            m = re.match(r'"([^ ()\\\t\n]{0,16})\(', src[i:])
            close = src.find(f"){m.group(1)}\"", i) if m else -1
            j = n if close < 0 else close + len(m.group(1)) + 2
            out.append('"' + _spaces(src[i + 1:j - 1]) + '"'); i = j
        elif c == "'" and _in_number(src, i):
            out.append(c); i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + (src[j - 1] if j - i >= 2 else "")); i = j
        else:
            out.append(c); i += 1
    return "".join(out)


def _spaces(text: str) -> str:
    return "".join(ch if ch == "\n" else " " for ch in text)


def _in_number(src: str, i: int) -> bool:
    """Is the `'` at i a digit separator: inside a token that starts with a digit, with a digit after?"""
    j = i
    while j > 0 and (src[j - 1].isalnum() or src[j - 1] in "_."):
        j -= 1
    return j < i and src[j].isdigit() and i + 1 < len(src) and src[i + 1].isalnum()


def check(source: str, target: str, abi: str = "c") -> Verdict:
    """Applies every static rule; returns all violations found."""
    text = normalize(source)
    code = blank_comments_and_strings(text)
    lines, raw_lines = code.split("\n"), source.split("\n")
    text_lines = text.split("\n")
    found: list[Violation] = []

    def add(rule: str, lineno: int, reason: str) -> None:
        found.append(Violation(rule, lineno, raw_lines[lineno - 1] if lineno - 1 < len(raw_lines) else "", reason))

    rules = RULES + (TORCH_RULES if abi == "torch" else ())
    if target == "cpu":
        rules += (("inline-assembly", r"\b(asm|__asm__|__asm)\b", "inline assembly in a CPU kernel"),)
    for lineno, line in enumerate(lines, 1):
        for name, pattern, reason in rules:
            if re.search(pattern, line):
                add(name, lineno, reason)
        if "##" in line or re.search(r"^\s*#\s*(include_next|import|pragma\s+(push_macro|pop_macro))\b", line):
            add("preprocessor", lineno, "token pasting, #import or macro stacking can assemble a forbidden name")
        if re.match(r"\s*#\s*include\b", line):   # a directive in code, not in a comment
            m = re.match(r"\s*#\s*include\s*([<\"])([^>\"]+)[>\"]", text_lines[lineno - 1])
            reason = (_include_problem(m.group(1), m.group(2).strip(), target, abi) if m else
                      "#include must name a header in <...> (a computed include could name any file)")
            if reason:
                add("include", lineno, reason)
    for lineno, name in _foreign_declarations(code):
        add("extern-c", lineno, f'extern "C" declares `{name}`: only the entry point (forward/backward) may be '
                                "extern \"C\" — declaring C functions yourself reaches what the headers don't give")
    if not source.strip():
        found.append(Violation("empty", 1, "", "the source is empty"))
    return Verdict(not found, tuple(found))


def _foreign_declarations(code: str) -> list[tuple[int, str]]:
    """extern "C" items other than `forward`/`backward` (functions, variables, blocks)."""
    out = []
    for m in re.finditer(r'\bextern\s*"\s*"', code):
        rest = code[m.end():]
        stop = re.search(r"[({;]", rest)
        head = rest[:stop.start()] if stop else rest
        names = re.findall(r"[A-Za-z_]\w*", head)
        name = names[-1] if names else "{ ... }"
        if not stop or stop.group() != "(" or name not in ("forward", "backward"):
            out.append((code.count("\n", 0, m.start()) + 1, name))
    return out


def _include_problem(kind: str, header: str, target: str, abi: str) -> str | None:
    if kind == '"':
        return f'#include "{header}": a candidate is one self-contained file'
    if header.startswith(TORCH_INCLUDE_PREFIXES):
        return None if abi == "torch" else f"<{header}>: torch headers are not allowed in the C ABI"
    if header in C_INCLUDES:
        return None
    if target == "cuda" and (header in CUDA_INCLUDES or header.startswith(CUDA_INCLUDE_PREFIXES)):
        return None
    return f"<{header}> is not on the allowed list for target={target} (see kevolve.judge.rules)"
