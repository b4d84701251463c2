"""Builds a candidate's source into a loadable library, cached by content.

`build(source, target, abi)` compiles with nvcc (`cuda`) or g++ (`cpu`, `-O3 -march=native -fopenmp`) for the
C ABI, or with torch.utils.cpp_extension (ninja) for the torch ABI. The compiler runs in a child process
whose environment holds no secrets. Results are cached under a key of (source, target, abi, arch, flags,
compiler version): building the same text twice compiles once, also across processes (atomic rename).

Bounds (issue 37: a correct kernel with 192 MiB of initialised data was accepted, its library cached forever):
a source over `MAX_SOURCE_BYTES` is not compiled; the compiler runs with every file it writes bounded (RLIMIT_FSIZE
at twice the library cap) and, for the C ABI, its address space bounded (`COMPILER_MEMORY`); a library over
`max_library_bytes()` (32 MiB; `KEVOLVE_MAX_LIBRARY_MB`) is a failed build that names its size and the cap, and is
not kept; the cache holds at most `max_cache_bytes()` (8 GiB; `KEVOLVE_CACHE_MAX_GB`) — after each new entry the
least recently used (built, found or installed) are removed, never one used in the last `GRACE_S` seconds (a build
is judged soon after it is made; a library already loaded stays mapped when its file goes), and never anything but
a cache entry (a folder named by a key).

Guarantees: a `Build` either has `ok=True` and a library path that exists, or `ok=False` and `error`, the
compiler's own messages trimmed to what a person or an LLM needs (paths of temporary files removed).
Not guaranteed: that the library does anything — loading and calling it is the harness's job, never this
module's (no candidate code runs in the caller's process); that the cache never exceeds its bound while more
than its worth of entries are younger than `GRACE_S`; the compiler's CPU time beyond `timeout`; the size of what
a library becomes once loaded (a CUDA fatbin is stored compressed: device data it initialises counts against
device memory, not this cap).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kevolve.judge.options import node_cache
from kevolve import ROOT
from kevolve.config import env
from kevolve.judge.sandbox import clean_env

SUFFIX = {"cuda": ".cu", "cpu": ".cpp"}
# `-cudart shared`: every CUDA runtime call the kernel makes is an undefined symbol `judge.static.symbols` checks
# (the static runtime would hide them among ~170 libc/pthread/dl imports of its own); the rpath finds the
# toolkit's runtime when the worker's torch has not already loaded one with the same soname.
NVCC_FLAGS = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo", "-cudart", "shared"]
GXX_FLAGS = ["-O3", "-march=native", "-fopenmp", "-std=c++17", "-shared", "-fPIC"]
MAX_ERROR_CHARS = 4000
MAX_SOURCE_BYTES = 1 << 20                # every seed and best kernel is under 64 KiB
COMPILER_MEMORY = 8 << 30                 # a C-ABI compiler's address space (nvcc of the largest seed: 0.3 GiB)
GRACE_S = 3600.0                          # a cache entry used this recently is never evicted
ENTRY = re.compile(r"^[0-9a-f]{24}$")     # a cache entry's folder: its key (`_key`)
UNFINISHED = re.compile(r"^[0-9a-f]{24}\.\w+$")   # a build's folder before `_publish` (mkdtemp's `<key>.xxxxxxxx`)


def max_library_bytes() -> int:
    """The largest library a build may make: `KEVOLVE_MAX_LIBRARY_MB` MiB, else 32 MiB (the largest seed's, CUDA
    for one architecture, is 2.1 MB)."""
    return env.max_library_bytes()


def max_cache_bytes() -> int:
    """What the build cache may hold: `KEVOLVE_CACHE_MAX_GB` GiB, else 8 GiB."""
    return env.cache_max_bytes()


def library_problem(lib: str | Path | None = None, size: int | None = None) -> str | None:
    """Why a built library (a file, or `size` bytes) may not be used — its size over the cap — or None."""
    size, cap = os.path.getsize(lib) if size is None else size, max_library_bytes()
    if size > cap:
        return (f"the built library is {size / (1 << 20):.1f} MiB, over the cap of {cap / (1 << 20):.0f} MiB on a "
                "kernel's library (KEVOLVE_MAX_LIBRARY_MB): a kernel that large (initialised tables, unrolled code) is "
                "refused — compute the data, or keep it small")
    return None


@dataclass(frozen=True)
class Build:
    """The outcome of one build: the library (bytes on disk at `lib_path`) or the compiler's complaint."""
    ok: bool
    key: str
    target: str
    abi: str
    lib_path: str | None = None
    module_name: str | None = None      # torch ABI: the Python module name inside the library
    error: str | None = None
    seconds: float = 0.0
    cached: bool = False


def cache_root(configured: str | None = None) -> Path:
    """Where built libraries live on this node: KEVOLVE_CACHE if set here, else the configured folder
    (`resources.cache_dir`), else ~/.cache/kevolve; libraries go in its `build/`. Resolved where the build
    or the evaluator runs, so each node of a cluster may set its own."""
    return node_cache(configured) / "build"


def install(key: str, data: bytes, configured: str | None = None) -> Path:
    """Puts a library built elsewhere (another node) into this node's cache under its key, atomically;
    returns its path. A library already there is kept (same key, same bytes)."""
    final = cache_root(configured) / key
    lib = final / "kernel.so"
    if library_problem(size=len(data)):
        raise ValueError(f"not installed: {library_problem(size=len(data))}")
    if not lib.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=final.parent))
        (work / "kernel.so").write_bytes(data)
        _publish(work, final)
        _touch(final)
        evict(final.parent, max_cache_bytes(), GRACE_S)
    _touch(final)
    return lib


def arch_name(major: int, minor: int) -> str:
    """nvcc's name for a compute capability: the architecture-specific `a` variant where it exists (sm_90a
    enables Hopper's wgmma and TMA), e.g. (9, 0) -> "90a", (8, 0) -> "80"."""
    return f"{major}{minor}" + ("a" if major in (9, 10, 12) else "")


def cuda_home() -> str:
    """CUDA_HOME / CUDA_PATH, else the toolkit holding the nvcc on PATH, else /usr/local/cuda — the first
    that has include/cuda_runtime.h (an nvcc on PATH may be a wrapper script outside the toolkit)."""
    nvcc = shutil.which("nvcc")
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                  str(Path(nvcc).resolve().parent.parent) if nvcc else None, "/usr/local/cuda"]
    for home in filter(None, candidates):
        if (Path(home) / "include" / "cuda_runtime.h").exists():
            return home
    return next(filter(None, candidates))


@lru_cache(maxsize=None)
def detect_arch() -> str:
    """The CUDA architecture to build for: KEVOLVE_CUDA_ARCH, else the visible GPU's, else 90a (H100/H200)."""
    if env.cuda_arch():
        return env.cuda_arch()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.split()
        if out:
            major, minor = out[0].strip().split(".")
            return arch_name(int(major), int(minor))
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    return "90a"


@lru_cache(maxsize=None)
def _compiler_version(exe: str) -> str:
    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return "missing"


def _key(source: str, target: str, abi: str, arch: str) -> str:
    exe = os.path.join(cuda_home(), "bin", "nvcc") if target == "cuda" else "g++"
    parts = [source, target, abi, arch, " ".join(NVCC_FLAGS if target == "cuda" else GXX_FLAGS),
             _compiler_version(exe), cuda_home() if target == "cuda" else ""]
    if abi == "torch":
        import torch
        parts.append(torch.__version__)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def build(source: str, target: str, abi: str = "c", arch: str | None = None, timeout: float = 600,
          cache_dir: str | None = None) -> Build:
    """Compiles `source` for `target` with `abi` (or returns the cached library from `cache_root(cache_dir)`)."""
    if target not in SUFFIX:
        raise ValueError(f"target must be one of {sorted(SUFFIX)}, not {target!r}")
    arch = arch or (detect_arch() if target == "cuda" else "native")
    key = _key(source, target, abi, arch)
    if len(source.encode()) > MAX_SOURCE_BYTES:
        return Build(False, key, target, abi, error=f"the source is {len(source.encode()) / 1024:.0f} KiB, over the "
                                                    f"cap of {MAX_SOURCE_BYTES >> 10} KiB on a kernel's source")
    cache = cache_root(cache_dir)
    final = cache / key
    lib = final / "kernel.so"
    if lib.exists():
        problem = library_problem(lib)             # built before the cap, or under a larger one
        if problem:
            return Build(False, key, target, abi, error=problem, cached=True)
        _touch(final)
        return Build(True, key, target, abi, str(lib), f"kevolve_{key}" if abi == "torch" else None, cached=True)
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=cache))
    src = work / f"kernel{SUFFIX[target]}"
    src.write_text(source)
    start = time.perf_counter()
    if abi == "c":
        cmd = _c_command(src, work / "kernel.so", target, arch)
    else:
        cmd = [sys.executable, "-m", "kevolve.judge.build", str(src), str(work), f"kevolve_{key}", target, arch]
    try:
        repo = str(ROOT)                                       # the torch ABI runs `python -m kevolve.judge.build`
        pythonpath = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
        proc = subprocess.run(_bounded(cmd, memory=abi == "c"), capture_output=True, text=True, timeout=timeout,
                              cwd=work, env=clean_env({"CUDA_HOME": cuda_home(), "PYTHONPATH": pythonpath}))
        ok, log = proc.returncode == 0 and (work / "kernel.so").exists(), proc.stdout + proc.stderr
        if not ok and (proc.returncode == -25 or re.search(r"File size limit exceeded|File too large", log)):
            log = (f"the compiler wrote a file over {2 * max_library_bytes() >> 20} MiB (twice the cap of "
                   f"{max_library_bytes() >> 20} MiB on a kernel's library) and was stopped: initialised tables or "
                   "unrolled code that large are refused\n" + log)
    except subprocess.TimeoutExpired:
        ok, log = False, f"the compiler did not finish within {timeout:.0f} s"
    seconds = time.perf_counter() - start
    problem = library_problem(work / "kernel.so") if ok else None
    if not ok or problem:               # failures are not cached: a broken toolchain must not poison a source
        shutil.rmtree(work, ignore_errors=True)
        return Build(False, key, target, abi, error=problem or trim_errors(log, work), seconds=seconds)
    _publish(work, final)
    _touch(final)
    evict(cache, max_cache_bytes(), GRACE_S)
    return Build(True, key, target, abi, str(lib), f"kevolve_{key}" if abi == "torch" else None, seconds=seconds)


def _c_command(src: Path, out: Path, target: str, arch: str) -> list[str]:
    if target == "cuda":
        nvcc = os.path.join(cuda_home(), "bin", "nvcc")
        return [nvcc, *NVCC_FLAGS, f"-Xlinker=-rpath={os.path.join(cuda_home(), 'lib64')}",
                f"-gencode=arch=compute_{arch},code=sm_{arch}", "-o", str(out), str(src)]
    return ["g++", *GXX_FLAGS, "-o", str(out), str(src)]


LIMITS = ("import os, resource, sys\n"
          "f, m = int(sys.argv[1]), int(sys.argv[2])\n"
          "resource.setrlimit(resource.RLIMIT_FSIZE, (f, f)); resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
          "if m: resource.setrlimit(resource.RLIMIT_AS, (m, m))\n"
          "os.execvp(sys.argv[3], sys.argv[3:])\n")


def _bounded(cmd: list[str], memory: bool) -> list[str]:
    """`cmd` under the compiler's limits, set by a small Python that then becomes it (no preexec_fn: a builder
    may have threads): every file it and its children (cc1plus, as, ld, cicc, ptxas) write at most twice the
    library cap, no core files, and with `memory` its address space at `COMPILER_MEMORY`."""
    return [sys.executable, "-S", "-c", LIMITS, str(2 * max_library_bytes()), str(COMPILER_MEMORY if memory else 0),
            *cmd]


def _touch(entry: Path) -> None:
    """Marks a cache entry used now (its folder's modification time: what `evict` orders by)."""
    try:
        os.utime(entry)
    except OSError:
        pass


def evict(cache: Path, max_bytes: int, grace_s: float = GRACE_S, now: float | None = None) -> list[str]:
    """Removes the least recently used entries of the build cache `cache` until it holds at most `max_bytes`,
    never one used in the last `grace_s` seconds; removes unfinished builds older than that. Touches nothing but
    folders named as entries are (`ENTRY`, `UNFINISHED`), so a wrong folder loses nothing. Returns the keys
    removed. Safe beside other processes doing the same (a folder already gone is skipped)."""
    now = time.time() if now is None else now
    entries, removed = [], []
    try:
        listing = [d for d in Path(cache).iterdir() if d.is_dir() and not d.is_symlink()]
    except OSError:
        return removed
    for d in listing:
        try:
            used = d.stat().st_mtime
        except OSError:
            continue
        if UNFINISHED.match(d.name) and now - used > grace_s:
            shutil.rmtree(d, ignore_errors=True)
        elif ENTRY.match(d.name):
            entries.append((used, tree_bytes(d), d))
    total = sum(size for _, size, _ in entries)
    for used, size, d in sorted(entries):
        if total <= max_bytes or now - used < grace_s:
            break
        shutil.rmtree(d, ignore_errors=True)
        total -= size
        removed.append(d.name)
    return removed


def tree_bytes(folder: Path) -> int:
    """The bytes of every file below `folder` (links not followed; a file gone meanwhile counts 0)."""
    total = 0
    for base, _, files in os.walk(folder):
        for f in files:
            try:
                total += os.lstat(os.path.join(base, f)).st_size
            except OSError:
                pass
    return total


def _publish(work: Path, final: Path) -> None:
    """Moves a finished build into place atomically; a concurrent builder of the same key may win."""
    try:
        os.rename(work, final)
    except OSError:
        shutil.rmtree(work, ignore_errors=True)


def trim_errors(log: str, work: Path | None = None) -> str:
    """The compiler's messages, with temporary paths removed and, if long, the errors kept first."""
    if work is not None:
        log = log.replace(str(work) + "/", "").replace(str(work), ".")
    lines = [ln for ln in log.splitlines()
             if ln.strip() and not ln.startswith(("ninja: build stopped", "[", "FAILED:"))]
    if sum(len(ln) + 1 for ln in lines) > MAX_ERROR_CHARS:
        errors = [i for i, ln in enumerate(lines) if re.search(r"\berror\b", ln, re.I)]
        keep = sorted({j for i in errors[:12] for j in range(max(0, i - 1), min(len(lines), i + 3))})
        lines = [lines[j] for j in keep] or lines[:40]
    text = "\n".join(lines)
    return text[:MAX_ERROR_CHARS] + ("\n... (truncated)" if len(text) > MAX_ERROR_CHARS else "")


def _torch_extension_main(src: str, work: str, name: str, target: str, arch: str) -> None:
    """Child-process entry: builds a torch extension with ninja, then renames it to kernel.so."""
    if target == "cuda":                      # "90a" -> "9.0a", "100" -> "10.0"
        digits, suffix = arch.rstrip("a"), "a" if arch.endswith("a") else ""
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{digits[:-1]}.{digits[-1]}{suffix}"
    from torch.utils import cpp_extension
    build_dir = Path(work) / "ext"
    build_dir.mkdir()
    cflags = ["-O3", "-fopenmp"] if target == "cpu" else ["-O3"]
    sources = [src]
    if target == "cpu" and src.endswith(".cu"):
        raise SystemExit("a .cu source needs target=cuda")
    cpp_extension.load(name=name, sources=sources, build_directory=str(build_dir), verbose=False,
                       extra_cflags=cflags, extra_ldflags=["-fopenmp"] if target == "cpu" else [],
                       extra_cuda_cflags=["-O3"], with_cuda=target == "cuda", is_python_module=True)
    built = build_dir / f"{name}.so"
    os.rename(built, Path(work) / "kernel.so")


if __name__ == "__main__":
    _torch_extension_main(*sys.argv[1:6])
