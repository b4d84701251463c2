"""Issue 37's attacks (parts 3-5), in our words: native code reaching what it may not call, threads the confinement
missed, attempts that left no trace, a library nothing bounded. Each is rejected by the layer meant for it, each
beside an honest twin that is still accepted, on the CPU (judged here) and CUDA (the static and symbol layers and the
builds run here; the `gpu` tests judge whole on a GPU).

- `walks_from_printf.cpp`: the issue's attack — from printf's address to libc's symbol table, dl_iterate_phdr and
  CPython's PyRun_SimpleString, to divide its own clock samples. The static rules reject it (`judge.static.reach`), and
  built without them the symbol check (printf's address taken as data). Twin: `HONEST_TWIN`, which prints, checks
  its buffers' alignment through integers and launches or calls through a function pointer.
- `slows_torch.cpp`: written after reading both static layers, it walks past them (its own PLT slot, names by
  hash): the layers' limit, asserted here; what it gains is nothing (`test_inprocess.py`, and `gpu` below).
- `threads_probe.cpp`: every thread of the worker carries every filter and none predates the confinement (two of
  four had no filter before: a parent watcher and numpy's OpenBLAS server).
- `environ_probe.cpp`: reads other processes' environments; contained (nothing leaked) and, since issue 37, rejected
  naming it (`judge.evaluator.evidence`). Twin: the same probe reading only its own /proc/self/status.
- `own_filter.cpp`: a seccomp filter of its own, to answer its refused calls itself; refused, named.
- a host thread started by a CUDA kernel after it loaded: the seal refuses it there (`gpu`); twins: the honest CUDA
  kernels of `test_cuda.py` that use streams, events, graphs and clusters, judged on a GPU with the same seal.
- a 192 MiB initialised table: the build is refused naming the cap (CPU, and CUDA host code); twin: a 64 KiB one.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kevolve.judge import build as builder
from kevolve.judge.options import Options
from kevolve.judge import protocol
from kevolve.judge.static import rules, symbols
from kevolve.judge.evaluator.harness import evaluate, judge

from test_cpu import FAST, HERE, TINY, honest_next, kernel  # noqa: F401  (fixtures `tiny`, `reuse`: conftest.py)
from test_cuda import STRICT, refused
from reach_python import host_parts, walk_cuda

pytestmark = pytest.mark.usefixtures("private_build_cache")   # tests/conftest.py
nvcc = pytest.mark.skipif(not Path(builder.cuda_home(), "bin", "nvcc").exists(), reason="needs nvcc")
LIBC = (HERE / "cpu" / "_libc.h").read_text()


def probe(name: str, defines: str = "") -> str:
    """A probe of `cpu/` with `_libc.h` inlined (built past the rules: libc reached from `stdout`)."""
    return defines + (HERE / "cpu" / name).read_text().replace('#include "_libc.h"', LIBC)


def probed(ev) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"PROBE (\w+)=(-?\d+)", ev.log)}


HONEST_TWIN = "#include <cstdio>\n" + kernel(
    prelude="static float scale(float v) { return v; }\nstatic float twice(float v) { return 2 * v; }\n"
            "static float table[1 << 14] = {1.f};",
    before="float (*pick)(float) = N > 0 ? scale : twice;\n"
           "    if (((uintptr_t)x & 15) == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0) table[1] = pick(1.f);\n"
           "    if (B < 0) fprintf(stderr, \"B=%ld N=%ld\\n\", (long)B, (long)N);",
    after="    out[0] = out[0] * table[0];")


# ------------------------------------------------------------------ reach by address: the static layers
def test_the_walk_from_printf_is_rejected_by_the_static_rules():
    verdict = rules.check((HERE / "cpu" / "walks_from_printf.cpp").read_text(), "cpu")
    assert {"function-address", "library-walk", "symbol-by-name"} <= {v.rule for v in verdict.violations}, \
        verdict.reason


def test_the_walk_from_printf_built_past_the_rules_is_rejected_before_load(tiny, reuse):
    built = builder.build((HERE / "cpu" / "walks_from_printf.cpp").read_text(), "cpu")
    assert built.ok, built.error
    ev = judge(tiny, built.lib_path, FAST, reuse=reuse)
    assert not ev.correct and ev.stage == "symbols", (ev.stage, ev.failure)
    assert "takes the address of `printf` as data" in ev.failure, ev.failure
    honest_next(tiny, reuse)


def test_the_honest_twin_passes_both_static_layers_and_is_correct(tiny):
    assert rules.check(HONEST_TWIN, "cpu").ok, rules.check(HONEST_TWIN, "cpu").reason
    built = builder.build(HONEST_TWIN, "cpu")
    assert built.ok and symbols.check(built.lib_path, "cpu") is None, built.error
    ev = evaluate(tiny, HONEST_TWIN, FAST)
    assert ev.correct, ev.failure


def test_the_walk_past_both_static_layers_passes_them():
    """The limit of the static layers, kept as a test: slows_torch.cpp reaches CPython with no rule or symbol
    seeing it (what it gains by that, nothing: test_inprocess.py)."""
    source = (HERE / "cpu" / "slows_torch.cpp").read_text()
    assert rules.check(source, "cpu").ok, rules.check(source, "cpu").reason
    built = builder.build(source, "cpu")
    assert built.ok and symbols.check(built.lib_path, "cpu") is None


# ------------------------------------------------------------------ threads the confinement missed
def test_every_thread_of_the_worker_is_confined(tiny):
    from kevolve.judge.evaluator.process import WorkerProcess
    built = builder.build(probe("threads_probe.cpp"), "cpu")
    assert built.ok, built.error
    ev = judge(tiny, built.lib_path, FAST)
    got = probed(ev)
    assert ev.correct, ev.failure                         # it tries nothing the confinement refuses
    assert got["threads"] >= 1 and got["fewest_filters"] == got["most_filters"] >= 2, got
    w = WorkerProcess(FAST)                               # and no thread predates the confinement
    try:
        info = w.call(protocol.Init(task_dir=str(tiny.dir), lib=built.lib_path, abi="c", target="cpu", module=None,
                                    exchange=w.tmp, load=False), 120)
    finally:
        w.close()
    assert "threads" not in info.confinement["missing"], info.confinement["missing"]


# ------------------------------------------------------------------ an attempt is evidence
def test_reading_other_processes_environments_is_rejected_naming_it(tiny, reuse):
    built = builder.build(probe("environ_probe.cpp"), "cpu")
    assert built.ok, built.error
    ev = judge(tiny, built.lib_path, FAST, reuse=reuse)
    got = probed(ev)
    assert got["leaked"] == 0 and got["own_status"] > 0, got            # contained, as before
    assert not ev.correct and ev.stage == "confinement", (ev.stage, ev.failure)
    assert re.search(r"openat /proc/\d+/environ: another process's environ", ev.failure), ev.failure
    assert "; and:" not in ev.failure, ev.failure          # its answers were right: the attempt alone rejects it
    honest_next(tiny, reuse)


def test_the_twin_reading_only_its_own_status_is_accepted(tiny, reuse):
    built = builder.build(probe("environ_probe.cpp", "#define OTHERS 0\n"), "cpu")
    assert built.ok, built.error
    ev = judge(tiny, built.lib_path, FAST, reuse=reuse)
    got = probed(ev)
    assert ev.correct, ev.failure
    assert got["opened"] == 0 and got["own_status"] > 0, got


def test_a_seccomp_filter_of_its_own_is_refused_and_named(tiny, reuse):
    built = builder.build(probe("own_filter.cpp"), "cpu")
    assert built.ok, built.error
    ev = judge(tiny, built.lib_path, FAST, reuse=reuse)
    got = probed(ev)
    assert got["listener"] < 0 and got["via_prctl"] < 0 and got["fork"] < 0, got
    assert not ev.correct and ev.stage == "confinement", (ev.stage, ev.failure)
    assert "seccomp: a seccomp filter of its own" in ev.failure and "prctl: a seccomp filter" in ev.failure, \
        ev.failure
    honest_next(tiny, reuse)


# ------------------------------------------------------------------ bounded builds
def table_kernel(mib: float) -> str:
    """The honest kernel with an initialised table of `mib` MiB that it reads."""
    return kernel(prelude=f"static float table[{int(mib * (1 << 18))}] = {{1.f}};",
                  before="if (N < 0) table[1] = 2.f;", after="    out[0] *= table[0];")


def test_a_192_mib_table_is_not_built_and_a_small_one_is_judged(tiny):
    big = builder.build(table_kernel(192), "cpu")
    assert not big.ok and big.lib_path is None
    assert re.search(r"the compiler wrote a file over 64 MiB \(twice the cap of 32 MiB on a kernel's library\)",
                     big.error), big.error
    ev = evaluate(tiny, table_kernel(1 / 16), FAST)
    assert ev.correct, ev.failure


# ------------------------------------------------------------------ CUDA: the static layers and builds, here
def cuda(prelude: str = "", before: str = "") -> str:
    from test_cuda import LAUNCH, hostile
    return hostile(prelude, before=before, launch=LAUNCH)


def cuda_probe(name: str, defines: str = "") -> str:
    """A CPU probe's attack run by the honest CUDA seed's host code on its first call (as `test_confinement_on_gpu`)."""
    from test_cuda import HONEST, LAUNCH
    source = probe(name, defines)
    body = source.split('extern "C" int forward', 1)[0]
    attack = source.split("if (!probed) {", 1)[1].rsplit("    layernorm(x, weight, bias, out, B, N, eps);", 1)[0]
    src = HONEST.replace("#include <cuda_runtime.h>", "#include <cuda_runtime.h>\n" + body, 1)
    return src.replace(LAUNCH, "if (!probed) {" + attack + "\n" + LAUNCH, 1)


WALK_CUDA = host_parts((HERE / "cpu" / "walks_from_printf.cpp").read_text())
SLOWS_CUDA = host_parts((HERE / "cpu" / "slows_torch.cpp").read_text())


HONEST_TWIN_CUDA = cuda("#include <cstdio>", before=(
    "    auto launch = N > 0 ? layernorm_rows : layernorm_rows;\n"
    "    cudaFuncSetAttribute((const void*)launch, cudaFuncAttributeMaxDynamicSharedMemorySize, 0);\n"
    "    if (((uintptr_t)x & 15) == 0 && B < 0) fprintf(stderr, \"aligned\\n\");"))


@nvcc
def test_cuda_walk_from_printf_is_rejected_by_both_static_layers():
    source = walk_cuda(WALK_CUDA)
    verdict = rules.check(source, "cuda")
    assert {"function-address", "library-walk", "symbol-by-name"} <= {v.rule for v in verdict.violations}, \
        verdict.reason
    built = builder.build(source, "cuda")
    assert built.ok, built.error
    assert "takes the address of `printf` as data" in (symbols.check(built.lib_path, "cuda") or "")


@nvcc
def test_cuda_honest_twin_passes_both_static_layers():
    assert rules.check(HONEST_TWIN_CUDA, "cuda").ok, rules.check(HONEST_TWIN_CUDA, "cuda").reason
    built = builder.build(HONEST_TWIN_CUDA, "cuda")
    assert built.ok and symbols.check(built.lib_path, "cuda") is None, built.error


@nvcc
def test_cuda_walk_past_both_static_layers_passes_them():
    source = walk_cuda(SLOWS_CUDA)
    assert rules.check(source, "cuda").ok, rules.check(source, "cuda").reason
    built = builder.build(source, "cuda")
    assert built.ok and symbols.check(built.lib_path, "cuda") is None, built.error


@nvcc
def test_cuda_192_mib_host_table_is_not_built_and_a_small_one_is():
    big = builder.build(cuda("static float table[192 << 18] = {1.f};", before="if (N < 0) out[0] = table[N & 1];"),
                        "cuda")
    assert not big.ok and "the compiler wrote a file over 64 MiB" in big.error, big.error
    small = builder.build(cuda("static float table[1 << 14] = {1.f};", before="if (N < 0) table[1] = 1.f;"), "cuda")
    assert small.ok and symbols.check(small.lib_path, "cuda") is None, small.error


@nvcc
@pytest.mark.parametrize("name", ["threads_probe.cpp", "environ_probe.cpp", "own_filter.cpp"])
def test_cuda_probes_build_past_the_symbol_check(name):
    """The GPU tests below judge these; here, that they build and that only the rules stand in their way."""
    source = cuda_probe(name)
    assert not rules.check(source, "cuda").ok
    built = builder.build(source, "cuda")
    assert built.ok and symbols.check(built.lib_path, "cuda") is None, built.error


# ------------------------------------------------------------------ CUDA: judged whole, on a GPU
HOST_THREAD = cuda_probe("threads_probe.cpp").replace(
    "        printf(\"PROBE threads=",
    "        unsigned long th = 0;\n"
    "        int made = ((int (*)(unsigned long*, const void*, void* (*)(void*), void*))libc_fn(\"pthread_create\"))"
    "(&th, nullptr, [](void*) -> void* { return nullptr; }, nullptr);\n"
    "        if (made == 0) ((int (*)(unsigned long, void**))libc_fn(\"pthread_join\"))(th, nullptr);\n"
    "        printf(\"PROBE thread=%d\\n\", made);\n"
    "        printf(\"PROBE threads=", 1)


def _gpu():
    import torch
    return pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def on_gpu():
    """Judges a CUDA source built directly (past the rules), in one evaluator; `timed`: eager baseline too."""
    from kevolve.judge.evaluator.reuse import Reuse
    from kevolve.task import load_task
    task = load_task(TINY)
    # the CUDA confinement as shipped (`Options.strict_cuda`; KEVOLVE_TEST_STRICT_CUDA=0: the driver started early)
    plain = Options(target="cuda", shapes="small", time_kernel=False, timeout=60, strict_cuda=STRICT)
    timed = Options(target="cuda", shapes="small", baselines=("eager", "compile"), reps=30, calls=5, timeout=120,
                    strict_cuda=STRICT)
    reuses = {False: Reuse(plain, reference_bytes=1 << 28, baseline_refresh_s=0),
              True: Reuse(timed, reference_bytes=1 << 28, baseline_refresh_s=0)}

    def run(source: str, time_it: bool = False):
        built = builder.build(source, "cuda")
        assert built.ok, built.error
        return judge(task, built.lib_path, timed if time_it else plain, reuse=reuses[time_it])
    yield run
    for r in reuses.values():
        r.close()


@pytest.mark.gpu
@_gpu()
def test_on_gpu_every_thread_is_confined_and_the_seed_is_accepted(on_gpu):
    """CUDA's driver starts its threads after the confinement now: every thread carries every filter."""
    from test_cuda import HONEST
    ev = on_gpu(cuda_probe("threads_probe.cpp"))
    got = probed(ev)
    assert ev.correct, ev.failure
    assert got["fewest_filters"] == got["most_filters"] >= 2, got
    assert on_gpu(HONEST).correct


@pytest.mark.gpu
@_gpu()
def test_on_gpu_a_host_thread_after_load_is_refused_and_named(on_gpu):
    """With `strict_cuda` the CUDA seal refuses new threads (a kernel needs none; work on a thread outside the call
    escapes the clock): pthread_create fails, the kernel still computes, and the verdict names the attempt."""
    if not STRICT:
        pytest.skip("strict_cuda is off: a CUDA worker may start threads after the seal (docs/guarantees.md)")
    ev = on_gpu(HOST_THREAD)
    got = probed(ev)
    assert got["thread"] != 0, got
    assert not ev.correct and ev.stage == "confinement" and "clone of a thread" in ev.failure, (ev.stage, ev.failure)
    assert "; and:" not in ev.failure, ev.failure


@pytest.mark.gpu
@_gpu()
def test_on_gpu_reading_other_environments_is_rejected_and_its_twin_accepted(on_gpu):
    ev = on_gpu(cuda_probe("environ_probe.cpp"))
    got = probed(ev)
    assert got["leaked"] == 0, got
    text = refused(ev)
    assert re.search(r"/proc/\d+/environ: another process's environ", text), text
    twin = on_gpu(cuda_probe("environ_probe.cpp", "#define OTHERS 0\n"))
    assert twin.correct, twin.failure


@pytest.mark.gpu
@_gpu()
def test_on_gpu_a_filter_of_its_own_is_refused_and_named(on_gpu):
    refused(on_gpu(cuda_probe("own_filter.cpp")), "a seccomp filter of its own")


@pytest.mark.gpu
@_gpu()
def test_on_gpu_honest_kernels_timed_against_compiled_baselines_are_accepted(on_gpu):
    """The evidence blames nothing the harness, torch.compile or the CUDA runtime does, before or after the kernel
    loads: the seed and the honest twin, timed against eager and torch.compile, are accepted."""
    from test_cuda import HONEST
    for source in (HONEST, HONEST_TWIN_CUDA):
        ev = on_gpu(source, time_it=True)
        assert ev.correct, ev.failure


@pytest.mark.gpu
@_gpu()
def test_on_gpu_the_walk_past_both_static_layers_gains_nothing(on_gpu):
    """slows_torch's walk from CUDA host code: it reaches CPython and makes eager 20 ms slower in its worker. Since
    issue 49 torch's baselines are compiled and timed in the clean baseline worker, so nothing it slows is timed and
    nothing recompiles in its worker: accepted at no gain. (Before, replacing `F.layer_norm` broke the torch.compile
    baseline's guards in its worker: the recompile after the seal was refused — a crash, or with `strict_cuda` a
    refused vfork the verdict named first, seen on an H100 — which the assertion below still tolerates.)"""
    ev = on_gpu(walk_cuda(SLOWS_CUDA), time_it=True)
    assert "PROBE pyrun=0" in ev.log, "the attack itself must work here, or this test proves nothing"
    if not ev.correct:
        made = ("forbidden action: the kernel tried vfork",) if STRICT else ()
        assert ev.failure.startswith(("crash: while timing: BackendCompilerFailed", *made)), ev.failure
        return
    assert ev.speedup_eager is not None and ev.speedup_eager < 20, ev.speedup_eager
