"""Every seed kernel of every task keeps its contract, on the CPU: it passes the static rules; each task has
at least two structurally different seeds per target and knobs for the knob-mutation operator to turn (one,
the plain one, for the mnist_*, GEMM and convolution tasks);
every CPU seed is correct on the whole small set for every value of every knob (the others at their
defaults; the harness accepts each: tests/judge/test_clock.py); every CUDA seed compiles with nvcc for every
knob value (`slow`, skipped without nvcc) and computes the right answer under a CPU emulator of CUDA (at its
defaults, warps forward; reversed and every knob value `slow`). A task's best/ kernels (kevolve.report.best) keep
the same contract: the static rules (tests/judge/test_rules.py), a CPU one correct on the whole small set, a CUDA one
compiled by nvcc, each with the numbers its .md records (the shipped ones are CUDA: on the GPU, tests/judge/test_gpu.py
judges each).

The emulator (below) runs each CUDA thread of a block as a fiber: `__syncthreads` and the warp shuffles are
barriers that switch fibers, warps run one at a time as far as they can (forward, then in reverse order),
`__shared__` variables are statics, blocks run one after another, kernel launches become calls. Buffers
sit between NaN guards: a read past a tensor shows up as NaN in the outputs, a write past one as a changed
guard. It checks indexing, tails, reductions, barriers and workspace use; not timing, not the memory
model of a real GPU, not resource limits (registers, shared memory per block).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

from kevolve.operators import knobs
from kevolve.task.abi import CKernel
from kevolve.judge.build import build, cuda_home
from kevolve.task import Case, Task, list_tasks, load_task
from test_tasks import worst_ratio  # the harness's tolerance test, shared
import big_tables
import mnist_tables

TASKS = list_tasks()
KEYS = {"cpu": ("cpu", "c"), "cuda": ("cuda", "c"), "torch-cuda": ("cuda", "torch"), "torch-cpu": ("cpu", "torch")}
# one plain seed per target (robust-kbench's mnist_* tasks, issue 13's GEMM and convolution tasks)
ONE_SEED = mnist_tables.TASKS | big_tables.TASKS
PAD = 64                # guard elements on each side of every buffer (a multiple of 4: keeps 16-byte alignment)
torch.set_num_threads(2)


@functools.lru_cache(maxsize=None)
def task(name: str) -> Task:
    return load_task(name)


def seed_files(keys=tuple(KEYS)) -> list[tuple[str, str, str]]:
    """(task, seeds key, file name) for every seed file the task.yaml lists under those keys."""
    return [(n, key, f) for n in TASKS for key in keys for f in task(n).seeds.get(key, ())]


def source(name: str, fname: str) -> str:
    return (task(name).dir / "seeds" / fname).read_text()


def knob_variants(keys: tuple[str, ...]) -> list[tuple[str, str, str, str]]:
    """(task, file, knob, value): every seed at its defaults ("", "") and at each other value of each knob."""
    out = []
    for name, _, fname in seed_files(keys):
        out.append((name, fname, "", ""))
        for knob in knobs.parse(source(name, fname)).values():
            out += [(name, fname, knob.name, v) for v in knob.alternatives]
    return out


def variant_source(name: str, fname: str, knob: str, value: str) -> str:
    src = source(name, fname)
    return knobs.apply(src, {knob: value}) if knob else src


SWEEP = bool(os.environ.get("KEVOLVE_SWEEP"))     # every knob value of every seed (~25 min more on 2 cores)


def swept(v, id_: str | None = None):
    """`v` as a test parameter; a non-default knob value of a seed listed third or later (the fast seeds: many
    knobs, ~20 s each under the emulator) runs only with KEVOLVE_SWEEP=1, to keep CI's default run short."""
    name, fname, knob, _ = v
    later = fname in task(name).seeds.get("cuda", ())[2:]
    skip = pytest.mark.skipif(not SWEEP, reason="knob sweep of a further seed: set KEVOLVE_SWEEP=1")
    marks = [skip] if knob and later else []
    return pytest.param(v, marks=marks, id=id_ or variant_id(v))


def variant_id(v) -> str:
    name, fname, knob, value = v
    return f"{name}/{fname}" + (f"/{knob}={value}" if knob else "")


def nvcc_missing() -> bool:
    return not Path(cuda_home(), "bin", "nvcc").exists() and shutil.which("nvcc") is None


# ---------------------------------------------------------------- calling a kernel between guards
def _guarded(shape: tuple[int, ...], dtype: torch.dtype, fill) -> tuple[torch.Tensor, torch.Tensor]:
    n = 1
    for d in shape:
        n *= d
    buf = torch.full((n + 2 * PAD,), fill, dtype=dtype)
    return buf, buf[PAD:PAD + n].view(shape)


def run_kernel(t: Task, kernel: CKernel, configs, cuda_abi: bool = False) -> list[str]:
    """Calls the kernel on each configuration twice (new contents in the same buffers), outputs and workspace
    poisoned, every buffer between NaN guards; returns what went wrong."""
    failures = []
    for c in configs:
        sizes = c.size_dict
        ins, outs, guards = {}, {}, []
        for s in t.inputs:
            shape, dtype = t.shape(s, sizes), getattr(torch, s.dtype)
            buf, view = _guarded(shape, dtype, float("nan") if dtype.is_floating_point else -(2**40))
            ins[s.name] = view
            guards.append((f"input {s.name}", buf, view))
        for s in t.outputs:
            buf, view = _guarded(t.shape(s, sizes), getattr(torch, s.dtype), float("nan"))
            outs[s.name] = view
            guards.append((f"output {s.name}", buf, view))
        nbytes = t.workspace(sizes)
        wbuf = torch.full((nbytes + 8 * PAD,), 0xFF, dtype=torch.uint8)          # 0xFF bytes: NaN floats
        ws = wbuf[4 * PAD:4 * PAD + nbytes]
        for variant in (0, 1):
            fresh = t.make_inputs(c, "cpu", variant=variant)
            for k, v in fresh.items():
                ins[k].copy_(v)
            for v in outs.values():
                v.fill_(float("nan"))
            ws.fill_(0xFF)
            stream = (None,) if cuda_abi else ()
            rc = kernel(ins, outs, sizes, ws, *stream, scalars=t.scalar_values(c))
            where = f"{c.id} (call {variant + 1})"
            if rc != 0:
                failures.append(f"{where}: returned {rc}")
                continue
            for label, buf, view in guards:
                n = view.numel()
                if buf.is_floating_point():
                    intact = bool(torch.isnan(buf[:PAD]).all() and torch.isnan(buf[PAD + n:]).all())
                else:
                    intact = bool((buf[:PAD] == -(2**40)).all() and (buf[PAD + n:] == -(2**40)).all())
                if not intact:
                    failures.append(f"{where}: wrote outside {label}")
            if not ((wbuf[:4 * PAD] == 0xFF).all() and (wbuf[4 * PAD + nbytes:] == 0xFF).all()):
                failures.append(f"{where}: wrote outside the workspace")
            for s in t.inputs:
                if not torch.equal(ins[s.name], fresh[s.name]):
                    failures.append(f"{where}: changed input {s.name}")
            up = {k: v.double() if v.is_floating_point() else v for k, v in fresh.items()}
            ratio = worst_ratio(t, [outs[s.name] for s in t.outputs], t.call_reference(up, c))
            if ratio > 1:
                failures.append(f"{where}: {ratio:.3g} x the tolerance")
    return failures


# ---------------------------------------------------------------- static rules, layout, knobs
@pytest.mark.parametrize("name,key,fname", seed_files(), ids=lambda x: str(x))
def test_every_declared_seed_exists_with_its_targets_suffix(name, key, fname):
    """(every file in a seeds folder passes the static rules: tests/judge/test_rules.py)"""
    target, _ = KEYS[key]
    assert Path(fname).suffix == {"cpu": ".cpp", "cuda": ".cu"}[target]
    assert (task(name).dir / "seeds" / fname).is_file()


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_each_task_has_two_seeds_per_target_the_plain_one_first_and_knobs(name, target):
    paths = task(name).seed_paths(target)
    if name in ONE_SEED:                             # one plain seed per target, with or without knobs
        assert paths[0].name == {"cpu": "cpu.cpp", "cuda": "cuda.cu"}[target]
        if name in big_tables.TASKS:
            assert knobs.parse(paths[0].read_text()), f"{name}: the {target} seed marks no knob"
        return
    assert len(paths) >= 2, f"{name}: one {target} seed only"
    assert paths[0].name == {"cpu": "cpu.cpp", "cuda": "cuda.cu"}[target]
    assert len({p.read_text() for p in paths}) == len(paths)
    assert any(knobs.parse(p.read_text()) for p in paths), f"{name}: no {target} seed marks a knob"


@pytest.mark.parametrize("name,key,fname", seed_files(), ids=lambda x: str(x))
def test_every_seed_knob_lists_its_current_value_and_rewrites(name, key, fname):
    src = source(name, fname)
    for knob in knobs.parse(src).values():
        assert knob.value == knob.choices[0] or knob.value in knob.choices[1:], knob
        assert knobs.parse(src)[knob.name].choices.count(knob.value) == 1
        for value in knob.alternatives:
            assert knobs.parse(knobs.apply(src, {knob.name: value}))[knob.name].value == value


# ---------------------------------------------------------------- CPU seeds: every knob value, the small set
@functools.lru_cache(maxsize=None)
def _cpu_kernel(name: str, src: str) -> CKernel:
    b = build(src, "cpu")
    assert b.ok, b.error
    return CKernel(b.lib_path, task(name), "cpu")


@pytest.mark.parametrize("v", knob_variants(("cpu",)), ids=variant_id)
def test_cpu_seed_is_correct_on_the_small_set_for_every_knob_value(v):
    """The whole small set at the defaults; for another knob value, every shape and init with the first
    seed (a knob changes how the work is split, which depends on the shapes, not on the values)."""
    name, _, knob, _ = v
    t = task(name)
    configs = t.configs("small")
    if knob:
        configs = [c for c in configs if c.seed == configs[0].seed]
    assert run_kernel(t, _cpu_kernel(name, variant_source(*v)), configs) == []


# ---------------------------------------------------------------- best/ kernels: the seeds' contract
def best_files(target: str | None = None) -> list[tuple[str, str]]:
    """(task, target) of every best/ kernel a task ships (kevolve.report.best); empty while none does."""
    return [(n, t) for n in TASKS for t in task(n).best if target in (None, t)]


@pytest.mark.parametrize("name,target", best_files(), ids=lambda x: str(x))
def test_every_best_kernel_records_its_numbers(name, target):
    from kevolve.report.best import numbers
    path = task(name).best_paths(target)[0]
    assert path.suffix == {"cpu": ".cpp", "cuda": ".cu"}[target]
    got = numbers(path.with_suffix(".md"))
    assert (got.get("task"), got.get("target")) == (name, target)
    assert isinstance(got.get("speedup"), (int, float)) and got["speedup"] > 0


@pytest.mark.parametrize("name", [n for n, _ in best_files("cpu")])
def test_cpu_best_is_correct_on_the_small_set(name):
    t = task(name)
    src = t.best_paths("cpu")[0].read_text()
    assert run_kernel(t, _cpu_kernel(name, src), t.configs("small")) == []


@pytest.mark.skipif(nvcc_missing(), reason="nvcc not found")
@pytest.mark.parametrize("name", [n for n, _ in best_files("cuda")])
def test_cuda_best_compiles(name):
    b = build(task(name).best_paths("cuda")[0].read_text(), "cuda")
    assert b.ok, b.error


# ---------------------------------------------------------------- CUDA seeds: nvcc, every knob value
@pytest.mark.slow
@pytest.mark.skipif(nvcc_missing(), reason="nvcc not found")
@pytest.mark.parametrize("v", [swept(v) for v in knob_variants(("cuda",))])
def test_cuda_seed_compiles_for_every_knob_value(v):
    b = build(variant_source(*v), "cuda")
    assert b.ok, b.error


# ---------------------------------------------------------------- CUDA seeds under the CPU emulator
EMULATOR = r'''
// Built with -fno-gnu-unique: g++ otherwise makes a static inside a template or inline function (a
// `__shared__` array of a templated kernel) one object for the whole process, shared by every emulated
// library loaded, so two knob values of one seed would write each other's shared memory.
#include <cstdint>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <vector>
#include <functional>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef void* cudaStream_t;
typedef int cudaError_t;
constexpr cudaError_t cudaSuccess = 0;
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
inline double rsqrt(double v) { return 1.0 / std::sqrt(v); }
inline float __expf(float v) { return std::exp(v); }
inline float __logf(float v) { return std::log(v); }
inline float __fdividef(float a, float b) { return a / b; }
template <class T> inline T __ldg(const T* p) { return *p; }

namespace emu {
// Fibers. On x86-64 a switch is 6 pushes, a stack swap and 6 pops (swapcontext makes a system call per
// switch for the signal mask); elsewhere ucontext.
struct Fiber { void* sp; ucontext_t ctx; int state; };   // 0 runnable, 1 at __syncthreads, 2 at a warp barrier, 3 done
static std::vector<Fiber> fibers;
static std::vector<char*> stacks;
static const size_t STACK = 256 * 1024;
static int cur = 0;
static int error = 0;
static int reverse_order = 0;
static std::function<void()>* body = nullptr;
static dim3 tid, bid, bdim, gdim;
static uint64_t shfl_buf[1024];
#if defined(__x86_64__)
extern "C" __attribute__((visibility("hidden"))) void emu_switch(void** save, void* to);
asm(".text\n.globl emu_switch\n.hidden emu_switch\n.type emu_switch,@function\nemu_switch:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
    "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n");
static void* sched_sp;
static void to_scheduler() { emu_switch(&fibers[cur].sp, sched_sp); }
static void to_fiber(unsigned i) { emu_switch(&sched_sp, fibers[i].sp); }
static void fiber_main() { (*body)(); fibers[cur].state = 3; to_scheduler(); __builtin_unreachable(); }
static void make_fiber(unsigned i) {
    uintptr_t* sp = (uintptr_t*)(((uintptr_t)stacks[i] + STACK) & ~(uintptr_t)15);
    *--sp = 0;                                  // padding: the return address sits 16-byte aligned
    *--sp = (uintptr_t)&fiber_main;
    for (int r = 0; r < 6; ++r) *--sp = 0;      // rbp rbx r12 r13 r14 r15
    fibers[i].sp = sp;
}
#else
static ucontext_t sched;
static void to_scheduler() { swapcontext(&fibers[cur].ctx, &sched); }
static void to_fiber(unsigned i) { swapcontext(&sched, &fibers[i].ctx); }
static void fiber_main() { (*body)(); fibers[cur].state = 3; }
static void make_fiber(unsigned i) {
    getcontext(&fibers[i].ctx);
    fibers[i].ctx.uc_stack.ss_sp = stacks[i];
    fibers[i].ctx.uc_stack.ss_size = STACK;
    fibers[i].ctx.uc_link = &sched;
    makecontext(&fibers[i].ctx, fiber_main, 0);
}
#endif

inline unsigned linear() { return tid.x + tid.y * bdim.x + tid.z * bdim.x * bdim.y; }
inline void wait(int state) { fibers[cur].state = state; to_scheduler(); }
static void set_tid(unsigned i) { tid = dim3(i % bdim.x, (i / bdim.x) % bdim.y, i / (bdim.x * bdim.y)); }

// One block: each warp in turn (the first first, or the last first) runs as far as it can, through its
// own warp barriers, before the next starts: a warp that races ahead into shared memory another warp
// has not read yet is caught, as far as one schedule can catch it.
static bool run_block(unsigned n) {
    while (stacks.size() < n) stacks.push_back(static_cast<char*>(std::malloc(STACK)));
    fibers.resize(n);
    for (unsigned i = 0; i < n; ++i) { make_fiber(i); fibers[i].state = 0; }
    const unsigned warps = (n + 31) / 32;
    for (;;) {
        for (unsigned wk = 0; wk < warps; ++wk) {
            const unsigned w = reverse_order ? warps - 1 - wk : wk;
            const unsigned w0 = w * 32, w1 = w0 + 32 < n ? w0 + 32 : n;
            for (;;) {
                for (unsigned k = w0; k < w1; ++k) {
                    const unsigned i = reverse_order ? w1 - 1 - (k - w0) : k;
                    if (fibers[i].state != 0) continue;
                    cur = (int)i;
                    set_tid(i);
                    to_fiber(i);
                }
                bool any = false, all = true;             // a warp barrier opens when every live lane waits at it
                for (unsigned i = w0; i < w1; ++i) {
                    if (fibers[i].state == 3) continue;
                    if (fibers[i].state == 2) any = true; else all = false;
                }
                if (!(any && all)) break;
                for (unsigned i = w0; i < w1; ++i) if (fibers[i].state == 2) fibers[i].state = 0;
            }
        }
        bool all_done = true, all_block = true;           // __syncthreads opens when every live thread waits at it
        for (unsigned i = 0; i < n; ++i) {
            if (fibers[i].state != 3) all_done = false;
            if (fibers[i].state != 3 && fibers[i].state != 1) all_block = false;
        }
        if (all_done) return true;
        if (!all_block) { error = 2; return false; }      // a deadlock: threads wait at different barriers
        for (unsigned i = 0; i < n; ++i) if (fibers[i].state == 1) fibers[i].state = 0;
    }
}

inline void launch(dim3 grid, dim3 block, std::function<void()> f) {
    const unsigned long long n = (unsigned long long)block.x * block.y * block.z;
    if (n == 0 || n > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535
        || grid.x > 2147483647u) { error = 9; return; }      // cudaErrorInvalidConfiguration
    if (error) return;
    body = &f;
    gdim = grid;
    bdim = block;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                bid = dim3(x, y, z);
                if (!run_block((unsigned)n)) return;
            }
}

template <class T> inline T exchange(T v, unsigned src_lane) {
    const unsigned me = linear();
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    shfl_buf[me] = bits;
    wait(2);
    const unsigned src = (me & ~31u) + src_lane;
    T out = v;
    if (src < bdim.x * bdim.y * bdim.z) std::memcpy(&out, &shfl_buf[src], sizeof(T));
    wait(2);
    return out;
}
}  // namespace emu

#define threadIdx (emu::tid)
#define blockIdx (emu::bid)
#define blockDim (emu::bdim)
#define gridDim (emu::gdim)
constexpr int warpSize = 32;

inline void __syncthreads() { emu::wait(1); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::wait(2); }
template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
    const unsigned lane = emu::linear() & 31u;
    return emu::exchange(v, lane % width + delta < (unsigned)width ? lane + delta : lane);
}
template <class T> inline T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
    const unsigned lane = emu::linear() & 31u;
    return emu::exchange(v, lane % width >= delta ? lane - delta : lane);
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
    const unsigned lane = emu::linear() & 31u, src = lane ^ (unsigned)mask;
    return emu::exchange(v, src / width == lane / width ? src : lane);
}
template <class T> inline T __shfl_sync(unsigned, T v, int src_lane, int width = 32) {
    const unsigned lane = emu::linear() & 31u;
    return emu::exchange(v, (lane / width) * width + ((unsigned)src_lane % width));
}
template <class T> inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <class T> inline T atomicMax(T* p, T v) { T old = *p; *p = old > v ? old : v; return old; }

inline cudaError_t cudaGetLastError() { int e = emu::error; emu::error = 0; return e; }
inline cudaError_t cudaPeekAtLastError() { return emu::error; }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t = nullptr) { std::memset(p, v, n); return 0; }
inline cudaError_t cudaMemset(void* p, int v, size_t n) { std::memset(p, v, n); return 0; }
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                      cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t = nullptr) {
    std::memmove(d, s, n);
    return 0;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return 0; }

extern "C" void emu_set_order(int reverse) { emu::reverse_order = reverse; }
'''
_CUDA_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](cuda_runtime\.h|cuda_runtime_api\.h|cuda\.h|'
                           r'device_launch_parameters\.h)[>"].*$', re.M)


def _split_top(text: str) -> list[str]:
    """`a, f(b, c), d` -> [a, f(b, c), d]: commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{<"
        depth -= ch in ")]}>"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + [cur.strip()]


def emulated_source(src: str) -> str:
    """The .cu source as C++ for the emulator: `k<T><<<grid, block, ...>>>(args)` -> emu::launch(...)."""
    src = _CUDA_INCLUDE.sub("", src)
    out, pos = [], 0
    while (i := src.find("<<<", pos)) >= 0:
        k = i
        while src[k - 1].isspace():
            k -= 1
        if src[k - 1] == ">":                     # template arguments of the kernel
            depth = 0
            while True:
                k -= 1
                depth += src[k] == ">"
                depth -= src[k] == "<"
                if depth == 0:
                    break
        while src[k - 1].isalnum() or src[k - 1] in "_:":
            k -= 1
        j = src.index(">>>", i)
        config = _split_top(src[i + 3:j])
        p = src.index("(", j)
        depth, q = 0, p
        while True:
            depth += src[q] == "("
            depth -= src[q] == ")"
            q += 1
            if depth == 0:
                break
        out += [src[pos:k], f"emu::launch(dim3({config[0]}), dim3({config[1]}), "
                            f"[&]() {{ {src[k:i].strip()}({src[p + 1:q - 1]}); }})"]
        pos = q
    return EMULATOR + "".join(out) + src[pos:]


@pytest.fixture(scope="session")
def emulator_dir() -> Path:
    """Built emulator libraries, kept across sessions (named by the hash of their source), beside the builds."""
    folder = Path(os.environ.get("KEVOLVE_CACHE", Path.home() / ".cache" / "kevolve")) / "cuda_emulator"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def emulated_kernel(name: str, src: str, folder: Path, reverse: bool) -> CKernel:
    cpp = emulated_source(src)
    lib = folder / (hashlib.sha256(cpp.encode()).hexdigest()[:20] + ".so")
    if not lib.exists():
        work = Path(tempfile.mkdtemp(dir=folder))
        (work / "k.cpp").write_text(cpp)
        proc = subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-fno-gnu-unique", "-w",
                               "-o", str(work / "k.so"), str(work / "k.cpp")], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        os.replace(work / "k.so", lib)
        shutil.rmtree(work, ignore_errors=True)
    kernel = CKernel(str(lib), task(name), "cuda")
    kernel.lib.emu_set_order(1 if reverse else 0)
    return kernel


def emulator_configs(t: Task) -> list[Case]:
    """One configuration per small shape (the first init and seed), the last init set on the first two, and
    two shapes beyond the small set: long rows that need many tiles, or huge and tiny classes (layernorm_fwd
    and rmsnorm_fwd: two more, rows of 16384 and 12290 that their cuda_rows.cu spreads over four and two
    cluster blocks, and 300 rows of 2048, more than their persistent grid takes in one pass)."""
    seen, configs = set(), []
    for c in t.configs("small"):
        if c.shape_id not in seen:
            seen.add(c.shape_id)
            configs.append(c)
    configs += [c for c in t.configs("small") if c.init == t.init_sets[-1] and c.seed == 0][:2]
    if t.sizes == ("B", "N"):
        configs += [Case((("B", 2), ("N", 300007)), t.init_sets[0], 0),
                    Case((("B", 5), ("N", 65537)), t.init_sets[-1], 1)]
        if t.name in ("layernorm_fwd", "rmsnorm_fwd"):   # cuda_rows.cu's emulated clusters, float4 and float2
            configs += [Case((("B", 2), ("N", 16384)), t.init_sets[-1], 0),
                        Case((("B", 2), ("N", 12290)), t.init_sets[0], 1)]
            # more rows than cuda_rows.cu's PERSIST grid takes in one pass (132 SMs x 2 rows): it loops
            configs.append(Case((("B", 300), ("N", 2048)), t.init_sets[-1], 0))
    elif t.sizes == ("B", "C"):
        configs += [Case((("B", 3001), ("C", 3)), t.init_sets[-1], 0),
                    Case((("B", 5), ("C", 70001)), t.init_sets[0], 1)]
    return configs


def _emulated_variants() -> list:
    """Every CUDA seed at its defaults, with warps scheduled forward and reversed; each knob value of the
    seeds beyond the plain one (whose one knob is THREADS) and of the ONE_SEED tasks' plain seeds (a tile
    shape), forward only."""
    out = []
    for v in knob_variants(("cuda",)):
        if not v[2]:
            out += [pytest.param(v, False, id=variant_id(v) + "/warps-forward"),
                    pytest.param(v, True, marks=pytest.mark.slow, id=variant_id(v) + "/warps-reversed")]
        elif v[1] != "cuda.cu" or v[0] in ONE_SEED:
            p = swept(v)
            out.append(pytest.param(v, False, marks=[*p.marks, pytest.mark.slow], id=variant_id(v)))
    return out


# the defaults, warps forward, in the default run (the only check of a CUDA seed's answers without a GPU);
# warps reversed and every knob value with `-m slow`
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.parametrize("v,reverse", _emulated_variants())
def test_cuda_seed_is_correct_under_the_cpu_emulator(v, reverse, emulator_dir):
    name, fname, knob, _ = v
    t = task(name)
    configs = emulator_configs(t)
    if fname == "cuda.cu":       # one block of THREADS fibers per row: leave out the 65536-row shapes
        configs = [c for c in configs if c.size_dict.get("B", 0) <= 8192]
    if knob:                     # the whole list at the defaults; for a knob value, every other one and the last two
        configs = configs[::2] + configs[-2:]
    kernel = emulated_kernel(name, variant_source(*v), emulator_dir, reverse)
    assert run_kernel(t, kernel, configs, cuda_abi=True) == []


# ---------------------------------------------------------------- the emulator itself catches mistakes
BROKEN = {   # layernorm_bwd's split seed with one slip each: the emulator must reject every one
    "tail read past the tile": ("j < j1; j += THREADS) add(xr[j], gr[j], weight[j]);\n    } else",
                                "j <= j1; j += THREADS) add(xr[j], gr[j], weight[j]);\n    } else"),
    "partial written past N": ("if (j >= N) return;\n    double dw = 0.0, db = 0.0;",
                               "if (j > N) return;\n    double dw = 0.0, db = 0.0;"),
    "no barrier after the warp partials": ("sh[k][warp] = v[k];\n    }\n    __syncthreads();",
                                           "sh[k][warp] = v[k];\n    }"),
    "head lanes skipped": ("if (threadIdx.x < head) add(", "if (threadIdx.x < head && false) add("),
}


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.parametrize("slip", sorted(BROKEN))
def test_the_emulator_rejects_a_broken_seed(slip, emulator_dir):
    good, bad = BROKEN[slip]
    src = source("layernorm_bwd", "cuda_split.cu")
    assert src.count(good) == 1
    t = task("layernorm_bwd")
    first = t.configs("small")[0]
    configs = [c for c in t.configs("small") if c.heldout and (c.init, c.seed) == (first.init, first.seed)][:2]
    assert {c.size_dict["N"] % 4 for c in configs} != {0}     # a row start off 16 bytes: a vector head
    failures = []
    for reverse in (False, True):
        kernel = emulated_kernel("layernorm_bwd", src.replace(good, bad), emulator_dir, reverse)
        failures += run_kernel(t, kernel, configs, cuda_abi=True)
    assert failures, f"the emulator passes a seed with {slip}"


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
def test_the_emulator_keeps_each_librarys_shared_memory_apart(emulator_dir):
    """Two tile sizes of one templated kernel loaded in one process: each uses its own `__shared__` tiles (g++'s
    unique globals would make the second library write the first one's smaller arrays)."""
    t = task("mnist_linear_relu_bwd")
    src = source("mnist_linear_relu_bwd", "cuda.cu")
    assert "template <bool MASK>" in src and "__shared__ float as[TILE]" in src
    config = t.configs("small")[:1]
    for tile in ("8", "32"):
        kernel = emulated_kernel(t.name, knobs.apply(src, {"TILE": tile}), emulator_dir, False)
        assert run_kernel(t, kernel, config, cuda_abi=True) == [], f"TILE={tile}"
