"""Evicting a timed call's own bytes from the CPU caches, at a cost proportional to those bytes.

Before every timed CPU call the clock (`timing.CpuClock`) makes the call *cold*: every buffer the harness hands
the contender — its inputs, and for a kernel its outputs and workspace — is written back and evicted from every
cache level of every core, one cache line at a time (`clflushopt`, else `clflush`, on x86-64; `dc civac` on
AArch64), then fenced. What the call reads then comes from DRAM, as a GPU call's does after the L2 flush. The
cost is a few cycles per line of the call's own buffers, whatever the host's last-level cache: rewriting a
buffer twice the LLC, the older way (`timing.CpuClock(mode="llc")`), cost 2.7 ms a call on a 32 MiB L3 and
99 ms on a 300 MiB one, where a judgement of a few thousand timed calls then never ended.

The instructions come from a small C library of our own, compiled once per node by the system C compiler
into the build cache (`library()`; with OpenMP where the compiler has it, for `judge.worker.state`'s restore of
the process state a kernel may change), loaded by the worker before its confinement and before any candidate code
can run (`judge.worker.serve`), so nothing a kernel writes is on its path.

Guarantees: `Evictor.evict(tensors)` returns only once every line of those tensors' bytes was flushed and the
flushes were fenced; it counts the bytes (`Evictor.bytes`), so a test can show that the work follows the
buffers and not the host. Not guaranteed: that memory a contender allocates itself (torch's results and
temporaries, a kernel's own static tables) is cold — it is as the allocator or the last call left it, the same
for a kernel and for torch — nor that nothing else of the process is evicted (other data on the same lines is).
Where no C compiler or no supported architecture is found, `library()` is None and the clock falls back to the
LLC-sized rewrite (`timing.CpuClock`), capped, and says so in the worker's notes.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = r"""
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static int kv_line = 0, kv_opt = 0;
static void kv_detect(void) {
    unsigned a, b, c, d;
    kv_line = 64;
    if (__get_cpuid(1, &a, &b, &c, &d) && ((b >> 8) & 0xff)) kv_line = ((b >> 8) & 0xff) * 8;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) kv_opt = (b >> 23) & 1;
}
__attribute__((target("clflushopt"))) static void kv_opt_range(const char* p, const char* e) {
    for (; p < e; p += kv_line) __builtin_ia32_clflushopt((void*)p);
}
static void kv_plain_range(const char* p, const char* e) {
    for (; p < e; p += kv_line) __builtin_ia32_clflush((void*)p);
}
static void kv_range(const char* p, const char* e) { if (kv_opt) kv_opt_range(p, e); else kv_plain_range(p, e); }
static void kv_fence(void) { __builtin_ia32_mfence(); }
#elif defined(__aarch64__)
static int kv_line = 0;
static void kv_detect(void) {
    uint64_t ctr;
    __asm__ volatile("mrs %0, ctr_el0" : "=r"(ctr));
    kv_line = 4 << ((ctr >> 16) & 0xf);
}
static void kv_range(const char* p, const char* e) {
    for (; p < e; p += kv_line) __asm__ volatile("dc civac, %0" : : "r"(p) : "memory");
}
static void kv_fence(void) { __asm__ volatile("dsb ish" : : : "memory"); }
#else
#error "no cache-line flush for this architecture"
#endif

/* Flushes [ptrs[i], ptrs[i] + sizes[i]) for each i, then fences. Returns the bytes covered. */
int64_t kevolve_evict(const uint64_t* ptrs, const int64_t* sizes, int64_t n) {
    if (!kv_line) kv_detect();
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (sizes[i] <= 0) continue;
        const char* p = (const char*)(uintptr_t)(ptrs[i] & ~(uint64_t)(kv_line - 1));
        kv_range(p, (const char*)(uintptr_t)(ptrs[i] + (uint64_t)sizes[i]));
        total += sizes[i];
    }
    kv_fence();
    return total;
}

int64_t kevolve_line_bytes(void) { if (!kv_line) kv_detect(); return kv_line; }

#ifdef _OPENMP
#include <fenv.h>
#include <omp.h>
/* The harness's own state of the process, which a kernel's code may change and torch's work in the worker reads
   (issue 49; `judge.worker.state`): the FPU control state (rounding mode, flush-to-zero and denormals-are-zero,
   exception masks) of the calling thread and of the OpenMP pool's threads, which torch's parallel work shares with
   a kernel's (one libgomp), and the pool's thread count and dynamic adjustment. Saved once, before any candidate
   code can run; put back after every call of it. */
static fenv_t kv_env;
static int kv_threads = 0, kv_dynamic = 0;
int kevolve_state_save(void) {
    fegetenv(&kv_env);
    kv_threads = omp_get_max_threads();
    kv_dynamic = omp_get_dynamic();
    return kv_threads;
}
int kevolve_state_restore(void) {
    int team = 0;
    if (!kv_threads) return 0;
    if (omp_get_dynamic() != kv_dynamic) omp_set_dynamic(kv_dynamic);
    if (omp_get_max_threads() != kv_threads) omp_set_num_threads(kv_threads);
    #pragma omp parallel num_threads(kv_threads) reduction(+ : team)
    { fesetenv(&kv_env); team = 1; }
    fesetenv(&kv_env);
    return team;
}
#endif
/* Does nothing: the trivial call the evaluator times before a kernel loads (`Worker.trivial`). Called with a
   kernel's arguments, which it never reads (the caller cleans up the arguments on x86-64 and AArch64). */
int kevolve_noop(void) { return 0; }
"""

_LIB: dict[str, str | None] = {}


def library(cache_dir: str | None = None) -> str | None:
    """The evictor's shared library on this node, built on first use into the build cache (by content hash, so
    every process of the node shares one); None where it cannot be built (no C compiler, an architecture
    without a flush instruction here)."""
    from kevolve.judge.build import cache_root
    from kevolve.judge.sandbox import clean_env
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    key = hashlib.sha256((SOURCE + (compiler or "") + os.uname().machine).encode()).hexdigest()[:16]
    final = cache_root(cache_dir).parent / "native" / f"evict-{key}.so"
    if str(final) in _LIB:                               # this process tried already (None: it failed)
        return _LIB[str(final)] if _LIB[str(final)] is None or final.exists() else _forget(final, cache_dir)
    path = None
    if final.exists():
        path = str(final)
    elif compiler:
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="evict.", dir=final.parent))
        try:
            (work / "evict.c").write_text(SOURCE)
            for flags in (["-fopenmp"], []):               # the state's restore needs OpenMP; the eviction does not
                done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", *flags, "-o", str(work / "evict.so"),
                                       str(work / "evict.c"), "-lm"], capture_output=True, env=clean_env(), timeout=120)
                if done.returncode == 0:
                    break
            if done.returncode == 0:
                os.replace(work / "evict.so", final)      # atomic: a concurrent builder's copy is the same bytes
                path = str(final)
        except (OSError, subprocess.SubprocessError):
            pass
        finally:
            shutil.rmtree(work, ignore_errors=True)
    _LIB[str(final)] = path
    return path


def _forget(final: Path, cache_dir: str | None) -> str | None:
    """The library this process built was removed since (a cleared cache): built again."""
    del _LIB[str(final)]
    return library(cache_dir)


class Evictor:
    """The loaded library: `evict(tensors)` flushes their bytes from every cache level."""

    def __init__(self, path: str):
        self.lib = lib = ctypes.CDLL(path)          # also `judge.worker.state`'s restore, where built with OpenMP
        self._fn = lib.kevolve_evict
        self._fn.restype = ctypes.c_int64
        self._fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]
        lib.kevolve_line_bytes.restype = ctypes.c_int64
        self.line = int(lib.kevolve_line_bytes())
        self.bytes = 0                    # bytes flushed so far: what the work was proportional to

    def ranges(self, tensors) -> tuple:
        """The (pointers, sizes) arrays of `tensors`' bytes, made once per buffer set (a call's buffers keep their
        addresses for the whole timing session)."""
        ts = [t for t in tensors if t is not None and t.numel()]
        ptrs = (ctypes.c_uint64 * len(ts))(*[t.data_ptr() for t in ts])
        sizes = (ctypes.c_int64 * len(ts))(*[t.numel() * t.element_size() for t in ts])
        return ptrs, sizes, len(ts)

    def evict(self, ranges: tuple) -> int:
        ptrs, sizes, n = ranges
        done = int(self._fn(ptrs, sizes, n))
        self.bytes += done
        return done
