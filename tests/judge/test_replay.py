"""A CUDA kernel's device code timed where its host code never ran (`kevolve.judge.replay`, issue 49): what the kernel's
worker describes, what the evaluator refuses as unreplayable, how a description moves onto other buffers, the device
code read from the library without running it, and the protocol's two commands. The replay itself needs a GPU: the
`gpu` tests at the end, and `experiments/replay_gpu.py` for every task's seeds and best kernels."""
from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from kevolve.judge import build as builder
from kevolve.judge import protocol
from kevolve.judge.options import Options, resolved
from kevolve.judge.replay import fatbin, nodes
from kevolve.judge.replay.nodes import Buffer, Description, Node

HERE = Path(__file__).resolve().parent
X, OUT, WS = 0x7F00_0000_0000, 0x7F00_1000_0000, 0x7F00_2000_0000
BUFFERS = (Buffer("x", X, 4096), Buffer("out", OUT, 4096), Buffer("workspace", WS, 256))
MINE = {"x": 0x5000_0000, "out": 0x6000_0000, "workspace": 0x7000_0000}


def kernel_node(*words: int, function: str = "_Z4kernPKfPfl", deps=(), layout=None) -> Node:
    args = b"".join(struct.pack("<Q", w) for w in words)
    return Node(nodes.KERNEL, deps=tuple(deps), function=function, grid=(4, 1, 1), block=(256, 1, 1),
                args=args, layout=layout or tuple((8 * k, 8) for k in range(len(words))))


HONEST = Description((kernel_node(X, OUT, 1024),
                      Node(nodes.MEMSET, deps=(0,), dst=WS, nbytes=64, element=4),
                      Node(nodes.MEMCPY, deps=(1,), src=OUT, dst=WS + 64, nbytes=128),
                      Node(nodes.EMPTY, deps=(2,))), BUFFERS, (("table", b"\x01\x02"),))


def test_an_honest_description_is_replayable():
    assert nodes.unreplayable(HONEST, {"_Z4kernPKfPfl"}) == []
    assert nodes.unreplayable(HONEST, None) == []            # names unknown here: the timing worker's load checks them


@pytest.mark.parametrize("node, says", [
    (Node("host", deps=(0,)), "runs host code on a runtime thread"),
    (Node("allocation", deps=(0,)), "allocates memory inside its graph"),
    (Node("free", deps=(0,)), "frees memory"),
    (Node("graph", deps=(0,)), "child graph"),
    (Node("event record", deps=(0,)), "records an event"),
    (Node("conditional", deps=(0,)), "conditional node"),
    (Node(nodes.MEMCPY, deps=(0,), detail="host copy"), "copies to or from the host"),
    (Node(nodes.MEMCPY, deps=(0,), detail="copy shape"), "more than one dimension"),
    (Node(nodes.KERNEL, deps=(0,), function="_Z4kernPKfPfl", detail="extra"), "through `extra`"),
    (kernel_node(X, function="_ZN2at6native18elementwise_kernelE", deps=(0,)), "another library's kernel"),
    (Node(nodes.MEMSET, deps=(0,), dst=0x1234_0000, nbytes=64, element=4), "writes 64 bytes at 0x12340000, outside"),
    (Node(nodes.MEMCPY, deps=(0,), src=X + 4000, dst=OUT, nbytes=200), "reads 200 bytes"),
    (Node(nodes.EMPTY, deps=(3,)), "depends on a node that does not come before it"),
    (Node(nodes.KERNEL, deps=(0,), function="_Z4kernPKfPfl", args=b"\0" * 8, layout=((0, 16),)), "do not fit"),
])
def test_what_cannot_be_replayed_apart_from_the_host_code_is_named(node, says):
    desc = Description(HONEST.nodes[:1] + (node,), BUFFERS)
    reasons = nodes.unreplayable(desc, {"_Z4kernPKfPfl"})
    assert reasons and all(r.startswith("node 2 of 2") for r in reasons), reasons
    assert any(says in r for r in reasons), reasons


def test_a_task_may_allow_another_librarys_kernels_by_prefix():
    desc = Description((kernel_node(X, function="cutlass_80_tensorop_gemm"),), BUFFERS)
    assert nodes.unreplayable(desc, set()) and not nodes.unreplayable(desc, set(), allowed=("cutlass_",))


def test_a_launch_in_clusters_of_more_than_eight_blocks_is_allowed_for_its_function_alone():
    """A 16-block cluster is CUDA's non-portable size: a kernel's host code allows it per function, or the launch fails
    (CUDA_ERROR_INVALID_CLUSTER_SIZE, 912: layernorm_fwd's best kernel, replayed on an H100, before this was carried
    across). The replay allows it for the functions a described launch needs it for, and no others."""
    from kevolve.judge.replay.device import _non_portable_clusters
    wide = Node(**{**kernel_node(X, function="rows_cluster").__dict__, "cluster": (16, 1, 1)})
    portable = Node(**{**kernel_node(X, function="rows_small").__dict__, "cluster": (8, 1, 1)})
    plain = kernel_node(X, function="rows_plain")
    assert _non_portable_clusters(Description((wide, portable, plain), BUFFERS)) == {"rows_cluster"}
    assert _non_portable_clusters(Description((Node(**{**portable.__dict__, "cluster": (4, 4, 1)}),), BUFFERS)) \
        == {"rows_small"}


def test_relocation_moves_every_address_inside_a_buffer_and_nothing_else():
    struct_param = kernel_node(7, X + 16, OUT + 4096, 0x7F00_0000_0000 - 8, 99,
                               layout=((0, 4), (8, 24), (32, 8)))   # an int, a struct of 3 words, a word
    desc = Description((struct_param, Node(nodes.MEMSET, dst=WS + 8, nbytes=8, element=4),
                        Node(nodes.MEMCPY, src=X, dst=OUT + 16, nbytes=32)), BUFFERS)
    moved = nodes.relocate(desc, MINE)
    words = struct.unpack("<5Q", moved[0].args)
    assert words[0] == 7                                        # a 4-byte parameter: never read as an address
    assert words[1] == MINE["x"] + 16                           # a struct's field
    assert words[2] == MINE["out"] + 4096                       # one past the end of out
    assert words[3] == 0x7F00_0000_0000 - 8                     # just before x: nobody's, left as it was
    assert words[4] == 99
    assert moved[1].dst == MINE["workspace"] + 8
    assert (moved[2].src, moved[2].dst) == (MINE["x"], MINE["out"] + 16)
    assert nodes.relocate(desc, {}) == desc.nodes               # no target: nothing moves


def test_the_description_travels_as_json_and_nothing_else_is_read():
    import json
    wire = json.loads(json.dumps(nodes.to_wire(HONEST)))
    assert nodes.from_wire(wire) == HONEST
    for bad in ({}, {"nodes": [{"kind": "kernel", "args": "zz"}], "buffers": []}, {"nodes": [], "buffers": [[1]]},
                {"nodes": [{"kind": "kernel", "grid": ["x"]}], "buffers": []}):
        with pytest.raises(ValueError, match="does not allow"):
            nodes.from_wire(bad)


def test_the_protocol_carries_the_two_commands():
    assert protocol.COMMANDS["describe"] is protocol.Describe
    assert protocol.COMMANDS["load_device"] is protocol.LoadDevice
    line = protocol.encode(protocol.Describe(3, 17), "n")
    assert protocol.decode_command(line) == (protocol.Describe(3, 17), "n")
    reply = protocol.encode_fields({"description": nodes.to_wire(HONEST)}, "n")
    got = protocol.decode_reply(reply, protocol.Describe(3, 17), "n")
    assert isinstance(got, protocol.Described) and nodes.from_wire(got.description) == HONEST
    assert not protocol.LoadDevice.loads_kernel                 # no host code of the candidate's: no attempt is its


def test_the_replay_is_off_unless_the_node_turns_it_on(monkeypatch):
    from kevolve.judge.evaluator import replayed
    monkeypatch.delenv("KEVOLVE_CUDA_REPLAY", raising=False)
    assert not resolved(Options(target="cuda")).replay
    monkeypatch.setenv("KEVOLVE_CUDA_REPLAY", "1")
    on = resolved(Options(target="cuda"))
    assert on.replay and replayed.wanted(on)
    assert not replayed.wanted(resolved(Options(target="cuda", abi="torch")))   # ATen's kernels: not replayed
    assert not replayed.wanted(resolved(Options(target="cpu")))
    monkeypatch.setenv("KEVOLVE_CUDA_REPLAY", "0")
    assert not resolved(Options(target="cuda", replay=True)).replay


DEVICE_DATA = r"""
#include <cstdint>
#include <cuda_runtime.h>
__device__ float table[4];
__constant__ float scale;
static __device__ int flag;
__global__ void kern(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * scale + table[i % 4] + flag;
}
extern "C" int forward(const float* x, float* y, int64_t n, void* ws, int64_t wsb, cudaStream_t s) {
    kern<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, y, n);
    return 0;
}
"""


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc (sources compile here; nothing runs)")
def test_the_device_code_is_read_from_the_library_without_running_it(private_build_cache):
    built = builder.build(DEVICE_DATA, "cuda")
    assert built.ok, built.error
    images = fatbin.images(built.lib_path)
    assert images and all(struct.unpack_from("<I", im)[0] == fatbin.MAGIC for im in images)
    assert any(e.kind == fatbin.CUBIN and e.elf for im in images for e in fatbin.entries(im))
    functions, objects = fatbin.symbols(images)
    assert "_Z4kernPKfPfl" in functions and {"table", "scale", "flag"} <= objects
    cpu = builder.build((HERE.parent / "kernels" / "tasks" / "layernorm_tiny" / "seeds" / "cpu.cpp").read_text(), "cpu")
    with pytest.raises(fatbin.FatbinError, match="no .nv_fatbin"):
        fatbin.images(cpu.lib_path)
    with pytest.raises(fatbin.FatbinError, match="not a fat binary"):
        fatbin.entries(b"\0" * 64)


# ---------------------------------------------------------------------- on a GPU (the lead's machine)
CUDA_KERNELS = HERE.parent / "adversarial" / "cuda"
GPU = Options(target="cuda", shapes="small", baselines=("eager",), reps=20, timeout=60)


def _kernel_ms(ev) -> list[float]:
    return [m.kernel.median for m in ev.measurements if m.kernel is not None]


@pytest.fixture
def on_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from kevolve.task import load_task
    return load_task(HERE.parent / "kernels" / "tasks" / "layernorm_tiny")


@pytest.mark.gpu
def test_on_gpu_an_honest_kernel_replayed_apart_from_its_host_code_keeps_its_speed(on_gpu, monkeypatch):
    """The honest seed judged with its own worker's clock, then with its device code replayed in a worker that never
    ran its host code: correct both ways, every timed configuration within a factor of 1.5 of the other."""
    _keeps_its_speed_replayed(on_gpu, (CUDA_KERNELS / "honest.cu").read_text(), GPU, monkeypatch)


def _keeps_its_speed_replayed(task, source: str, options: Options, monkeypatch) -> None:
    """Judged in its own worker, then replayed: correct both ways, each timed configuration within 1.5x."""
    from kevolve.judge.evaluator.harness import evaluate
    monkeypatch.delenv("KEVOLVE_CUDA_REPLAY", raising=False)
    own = evaluate(task, source, options)
    monkeypatch.setenv("KEVOLVE_CUDA_REPLAY", "1")
    replayed = evaluate(task, source, options)
    assert own.correct and replayed.correct, (own.failure, replayed.failure)
    for a, b in zip(_kernel_ms(own), _kernel_ms(replayed)):
        assert 1 / 1.5 < b / a < 1.5, (_kernel_ms(own), _kernel_ms(replayed))


@pytest.mark.gpu
@pytest.mark.parametrize("name, says", [
    ("allocates_in_its_graph.cu", "allocates memory inside its graph"),     # unreplayable: named
    ("device_table.cu", None),                                               # data its host code set: copied across
])
def test_on_gpu_what_the_replay_refuses_and_what_it_carries(on_gpu, monkeypatch, name, says):
    from kevolve.judge.evaluator.harness import evaluate
    monkeypatch.setenv("KEVOLVE_CUDA_REPLAY", "1")
    ev = evaluate(on_gpu, (CUDA_KERNELS / name).read_text(), GPU)
    if says is None:
        assert ev.correct, ev.failure
    else:
        assert not ev.correct and ev.stage == "timing" and says in ev.failure, (ev.stage, ev.failure)


@pytest.mark.gpu
def test_on_gpu_work_placed_beside_the_flush_is_timed_in_full_when_replayed(on_gpu, monkeypatch):
    """Issue 49's accepted attack: its real work added as a node beside the L2 flush of the timing graph. Replayed
    apart from its host code it has no flush to hide beside: its calls take what the honest seed's take."""
    from kevolve.judge.evaluator.harness import evaluate
    monkeypatch.setenv("KEVOLVE_CUDA_REPLAY", "1")
    attack = evaluate(on_gpu, (CUDA_KERNELS / "beside_the_flush.cu").read_text(), GPU)
    honest = evaluate(on_gpu, (CUDA_KERNELS / "honest.cu").read_text(), GPU)
    assert attack.correct and honest.correct, (attack.failure, honest.failure)
    for a, h in zip(_kernel_ms(attack), _kernel_ms(honest)):
        assert a > 0.8 * h, (_kernel_ms(attack), _kernel_ms(honest))


@pytest.mark.gpu
def test_on_gpu_a_kernel_in_clusters_of_sixteen_is_replayed(monkeypatch):
    """layernorm_fwd's best kernel runs rows of 8,193–131,072 elements in 16-block clusters (non-portable: its host code
    allows them). Replayed apart from that host code it must still launch, be correct and keep its speed."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from kevolve.task import load_task
    task = load_task("layernorm_fwd")
    _keeps_its_speed_replayed(task, (task.dir / "best" / "cuda.cu").read_text(),
                              Options(target="cuda", shapes="small", baselines=("eager",), timeout=120), monkeypatch)
