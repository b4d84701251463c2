"""The torch ABI with a real torch extension, on the CPU: one C++ extension (tests/kernels/cpu/rkb_cpu_backward.cpp,
built once by torch.utils.cpp_extension, ~30 s on 2 cores) whose `backward` takes robust-kbench's arguments
for two tasks. A scalar loss's upstream gradient reaches it as a 0-dim tensor (its TORCH_CHECK refuses
anything else); layernorm's arguments come in the declared order and shapes (eps a Python float,
normalized_shape a tuple of ints, x as [B, *normalized_shape] — the extension checks all three); a
returned tensor of the wrong shape is refused naming the output; through the harness, correctness calls
and timed calls (stored into the checked buffers after each call returns) are judged like any kernel's.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from kevolve.judge import build as builder
from kevolve.judge.evaluator.harness import judge
from kevolve.judge.options import Options
from kevolve.task import Task, load_task
from kevolve.task.abi import TorchKernel

HERE = Path(__file__).resolve().parent.parent          # tests/
SOURCE = HERE / "kernels" / "cpu" / "rkb_cpu_backward.cpp"
FAST = Options(target="cpu", abi="torch", shapes="small", time_kernel=False, timeout=60)
TIMED = Options(target="cpu", abi="torch", shapes="small", baselines=("eager",), reps=4, budget_s=0.02, timeout=60)
torch.set_num_threads(2)


@pytest.fixture(scope="module")
def built(private_build_cache):
    b = builder.build(SOURCE.read_text(), "cpu", abi="torch")
    assert b.ok, b.error
    return b


@pytest.fixture(scope="module")
def ext(built):
    spec = importlib.util.spec_from_file_location(built.module_name, built.lib_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def narrowed(name: str, folder: Path, configs: list[dict], keep_torch_abi: bool = True) -> Task:
    """The task with its declaration, its small set replaced by `configs` (one init, one seed)."""
    t = load_task(name)
    raw = yaml.safe_load((t.dir / "task.yaml").read_text())
    raw.pop("seeds", None)
    if not keep_torch_abi:
        raw.pop("torch_abi")
    raw["shapes"] = {"small": {"configs": configs, "inits": [t.init_sets[-1]], "seeds": [0]}}
    folder.mkdir()
    (folder / "task.yaml").write_text(yaml.safe_dump(raw))
    (folder / "reference.py").write_text((t.dir / "reference.py").read_text())
    return load_task(folder)


def call(t: Task, kernel: TorchKernel) -> float:
    """Calls the kernel on the first configuration; the worst |error| / tolerance against the reference."""
    c = t.configs("small")[0]
    sizes, inputs = c.size_dict, t.make_inputs(c, "cpu")
    outputs = {s.name: torch.full(t.shape(s, sizes), float("nan")) for s in t.outputs}
    kernel(inputs, outputs, sizes, torch.empty(0), scalars=t.scalar_values(c), case=c)
    up = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    worst = 0.0
    for s, ref in zip(t.outputs, t.call_reference(up, c)):
        out = outputs[s.name].double()
        worst = max(worst, float(((out - ref).abs() / (t.atol + t.rtol * ref.abs())).max()))
    return worst


def test_a_scalar_loss_gradient_reaches_the_extension_as_a_0_dim_tensor(ext, tmp_path):
    t = narrowed("cross_entropy_bwd", tmp_path / "ce", [{"B": 17, "C": 10}])
    assert call(t, TorchKernel(ext, t)) <= 1
    flat = narrowed("cross_entropy_bwd", tmp_path / "ce_flat", [{"B": 17, "C": 10}], keep_torch_abi=False)
    with pytest.raises(RuntimeError, match=r"grad_output must be a scalar \(0-dim\), got 1 dims"):
        call(flat, TorchKernel(ext, flat))          # without the declaration: grad_out as the task's [1]


def test_layernorm_arguments_come_in_robust_kbench_order_and_shapes(ext, tmp_path):
    t = narrowed("layernorm_bwd", tmp_path / "ln", [{"B": 3, "N": 1024, "normalized_shape": [4, 16, 16]}])
    assert call(t, TorchKernel(ext, t)) <= 1


def test_a_wrong_returned_shape_is_refused_naming_the_output(ext, tmp_path):
    t = narrowed("cross_entropy_bwd", tmp_path / "ce", [{"B": 17, "C": 10}])
    with pytest.raises(ValueError, match=r"^output grad_logits: returned shape \(170,\), expected \(17, 10\)$"):
        call(t, TorchKernel(SimpleNamespace(backward=ext.backward_flat), t))


def test_arguments_the_extension_does_not_take_are_named(ext, tmp_path):
    t = narrowed("layernorm_bwd", tmp_path / "ln", [{"B": 2, "N": 64}])
    with pytest.raises(TypeError, match=r"`backward` does not take the task's torch-ABI arguments \(Tensor\[2, 64\] "
                                        r"float32, Tensor\[2, 64\] float32, Tensor\[64\] float32, "
                                        r"Tensor\[64\] float32, 1e-05, \(64,\)\): .*incompatible function arguments"):
        call(t, TorchKernel(SimpleNamespace(backward=ext.backward_flat), t))


def test_through_the_harness_correctness_and_timed_calls_are_judged(built, tmp_path):
    """The worker calls the extension with the declared arguments; timed calls' results reach the checked
    buffers (were they left out, their NaN poison would be a rejection)."""
    ce = narrowed("cross_entropy_bwd", tmp_path / "ce", [{"B": 17, "C": 10}, {"B": 5, "C": 1001}])
    ev = judge(ce, built.lib_path, TIMED, module=built.module_name)
    assert ev.correct, ev.failure
    assert all(m.kernel is not None and m.checked_calls > 0 for m in ev.measurements)
    ln = narrowed("layernorm_bwd", tmp_path / "ln", [
        {"B": 3, "N": 1024, "normalized_shape": [4, 16, 16]},
        {"B": 3, "N": 1024, "normalized_shape": [32, 32], "label": "B=3,(32,32)"},   # same sizes, other dims
        {"B": 2, "N": 1001}])
    ev = judge(ln, built.lib_path, FAST, module=built.module_name)
    assert ev.correct, ev.failure
    assert len(ev.measurements) == 3


class _PoolGraphs:
    """A stand-in for `timing.CudaClock` with the one property of CUDA graphs this test needs, on the CPU: a graph's
    replay rewrites, in place, the tensors its capture's calls returned (torch's graph pool), and no other graph's.
    `capture` makes the calls once, as capture does; a replay writes each of those tensors what the kernel would
    return now; queued and synced calls are made as they come."""
    def __init__(self, session, kernel):
        self.session, self.kernel, self.pools = session, kernel, {}

    def capture(self, call, n):
        graph = object()
        for i in range(n):
            call(i)
        self.pools[id(graph)] = list(self.session.returned.calls["kernel"][:n])
        return graph

    def replay(self, graph):
        for i, t in enumerate(self.pools[id(graph)]):
            t.copy_(self.kernel.run(i))
        return (0.0, 0.0)

    def queued(self, call):
        call()
        return (0.0, 0.0)

    synced = queued


def test_a_replay_stores_the_results_of_the_graph_replayed_not_of_the_last_captured():
    """On CUDA a torch-ABI kernel is captured twice — plainly and with the evaluator's canary — and each graph
    returns tensors of its own pool. A round that replays the plain graph must store the plain graph's tensors:
    storing the last capture's (the canaried twin's, not replayed that round) gave every timed call of every
    torch-ABI seed stale outputs on the GPU (stop 44). The session's own capture, rounds and stores, with stand-in
    graphs that behave as torch's pools do (`_PoolGraphs`)."""
    from kevolve.judge.worker import returned
    from kevolve.judge.worker.session import Session
    inputs = [torch.zeros(4) for _ in range(3)]                     # two graph calls and the latency call
    kernel = SimpleNamespace(run=lambda i: inputs[i].clone(), store=lambda r, outs: outs["out"].copy_(r))
    s = Session.__new__(Session)
    s.n, s.cuda, s.canary, s.checked, s.kernels = 2, False, 1e-6, ["kernel"], {"kernel": kernel}
    s.returned = returned.Returned(2)
    s.returned.track("kernel", 3)
    s.outs = {"kernel": [{"outputs": {"out": torch.full((4,), float("nan"))}} for _ in range(3)]}
    s.w, s.clock = SimpleNamespace(_sync=lambda: None), _PoolGraphs(s, kernel)

    def run(i):
        s.returned.set("kernel", i, kernel.run(i))
    s.calls = {"kernel": run}
    s.graphs = {"kernel": s._capture_graph("kernel", run)}
    s.canary_graphs = {"kernel": s._capture_graph("kernel", s._canaried(run))}   # its own pool, captured last
    for value, canary in ((1.0, ()), (2.0, ()), (3.0, (0, 1)), (4.0, ())):
        for t in inputs:
            t.fill_(value)
        s._cuda_round(["kernel"], canary=canary)
        s._store_returned()
        got = [float(s.outs["kernel"][i]["outputs"]["out"][0]) for i in range(3)]
        assert got == [value] * 3, (value, canary, got)
