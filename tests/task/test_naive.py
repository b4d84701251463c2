"""The naive writer (kevolve/task/naive.py, naive_ops.py, naive_source.py): a torch reference becomes loops whose CPU
kernel, built by g++ and called through the C ABI, gives the float64 reference's answer at sizes other than the ones
it was traced at (odd ones, 1); its CUDA kernel passes the static rules; what it does not cover is refused by name."""
from __future__ import annotations

import ctypes
import subprocess
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from kevolve.judge.static import rules
from kevolve.task import naive_source
from kevolve.task.naive import NaiveError, lower

BN = [("x", ("B", "N"), "float32")]
OUT_BN = [("out", ("B", "N"), "float32")]
CASES = {   # name: (reference, inputs, sizes, scalars, outputs)
    "softmax": (lambda x, **v: torch.softmax(x, dim=-1), BN, ["B", "N"], {}, OUT_BN),
    "log_softmax over dim 0": (lambda x, **v: F.log_softmax(x, dim=0), BN, ["B", "N"], {}, OUT_BN),
    "silu": (lambda x, **v: F.silu(x), BN, ["B", "N"], {}, OUT_BN),
    "gelu tanh, clamp": (lambda x, **v: F.gelu(x, approximate="tanh").clamp(-0.5, 2.0), BN, ["B", "N"], {}, OUT_BN),
    "layer norm, eps a scalar": (
        lambda x, w, b, **v: F.layer_norm(x, (v["N"],), w, b, v["eps"]),
        [("x", ("B", "N"), "float32"), ("w", ("N",), "float32"), ("b", ("N",), "float32")], ["B", "N"],
        {"eps": 1e-5}, OUT_BN),
    "linear (addmm, permute)": (
        lambda x, w, b, **v: torch.relu(F.linear(x, w, b)),
        [("x", ("B", "I"), "float32"), ("w", ("O", "I"), "float32"), ("b", ("O",), "float32")], ["B", "I", "O"],
        {}, [("out", ("B", "O"), "float32")]),
    "batched matmul through views": (
        lambda a, b, **v: a @ b, [("a", ("B", "M", "K"), "float32"), ("b", ("K", "N"), "float32")],
        ["B", "M", "K", "N"], {}, [("out", ("B", "M", "N"), "float32")]),
    "mean over std, keepdim": (lambda x, **v: x.mean(dim=1, keepdim=True) / x.std(dim=1, keepdim=True), BN,
                               ["B", "N"], {}, [("out", ("B", "1"), "float32")]),
    "where, broadcast rows, a full reduction": (
        lambda x, r, **v: torch.where(x > r, x * 2.0, x - r) + x.sum(), [("x", ("B", "N"), "float32"),
                                                                          ("r", ("N",), "float32")],
        ["B", "N"], {}, OUT_BN),
}


def _task(inputs, sizes, scalars, outputs):
    spec = lambda n: SimpleNamespace(name=n, ctype=lambda: "float")       # noqa: E731
    return SimpleNamespace(inputs=[spec(n) for n, _, _ in inputs], outputs=[spec(n) for n, _, _ in outputs],
                           sizes=sizes, scalars=[SimpleNamespace(name=s, type="float") for s in scalars],
                           direction="forward")


def _dims(shape, values):
    return [int(d) if d.isdigit() else values[d] for d in shape]


FAST = ("softmax", "layer norm, eps a scalar", "linear (addmm, permute)")     # the rest: slow (a build each)


@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in CASES])
def test_the_cpu_kernel_gives_the_references_answer_at_sizes_it_was_not_traced_at(tmp_path, name):
    reference, inputs, sizes, scalars, outputs = CASES[name]
    low = lower(reference, inputs, sizes, scalars, outputs)
    task = _task(inputs, sizes, scalars, outputs)
    source = naive_source.cpu(task, low)
    assert rules.check(source, "cpu").ok and rules.check(naive_source.cuda(task, low), "cuda").ok
    (tmp_path / "k.cpp").write_text(source)
    subprocess.run(["g++", "-O1", "-fopenmp", "-shared", "-fPIC", str(tmp_path / "k.cpp"), "-o",
                    str(tmp_path / "k.so")], check=True, capture_output=True)
    lib = ctypes.CDLL(str(tmp_path / "k.so"))
    lib.forward.restype = ctypes.c_int
    for values, eps in (({"B": 5, "N": 33, "I": 7, "O": 9, "M": 3, "K": 11}, 1e-3),
                        ({"B": 1, "N": 1, "I": 1, "O": 1, "M": 1, "K": 1}, 0.5)):
        scal = {k: eps for k in scalars}
        gen = torch.Generator().manual_seed(1)
        ins = [torch.randn(_dims(s, values), generator=gen) for _, s, _ in inputs]
        outs = [torch.full(_dims(s, values), float("nan")) for _, s, _ in outputs]
        from kevolve.task.expr import eval_expr
        ws = torch.empty(max(1, eval_expr(low.workspace_bytes(), values) // 8), dtype=torch.float64)
        args = [ctypes.c_void_p(t.data_ptr()) for t in ins + outs] + [ctypes.c_int64(values[s]) for s in sizes]
        args += [ctypes.c_float(v) for v in scal.values()] + [ctypes.c_void_p(ws.data_ptr()), ctypes.c_int64(0)]
        assert lib.forward(*args) == 0
        want = reference(*[t.double() for t in ins], **values, **scal)
        torch.testing.assert_close(outs[0].double(), want.reshape(outs[0].shape), atol=1e-5, rtol=1e-5,
                                   equal_nan=True)


@pytest.mark.parametrize("fn,op", [(lambda x, **v: torch.cumsum(x, dim=1), "cumsum"),
                                   (lambda x, **v: torch.sort(x, dim=1).values, "sort")])
def test_an_operation_not_covered_is_refused_by_name(fn, op):
    with pytest.raises(NaiveError, match=rf"aten\.{op}.*not covered"):
        lower(fn, BN, ["B", "N"], {}, OUT_BN)


def test_a_non_float_input_is_refused():
    with pytest.raises(NaiveError, match="float32 inputs only"):
        lower(lambda x, **v: x * 2, [("x", ("B",), "int64")], ["B"], {}, [("out", ("B",), "float32")])
