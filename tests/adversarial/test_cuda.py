"""Hostile CUDA kernels: the same layers as test_cpu.py on the cuda target. The static and symbol layers
run here (they need nvcc, not a GPU); the `gpu`-marked tests judge each kernel whole on a GPU, with the
same evaluator (one `Reuse`) judging the honest seed correctly after each.

Each hostile kernel is the honest seed (cuda/honest.cu) with one addition: a line before the launch, a
declaration at file scope, or a replacement of the launch.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from kevolve.judge import build as builder
from kevolve.judge.options import Options
from kevolve.judge.static import rules, symbols

HERE = Path(__file__).resolve().parent
# the gpu tests' confinement: as shipped (`Options.strict_cuda`), or KEVOLVE_TEST_STRICT_CUDA=0|1
STRICT = os.environ.get("KEVOLVE_TEST_STRICT_CUDA", "1" if Options().strict_cuda else "0") == "1"
TINY = HERE.parent / "kernels" / "tasks" / "layernorm_tiny"
HONEST = (HERE / "cuda" / "honest.cu").read_text()
LAUNCH = "    layernorm_rows<<<(unsigned)B, THREADS, 0, stream>>>(x, weight, bias, out, N, eps);"
nvcc = pytest.mark.skipif(not Path(builder.cuda_home(), "bin", "nvcc").exists(), reason="needs nvcc")


def refused(ev, *tried: str) -> str:
    """What a refused attempt does to a CUDA verdict as the confinement ships (`STRICT`, `Options.strict_cuda`):
    strict, a rejection (stage `confinement`) naming each of `tried`; otherwise the verdict stands and its log
    names each (`harness`: noted only). Returns the text that names them."""
    if STRICT:
        assert not ev.correct and ev.stage == "confinement" and "; and:" not in ev.failure, (ev.stage, ev.failure)
        text = ev.failure
    else:
        assert ev.correct, ev.failure
        noted = re.search(r"\[refused by the confinement, noted only: (forbidden action: .*)\]\n", ev.log)
        assert noted, ev.log[:600]
        text = noted.group(1)
    for attempt in tried:
        assert attempt in text, text
    return text


def hostile(prelude: str = "", before: str = "", launch: str = LAUNCH) -> str:
    src = HONEST.replace("#include <cuda_runtime.h>", "#include <cuda_runtime.h>\n#include <cstdlib>\n" + prelude, 1)
    return src.replace(LAUNCH, before + "\n" + launch, 1)


# (name, source, rule of the static layer, reason of the symbol layer when built without the rules or None)
CASES = [
    ("paren-on-next-line", hostile(before="void* f; cudaDriverEntryPointQueryResult q; cudaGetDriverEntryPoint\n"
                                          "        (\"cuCtxSetLimit\", &f, cudaEnableDefault, &q);"),
     "driver-entry-point", r"`cudaGetDriverEntryPoint"),
    ("parenthesised-host-func", hostile("static void CUDART_CB host(void*) {}",
                                        before="(cudaLaunchHostFunc)(stream, host, nullptr);"),
     "host-callback", r"`cudaLaunchHostFunc`"),
    ("stream-callback", hostile("static void CUDART_CB cb(cudaStream_t, cudaError_t, void*) {}",
                                before="cudaStreamAddCallback(stream, cb, nullptr, 0);"),
     "host-callback", r"`cudaStreamAddCallback`"),
    ("persisting-l2-window", hostile(before="cudaStreamAttrValue v = {}; v.accessPolicyWindow.base_ptr = (void*)x; "
                                            "v.accessPolicyWindow.num_bytes = 1 << 20; "
                                            "v.accessPolicyWindow.hitRatio = 1; "
                                            "v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting; "
                                            "cudaStreamSetAttribute(stream, "
                                            "cudaStreamAttributeAccessPolicyWindow, &v);"),
     "persisting-l2", r"`cudaStreamSetAttribute`"),
    ("persisting-l2-limit", hostile(before="cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20);"),
     "device-reset", r"`cudaDeviceSetLimit`"),
    ("asm-label-after-declaration", hostile("int run(const char*) asm(\"system\");",
                                            before="if (N < 0) run(\"true\");"),
     "symbol-alias", r"`system` \(process"),
    ("gnu-constructor", hostile("[[gnu::constructor]] static void boot() { volatile int k = 1; (void)k; }"),
     "constructor", r"runs code at load"),
    # by decision (issue 49): a global object's static initialiser runs at load, after the seal, under the confinement
    # a call has — neither layer refuses it (docs/guarantees.md)
    ("plain-global-constructor", hostile("struct Boot { Boot() { volatile int k = 1; (void)k; } } boot;"),
     None, None),
    ("timer-thread", hostile("#include <csignal>\n#include <ctime>", before="sigevent se = {}; timer_t t; "
                                                                            "timer_create(CLOCK_MONOTONIC, &se, &t);"),
     "thread", r"`timer_create` \(thread"),
    ("host-syscall-asm", hostile("__host__ static long pid() { long r; "
                                 "asm volatile(\"syscall\" : \"=a\"(r) : \"a\"(39)); "
                                 "return r; }", before="if (N < 0) pid();"),
     "syscall", r"raw `syscall`"),
    ("managed-memory", hostile(before="float* m; cudaMallocManaged(&m, 4); cudaFree(m);"), "host-memory",
     r"`cudaMallocManaged`"),
    # the first step of a walk from an allowed function to every other (issue 37): its address as data
    ("function-address-as-data", hostile("#include <cstdio>", before="volatile uintptr_t a = (uintptr_t)&printf; "
                                                                    "(void)a;"),
     "function-address", r"takes the address of `printf` as data"),
    ("python-through-extern-c", hostile("extern \"C\" int PyRun_SimpleString(const char*);",
                                        before="if (N < 0) PyRun_SimpleString(\"1\");"),
     "extern-c", r"`PyRun_SimpleString` \(python"),
    # a host node made through the generic node call: a host function on a CUDA runtime thread (audit)
    ("graph-generic-host-node", hostile("static void CUDART_CB later(void* p) { volatile int k = *(int*)p; (void)k; }\n"
                                        "static int token = 1;",
                                        before="cudaGraph_t g; cudaGraphCreate(&g, 0); cudaGraphNodeParams np = {}; "
                                               "np.type = (cudaGraphNodeType)3; np.host.fn = later; "
                                               "np.host.userData = &token; cudaGraphNode_t node; "
                                               "cudaGraphAddNode(&node, g, nullptr, nullptr, 0, &np); "
                                               "cudaGraphExec_t ge; cudaGraphInstantiate(&ge, g, 0); "
                                               "cudaGraphLaunch(ge, stream);"),
     "host-callback", r"`cudaGraphAddNode` \(host-callback"),
    ("graph-kernel-node-window", hostile(before="cudaKernelNodeAttrValue v = {}; v.accessPolicyWindow.base_ptr = "
                                                "(void*)x; v.accessPolicyWindow.num_bytes = 1 << 20; "
                                                "v.accessPolicyWindow.hitRatio = 1; v.accessPolicyWindow.hitProp = "
                                                "(cudaAccessProperty)2; cudaGraphNode_t node = nullptr; if (N < 0) "
                                                "cudaGraphKernelNodeSetAttribute(node, (cudaKernelNodeAttrID)1, &v);"),
     "persisting-l2", r"`cudaGraphKernelNodeSetAttribute` \(persisting-l2"),
    # a persisting window as a launch attribute with numeric constants (audit): cudaLaunchKernelExC is allowed (clusters
    # need it), so no symbol shows it — the static layer rejects the window's fields, and the worker's reset of the
    # persisting-L2 set-aside before each timed round (judge.worker.l2) takes the window's effect away whatever its
    # spelling
    ("launch-attribute-window", hostile(launch="    cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3((unsigned)B); "
                                               "cfg.blockDim = dim3(THREADS); cfg.stream = stream;\n"
                                               "    cudaLaunchAttribute at[1] = {}; "
                                               "at[0].id = (cudaLaunchAttributeID)1;\n"
                                               "    at[0].val.accessPolicyWindow.base_ptr = (void*)x;\n"
                                               "    at[0].val.accessPolicyWindow.num_bytes = (size_t)(B * N * 4);\n"
                                               "    at[0].val.accessPolicyWindow.hitRatio = 1.0f;\n"
                                               "    at[0].val.accessPolicyWindow.hitProp = (cudaAccessProperty)2;\n"
                                               "    at[0].val.accessPolicyWindow.missProp = (cudaAccessProperty)1;\n"
                                               "    cfg.attrs = at; cfg.numAttrs = 1;\n"
                                               "    cudaLaunchKernelEx(&cfg, layernorm_rows, "
                                               "x, weight, bias, out, N, eps);"),
     "persisting-l2", None),
]
# reason None: the symbol layer passes the kernel (nothing it imports is new); the layers named in its comment catch it
SYMBOL_CASES = [c for c in CASES if c[3] is not None]

# Honest kernels that use the launch and graph calls the lists above restrict: both layers accept them.
ACCEPTED = [
    ("cluster-launch", hostile(launch="    cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3((unsigned)B); "
                                      "cfg.blockDim = dim3(THREADS); cfg.dynamicSmemBytes = 0; cfg.stream = stream;\n"
                                      "    cudaLaunchAttribute attr[1];\n"
                                      "    attr[0].id = cudaLaunchAttributeClusterDimension;\n"
                                      "    attr[0].val.clusterDim.x = B % 2 == 0 ? 2 : 1; "
                                      "attr[0].val.clusterDim.y = 1; "
                                      "attr[0].val.clusterDim.z = 1;\n"
                                      "    cfg.attrs = attr; cfg.numAttrs = 1;\n"
                                      "    if (cudaLaunchKernelEx(&cfg, layernorm_rows, x, weight, bias, out, N, eps) "
                                      "!= cudaSuccess) return 1;")),
    ("graph-capture", hostile(launch="    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;\n"
                                     "    cudaStreamIsCapturing(stream, &st);\n"
                                     "    if (st != cudaStreamCaptureStatusNone) {\n" + LAUNCH + "\n    } else {\n"
                                     "        cudaGraph_t g; cudaGraphExec_t e; size_t nodes = 0; cudaStream_t s;\n"
                                     "        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);   // not legacy\n"
                                     "        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);\n"
                                     "    " + LAUNCH.replace("stream>>>", "s>>>") + "\n"
                                     "        cudaStreamEndCapture(s, &g);\n"
                                     "        cudaGraphGetNodes(g, nullptr, &nodes);\n"
                                     "        cudaGraphInstantiateWithFlags(&e, g, 0); cudaGraphLaunch(e, stream);\n"
                                     "        cudaGraphExecDestroy(e); cudaGraphDestroy(g); cudaStreamDestroy(s);\n"
                                     "        if (nodes != 1) return 1;\n"
                                     "    }")),
]


@nvcc
@pytest.mark.parametrize("name, source, rule, _", CASES, ids=[c[0] for c in CASES])
def test_static_layer(name, source, rule, _):
    verdict = rules.check(source, "cuda")
    if rule is None:
        assert verdict.ok, verdict.reason                 # left to the symbol layer, by decision
    else:
        assert rule in {v.rule for v in verdict.violations}, verdict.reason


@pytest.fixture(scope="module", autouse=True)
def private_build_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KEVOLVE_CACHE", str(tmp_path_factory.mktemp("kevolve-cache")))
        mp.setenv("KEVOLVE_CUDA_ARCH", mp_arch())
        yield


def mp_arch() -> str:
    import os
    return os.environ.get("KEVOLVE_CUDA_ARCH") or builder.detect_arch()


@nvcc
@pytest.mark.slow
@pytest.mark.parametrize("name, source, _, reason", CASES, ids=[c[0] for c in CASES])
def test_symbol_layer(name, source, _, reason):
    built = builder.build(source, "cuda")                 # no static rules: this layer stands alone
    if not built.ok and "host-syscall" not in name:
        pytest.fail(built.error)
    if reason is None:                                    # by decision: another layer's (see the case's comment)
        assert symbols.check(built.lib_path, "cuda") is None
        return
    assert re.search(reason, symbols.check(built.lib_path, "cuda") or ""), symbols.check(built.lib_path, "cuda")


@nvcc
@pytest.mark.parametrize("name, source", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_accepted_by_the_static_layer(name, source):
    assert rules.check(source, "cuda").ok, rules.check(source, "cuda").reason


@nvcc
@pytest.mark.slow
@pytest.mark.parametrize("name, source", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_accepted_by_the_symbol_layer(name, source):
    built = builder.build(source, "cuda")
    assert built.ok, built.error
    assert symbols.check(built.lib_path, "cuda") is None, symbols.check(built.lib_path, "cuda")


@pytest.mark.parametrize("name", ["cudaGraphAddNode", "cudaGraphAddHostNode", "cudaGraphNodeSetParams",
                                  "cudaGraphExecNodeSetParams", "cudaGraphHostNodeSetParams",
                                  "cudaGraphExecHostNodeSetParams", "cudaGraphKernelNodeSetAttribute",
                                  "cudaGraphKernelNodeCopyAttributes", "cudaGraphExecUpdate", "cudaGraphDebugDotPrint",
                                  "cudaGraphicsMapResources", "cudaGraphRetainUserObject", "cudaStreamSetAttribute",
                                  "cudaStreamCopyAttributes", "cudaDeviceSetLimit", "cudaCtxResetPersistingL2Cache"])
def test_graph_and_attribute_calls_outside_the_list_are_rejected(name):
    assert not symbols.allowed(name, "cuda")


@pytest.mark.parametrize("name", ["cudaLaunchKernelExC", "cudaGraphCreate", "cudaGraphInstantiate",
                                  "cudaGraphInstantiateWithFlags", "cudaGraphLaunch", "cudaGraphLaunch_ptsz",
                                  "cudaGraphExecDestroy", "cudaGraphDestroy", "cudaGraphGetNodes",
                                  "cudaGraphAddKernelNode", "cudaGraphAddMemsetNode", "cudaGraphAddMemcpyNode",
                                  "cudaGraphAddEmptyNode", "cudaGraphAddDependencies", "cudaGraphUpload",
                                  "cudaGraphExecKernelNodeSetParams", "cudaStreamBeginCapture", "cudaEventRecord"])
def test_graph_calls_a_kernel_needs_are_allowed(name):
    assert symbols.allowed(name, "cuda")


def _hinted(load: str) -> str:
    """The honest seed with its first pass over the row made through `load(p)` (a device function defined first)."""
    src = HONEST.replace("sum += row[i];", "sum += load(row + i);", 1)
    return src.replace("__global__ void layernorm_rows", load + "\n__global__ void layernorm_rows", 1)


# Kernels that keep their inputs in L2 ahead of the judge's flush (experiments/l2_flush_probe.py measured the gain on
# an H200: 7-19% for inputs of 4-48 MB). No symbol shows them; the static layer alone rejects them.
L2_CASES = [
    ("evict-last-policy", _hinted("__device__ float load(const float* p) { float v; asm volatile(\"{ .reg .b64 q; "
                                  "createpolicy.fractional.L2::evict_last.b64 q, 1.0; ld.global.L2::cache_hint.f32 %0, "
                                  "[%1], q; }\" : \"=f\"(v) : \"l\"(p)); return v; }")),
    ("policy-constant-split-literal", _hinted("__device__ float load(const float* p) { float v; asm(\"ld.global.L2::"
                                              "cache_\" \"hint.f32 %0, [%1], %2;\" : \"=f\"(v) : \"l\"(p), "
                                              "\"l\"(0x14f0000000000000ull)); return v; }")),
    ("evict-last-qualifier", _hinted("__device__ float load(const float* p) { float v; asm(\"ld.global.L1::evict_"
                                     "last.L2::256B.f32 %0, [%1];\" : \"=f\"(v) : \"l\"(p)); return v; }")),
    ("annotated-persisting", _hinted("#include <cuda/annotated_ptr>\n__device__ float load(const float* p) { "
                                     "cuda::annotated_ptr<const float, cuda::access_property::persisting> a(p); "
                                     "return a[0]; }")),
]


@pytest.mark.parametrize("name, source", L2_CASES, ids=[c[0] for c in L2_CASES])
def test_l2_priority_is_rejected_by_the_static_layer(name, source):
    verdict = rules.check(source, "cuda")
    assert "l2-priority" in {v.rule for v in verdict.violations}, verdict.reason


def test_evict_first_loads_pass():
    """The seeds' own cache hints (evict-first loads and stores, no-allocate) are allowed."""
    src = _hinted("__device__ float load(const float* p) { float v; asm(\"ld.global.L1::no_allocate.f32 %0, [%1];\" "
                  ": \"=f\"(v) : \"l\"(p)); return v + __ldcs(p) * 0.f; }")
    assert rules.check(src, "cuda").ok, rules.check(src, "cuda").reason


@nvcc
def test_honest_seed_passes_both_layers():
    assert rules.check(HONEST, "cuda").ok
    built = builder.build(HONEST, "cuda")
    assert built.ok, built.error
    assert symbols.check(built.lib_path, "cuda") is None


# ------------------------------------------------------------------ on a GPU: the whole judgement
RUNTIME = [
    ("writes-before-start", hostile(before="cudaMemsetAsync(out - 1, 0xFF, 4, stream);"),
     r"wrote outside out \(before its start\)"),
    ("writes-nan-past-end", hostile(before="", launch=LAUNCH + "\n    cudaMemsetAsync(out + B * N, 0xFF, 4, stream);"),
     r"wrote outside out \(past its end\)"),
    ("assumes-16-byte-alignment", hostile(
        "__global__ void zero4(float* o, int64_t n) { int64_t i = blockIdx.x * 256 + threadIdx.x; "
        "if (4 * i + 3 < n) reinterpret_cast<float4*>(o)[i] = make_float4(0, 0, 0, 0); }",
        before="zero4<<<(unsigned)((B * N / 4 + 255) / 256), 256, 0, stream>>>(out, B * N);"),
     r"crash|misaligned"),
    ("uses-poison-as-counter", hostile(
        "__global__ void skip(const unsigned char* ws, float* o) { if (ws[0] == 0xFF) o[0] = 0; }",
        before="skip<<<1, 1, 0, stream>>>((const unsigned char*)workspace, out); return 0;"),
     r"NaN"),
    ("ignores-its-eps", hostile(launch=LAUNCH.replace("N, eps)", "N, 1e-5f)")),
     r"^B=5,N=64,eps=0\.01/random/s0: output out: \d+ of 320 elements outside tolerance"),
    # judge round 3: on the third call every input and output ends against unmapped device memory (judge.worker.vmm), so
    # a read past an input's end (a vector tail) or a write past an output's end that is put back before the call
    # returns (which the guards, compared after the call, cannot see) is an illegal address
    ("reads-past-input-end", hostile("__global__ void peek(const float* p, float* o) { "
                                     "float v = *(const volatile float*)(p + 3); if (v == 1234.5f) o[0] = v; }",
                                     before="peek<<<1, 1, 0, stream>>>(x + B * N, out);"),
     r"(?s)^B=2,N=4096/random/s0: crash: .*illegal memory access.*third call"),
    # the first two calls' bases are 16-byte aligned, their ends 1 element to 16 bytes before unmapped memory: an
    # aligned path that reads a 64-byte block past the end faults there (the third call is never 16-byte aligned)
    ("aligned-path-reads-a-block-past-the-end",
     hostile("__global__ void peek(const float* p, float* o) { "
             "float v = *(const volatile float*)(p + 3); if (v == 1234.5f) o[0] = v; }",
             before="if (((uintptr_t)x & 15) == 0) peek<<<1, 1, 0, stream>>>(x + B * N + 12, out);"),
     r"(?s)^B=2,N=4096/random/s0: crash: .*illegal memory access.*\(call 1, .*first two calls"),
    ("puts-back-past-output-end", hostile("__global__ void scribble(float* p) { volatile float* q = p; "
                                          "float v = q[1]; q[1] = 0.f; __threadfence(); q[1] = v; }",
                                          launch=LAUNCH + "\n    scribble<<<1, 1, 0, stream>>>(out + B * N);"),
     r"(?s)^B=2,N=4096/random/s0: crash: .*illegal memory access.*third call"),
]


def _gpu():
    import torch
    return pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@_gpu()
@pytest.mark.parametrize("name, source, reason", RUNTIME, ids=[c[0] for c in RUNTIME])
def test_runtime_on_gpu(name, source, reason, gpu_judge):
    ev = gpu_judge(source)
    assert not ev.correct and re.search(reason, ev.failure), ev.failure
    assert gpu_judge(HONEST).correct


@pytest.mark.gpu
@_gpu()
@pytest.mark.parametrize("name, source", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_accepted_kernels_are_correct_on_gpu(name, source, gpu_judge):
    ev = gpu_judge(source)
    assert ev.correct, ev.failure


@pytest.mark.gpu
@_gpu()
@pytest.mark.parametrize("name, source, rule, reason", SYMBOL_CASES, ids=[c[0] for c in SYMBOL_CASES])
def test_imports_rejected_before_load_on_gpu(name, source, rule, reason, gpu_judge):
    ev = gpu_judge(source, rules_first=False)
    if "host-syscall" in name and ev.stage == "build":
        return
    assert not ev.correct and ev.stage == "symbols" and re.search(reason, ev.failure), (ev.stage, ev.failure)
    assert gpu_judge(HONEST).correct


@pytest.mark.gpu
@_gpu()
def test_confinement_on_gpu(gpu_judge):
    """The CPU confinement probe's attacks from a CUDA worker: nothing escapes, the seed still computes — and since
    issue 37 what it tried is evidence (`judge.evaluator.evidence`), each refusal named: a rejection with
    `strict_cuda`, noted in the log without it (`refused`)."""
    probe = (HERE / "cpu" / "confine_probe.cpp").read_text()
    libc = (HERE / "cpu" / "_libc.h").read_text()
    body = probe.split("extern \"C\" int forward", 1)[0].replace('#include "_libc.h"', libc)
    attack = probe.split("if (!probed) {", 1)[1].rsplit("    layernorm(x, weight, bias, out, B, N, eps);", 1)[0]
    src = HONEST.replace("#include <cuda_runtime.h>", "#include <cuda_runtime.h>\n" + body, 1)
    src = src.replace(LAUNCH, "if (!probed) {" + attack + "\n" + LAUNCH, 1)
    Path("/tmp/kevolve-adversarial-probe").unlink(missing_ok=True)
    ev = gpu_judge(src, rules_first=False)
    got = dict(re.findall(r"PROBE (\w+)=(-?\d+)", ev.log))
    got.update(re.findall(r"(workers_\w+)=(\d+)", ev.log))
    refused(ev, "openat /tmp/kevolve-adversarial-probe for writing", "socket(AF_INET)", "execve", "clone of a")
    assert int(got["file"]) < 0 and int(got["socket"]) < 0 and int(got["evaluator_fd"]) < 0, got
    assert int(got["workers_reached"]) == 0, got
    from test_cpu import pidns_holds
    if pidns_holds():                                    # a CUDA worker in its own PID namespace sees no other
        assert int(got["workers_seen"]) == 0 and int(got["pidns"]) > 0, got
    # sealed before the kernel loaded (confine.seal), as on the CPU: no new process by fork, raw clone or exec
    assert int(got["child"]) < 0 and int(got["raw_clone"]) < 0, got
    assert int(got["exec"]) < 0 and int(got["exec_errno"]) == 1, got    # EPERM, not ENOENT: exec itself refused
    assert "setsid" not in got, got                                      # no child ever ran to try it
    assert gpu_judge(HONEST).correct


QUEUED_HONEST = hostile(before="cudaStreamSynchronize(stream); cudaGetLastError();   // uncapturable: timed queued")

# Hostile (judge round 3): makes itself uncapturable, so the judge times it queued — n samples, one per call, the
# median the headline — then does a whole round's work in the round's first call. Its host code keeps the buffer
# pairs (x, out) of the calls since a pair repeated (a round: slots 0 .. n-1, then the latency call's) and of the
# round before; the first call of a round runs the seed on its own buffers and on every later pair of the round
# before, and marks them done; a call on a pair marked done returns at once. When every input set of a round is
# drawn before its first call, those outputs are right and the median call costs nothing. Rejected: the judge fills
# set i (after a decoy fill of every set) and re-poisons its outputs just before call i (`Session._queued_calls`),
# so what the first call computed came from decoys and is poisoned again before its call: NaN — not written.
QUEUED_AHEAD = hostile(
    prelude="""constexpr int SLOTS = 64;
static const float* burst_x[SLOTS]; static float* burst_out[SLOTS]; static int burst = 0;
static const float* prev_x[SLOTS]; static float* prev_out[SLOTS]; static int prev = 0;
static bool done[SLOTS];
static int64_t kB = -1, kN = -1;""",
    before="""cudaStreamSynchronize(stream);          // illegal while the stream is captured: the capture fails
    cudaGetLastError();
    if (B != kB || N != kN) { kB = B; kN = N; burst = prev = 0; }     // a new shape: the tables start over
    int at = -1;
    for (int i = 0; i < burst; ++i)
        if (burst_x[i] == x && burst_out[i] == out) at = i;
    if (at >= 0 || burst == SLOTS) {        // a pair repeats: a new round begins; the one before is remembered
        for (int i = 0; i < burst; ++i) { prev_x[i] = burst_x[i]; prev_out[i] = burst_out[i]; }
        prev = burst; burst = 0;
        for (int i = 0; i < SLOTS; ++i) done[i] = false;
    }
    const int k = burst++;
    burst_x[k] = x; burst_out[k] = out;
    if (done[k] && prev > k && prev_x[k] == x && prev_out[k] == out) return 0;    // written ahead this round""",
    launch=LAUNCH + """
    if (k == 0 && prev > 0 && prev_x[0] == x && prev_out[0] == out)          // the round's first call: all of it
        for (int j = 1; j < prev; ++j) {
            layernorm_rows<<<(unsigned)B, THREADS, 0, stream>>>(prev_x[j], weight, bias, prev_out[j], N, eps);
            done[j] = true;
        }""")


@pytest.mark.gpu
@_gpu()
def test_queued_calls_cannot_compute_ahead_on_gpu(gpu_timed_judge, tiny_one_per_shape):
    """A kernel timed queued (capture fails) that writes a whole round's outputs in the round's first call
    (QUEUED_AHEAD) is rejected at the first round it tries (on a task with one configuration per shape: see the
    fixture); the honest seed, uncapturable the same way, is timed queued and correct — and so is the seed, in a
    graph, judged after them by the same evaluator."""
    ev = gpu_timed_judge(QUEUED_AHEAD, tiny_one_per_shape)
    assert not ev.correct and re.search(r"NaN .*timed call, round \d", ev.failure or ""), (ev.stage, ev.failure)
    honest = gpu_timed_judge(QUEUED_HONEST)
    assert honest.correct, honest.failure
    assert gpu_timed_judge(HONEST).correct


@pytest.fixture(scope="module")
def gpu_timed_judge():
    """Judges a kernel whole, timing included (eager baseline, a few short rounds), in one evaluator."""
    from kevolve.judge.evaluator.harness import judge
    from kevolve.judge.options import Options
    from kevolve.judge.evaluator.reuse import Reuse
    from kevolve.task import load_task
    task = load_task(TINY)
    options = Options(target="cuda", shapes="small", baselines=("eager",), reps=30, calls=5, timeout=60)
    reuse = Reuse(options, reference_bytes=1 << 28, baseline_refresh_s=0)

    def run(source: str, on=None):
        built = builder.build(source, "cuda")
        assert built.ok, built.error
        return judge(on or task, built.lib_path, options, reuse=reuse)
    yield run
    reuse.close()


@pytest.fixture(scope="module")
def gpu_judge():
    from kevolve.judge.evaluator.harness import evaluate, judge
    from kevolve.judge.options import Options
    from kevolve.judge.evaluator.reuse import Reuse
    from kevolve.task import load_task
    task = load_task(TINY)
    # the CUDA confinement as shipped (`Options.strict_cuda`; KEVOLVE_TEST_STRICT_CUDA=0: the driver started early)
    options = Options(target="cuda", shapes="small", time_kernel=False, timeout=60, strict_cuda=STRICT)
    reuse = Reuse(options, reference_bytes=1 << 28, baseline_refresh_s=0)

    def run(source: str, rules_first: bool = True):
        if rules_first:
            return evaluate(task, source, options)
        built = builder.build(source, "cuda")
        if not built.ok:
            from kevolve.judge.results import Evaluation
            return Evaluation(task=task.name, target="cuda", abi="c", shapes="small", compiled=False, correct=False,
                              failure=built.error, stage="build")
        return judge(task, built.lib_path, options, reuse=reuse)
    yield run
    reuse.close()
