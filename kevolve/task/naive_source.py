"""The naive writer's loops (kevolve/task/naive.py) as a kernel source: a C++ one for the CPU (each loop an OpenMP loop,
its chunk and the size it starts at as knobs, so that the knob search has something to turn) or a CUDA one (each loop
its own kernel, a grid-stride loop over the result, launched in order on the task's stream). Temporaries are doubles
in the harness's workspace (task.yaml's `workspace_bytes`: `Lowered.workspace_bytes()`); the kernel allocates nothing.

Guarantees: the entry point is the task's C prototype (`kevolve.task.abi.c_prototype`); the source includes only
headers the static rules allow (cmath, cstdint; cuda_runtime.h on CUDA) and calls nothing they forbid; a CUDA
kernel returns 1 when a launch failed (`cudaGetLastError`), else 0.
"""
from __future__ import annotations

from kevolve.task.naive_ir import Lowered, decompose, numel

HEAD = """// A naive kernel written by `python -m kevolve.tasks new` from the task's torch reference
// (kevolve/task/naive.py): one loop nest per operation, in double, the temporaries in the workspace.
// Correct, not fast: a seed for the search to improve.
"""
KNOBS = """// The knob search's first tunables (kevolve/operators/knobs.py): iterations per OpenMP chunk, and the work
// (elements × their inner loop) from which a loop runs on every thread (a parallel region costs microseconds).
constexpr int CHUNK = 16;                   // knob: 1, 4, 16, 64, 256, 1024
constexpr int64_t PARALLEL_FROM = 16384;    // knob: 1024, 4096, 16384, 65536, 262144
"""
HELPERS = """{q} double kv_max(double a, double b) {{ return (a != a || a > b) ? a : b; }}
{q} double kv_min(double a, double b) {{ return (a != a || a < b) ? a : b; }}
"""


def _temps(low: Lowered) -> str:
    lines, offset = [], "0"
    for name, n in low.temps:
        lines.append(f"    double* {name} = (double*)workspace + ({offset});")
        offset = f"{offset} + {n}" if offset != "0" else n
    unused = "(void)workspace_bytes;" if lines else "(void)workspace; (void)workspace_bytes;"
    return "\n".join(lines) + "\n    " + unused


def _unused(low: Lowered) -> str:
    return "".join(f" (void){name};" for name, _ in low.temps)


def nested(loop) -> str:
    """One loop nest per dimension on the CPU (no division per element); OpenMP shares the outermost. A result
    of no dimension is one iteration."""
    shape = loop.shape or ("1",)
    idx = [f"i{k}" for k in range(len(shape))]
    head = "".join(f"for (int64_t {v} = 0; {v} < ({d}); ++{v}) " for v, d in zip(idx, shape))
    linear = "0"
    for v, d in zip(idx, shape):
        linear = f"({linear})*({d}) + {v}"
    return f"{head}{{ const int64_t i = {linear}; {loop.body('i', idx if loop.shape else [])} }}"


def cpu(task, low: Lowered) -> str:
    from kevolve.task.abi import c_prototype
    proto = c_prototype(task, "cpu").removesuffix(";")
    out = [HEAD, "#include <cmath>\n#include <cstdint>\n", HELPERS.format(q="static inline"), KNOBS, proto + " {",
           _temps(low)]
    for loop in low.loops:
        n = numel(loop.shape)
        out.append(f"    #pragma omp parallel for schedule(static, CHUNK) if(({n}) * ({loop.inner}) >= PARALLEL_FROM)\n"
                   f"    {nested(loop)}")
    out.append("    return 0;\n}\n")
    return "\n".join(out)


def cuda(task, low: Lowered) -> str:
    from kevolve.task.abi import c_prototype
    proto = c_prototype(task, "cuda").removesuffix(";")
    params = proto[proto.index("(") + 1:proto.rindex(")")]
    params = params[:params.rindex(", cudaStream_t stream")]
    names = [p.split()[-1].lstrip("*") for p in params.split(", ")]
    out = [HEAD, "#include <cmath>\n#include <cstdint>\n#include <cuda_runtime.h>\n",
           HELPERS.format(q="__device__ static inline")]
    for k, loop in enumerate(low.loops):
        n = numel(loop.shape)
        split, idx = decompose("i", loop.shape, "i")
        out.append(f"__global__ void naive_{k}({params}) {{\n{_temps(low)}{_unused(low)}\n"
                   f"    const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
                   f"    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < {n}; i += step) "
                   f"{{ {split} {loop.body('i', idx)} }}\n}}\n")
    out.append(proto + " {")
    for k, loop in enumerate(low.loops):
        n = numel(loop.shape)
        out.append(f"    {{ const int64_t n = {n}; if (n > 0) {{ const int64_t blocks = n / 256 + 1 < 4096 ? "
                   f"n / 256 + 1 : 4096; naive_{k}<<<(unsigned)blocks, 256, 0, stream>>>({', '.join(names)}); }} }}")
    out.append("    return cudaGetLastError() == cudaSuccess ? 0 : 1;\n}\n")
    return "\n".join(out)
