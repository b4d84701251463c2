"""The harness's own state of the worker process, put back after every call of candidate code (issue 49).

A kernel runs in the process whose harness draws its inputs, poisons its outputs and exports them with torch: what
its code sets for the process stays set when its call returns — the rounding mode, flush-to-zero and
denormals-are-zero, FPU exception masks (per thread: the calling thread's, and the OpenMP pool's threads', which a
CPU kernel shares with torch through one libgomp), and the pool's thread count (`omp_set_num_threads(1)` for small
problems, an honest pattern). Left so, torch's work in the worker computes with the kernel's settings: inputs drawn
under another rounding mode differ from the evaluator's by an ulp (a kernel rejected for "modifying" inputs it never
wrote), and the harness's fills run on one thread (its side work, which the outside clock bounds, grows). So the
worker saves that state once, before any candidate code can run (`save`, at the end of `Worker.init`), and puts it
back after every call of candidate code and of its stand-ins, outside the timed interval (`restore`): each call of
a kernel is judged on its own work, with the mode it set itself, and the next step of the harness runs with the
harness's.

How: on the CPU, the evictor's library (`judge.worker.evict`, built with OpenMP) saves and restores the calling
thread's FPU environment (`fegetenv`/`fesetenv`), the pool's thread count and dynamic adjustment, and runs a
parallel region of the saved size that puts the environment back on each of the pool's threads. Without that
library (`cpu_flush=llc`, no C compiler), and on CUDA (whose host code has no OpenMP), the calling thread's
environment through libm, and torch's thread count through torch.

Not guaranteed: pool threads past the saved thread count (a kernel's `num_threads(64)` region on a worker of
2) keep what the kernel set there — torch's regions never use them — and nothing here stops code that reached the
worker's memory from rewriting what was saved (`docs/guarantees.md`: such a kernel is bounded by the clock's checks,
not by this).
"""
from __future__ import annotations

import ctypes

FENV_BYTES = 64                  # at least sizeof(fenv_t) (28 on x86-64 glibc, 8 on AArch64)


class HarnessState:
    """What `save` saw, and `restore` to put it back after each call of candidate code."""

    def __init__(self, native=None):
        """`native`: the evictor's loaded library (`Evictor.lib`), or None."""
        import torch
        self.threads = torch.get_num_threads()
        self.native = native if native is not None and hasattr(native, "kevolve_state_restore") else None
        if self.native is not None:
            self.native.kevolve_state_save()
        self.env = ctypes.create_string_buffer(FENV_BYTES)
        self.libm = _libm()
        if self.libm is not None and self.libm.fegetenv(self.env) != 0:
            self.libm = None
        self.restores = 0

    def restore(self) -> None:
        """The saved state back on the calling thread (and, on the CPU, the OpenMP pool): after every call of candidate
        code (`Worker.check`, a session's calls: `judge.worker.session`), outside its timed interval."""
        self.restores += 1
        if self.native is not None:
            self.native.kevolve_state_restore()
            return
        if self.libm is not None:
            self.libm.fesetenv(self.env)
        import torch
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)


def _libm():
    """The C library's FPU environment calls (libm's, visible through the interpreter's own symbols), or None."""
    for name in (None, "libm.so.6"):
        try:
            lib = ctypes.CDLL(name)
            if hasattr(lib, "fegetenv") and hasattr(lib, "fesetenv"):
                return lib
        except OSError:
            continue
    return None
