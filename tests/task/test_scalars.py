"""Per-configuration scalars: a configuration may set any scalar the task declares (eps) next to its sizes;
the value reaches the reference, the baseline and the kernel (both ABIs take it per call); it names the
configuration only when it differs from the default, so ids at the defaults stay what they were; a wrong key
or a wrong type is a TaskError naming it. The norm tasks vary eps so that a kernel that hard-codes one value
fails on each shape set.
"""
from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from kevolve.judge.build import build
from kevolve.task import Case, TaskError, load_task
from kevolve.task.abi import CKernel, TorchKernel
from test_tasks import _listed, up, worst_ratio   # the harness's tolerance test, shared

TINY = Path(__file__).resolve().parent.parent / "kernels" / "tasks" / "layernorm_tiny"
NORMS = ["layernorm_fwd", "layernorm_bwd", "rmsnorm_fwd", "rmsnorm_bwd"]


def variant(tmp_path: Path, configs: list[dict], scalars: list[dict] | None = None):
    """layernorm_tiny with its small set's configurations (and optionally its scalars) replaced."""
    folder = tmp_path / "task"
    shutil.copytree(TINY, folder)
    raw = yaml.safe_load((folder / "task.yaml").read_text())
    raw["shapes"]["small"]["configs"] = configs
    if scalars is not None:
        raw["scalars"] = scalars
    # the domain as wide as these tests' scalars (what a domain refuses is tests/task/test_domain.py's)
    raw["domain"]["scalars"] = {s["name"]: ({"min": -100, "max": 100} if s.get("type") == "int" else
                                            {"min": 1.0e-12, "max": 100.0}) for s in raw["scalars"]}
    (folder / "task.yaml").write_text(yaml.safe_dump(raw))
    return load_task(folder)


# ---------------------------------------------------------------- loading and ids
def test_a_configuration_sets_a_scalar_and_the_others_keep_the_default(tmp_path):
    t = variant(tmp_path, [{"B": 2, "N": 64}, {"B": 3, "N": 65, "eps": 1.0e-3},
                           {"B": 4, "N": 66, "eps": 1.0e-5}, {"B": 5, "N": 67, "eps": 0.01, "label": "five"}])
    first, custom, same, labelled = (next(c for c in t.configs("small") if c.size_dict["B"] == b and c.init == "random"
                                          and c.seed == 0) for b in (2, 3, 4, 5))
    assert first.scalars == (("eps", 1e-5),) and custom.scalars == (("eps", 1e-3),)
    assert t.scalar_values() == {"eps": 1e-5} and t.scalar_values(custom) == {"eps": 1e-3}
    assert t.scalar_values(first) == {"eps": 1e-5} == t.scalar_values(same)
    assert first.id == "B=2,N=64/random/s0" and same.id == "B=4,N=66/random/s0"     # defaults: ids unchanged
    assert custom.id == "B=3,N=65,eps=0.001/random/s0" and labelled.id == "five,eps=0.01/random/s0"
    assert len({c.id for c in t.configs("small")}) == len(t.configs("small"))


def test_two_configurations_of_one_shape_differ_by_their_scalars(tmp_path):
    t = variant(tmp_path, [{"B": 2, "N": 64}, {"B": 2, "N": 64, "eps": 0.5}])
    assert len({c.shape_id for c in t.configs("small")}) == 2
    assert len({c.id for c in t.configs("small")}) == len(t.configs("small"))


def test_an_int_scalar_takes_ints_only(tmp_path):
    ints = [{"name": "eps", "type": "float", "value": 1.0e-5}, {"name": "k", "type": "int", "value": 3}]
    t = variant(tmp_path, [{"B": 2, "N": 64, "k": 5}, {"B": 3, "N": 64}], ints)
    a, b = t.configs("small")[0], t.configs("small")[-1]
    assert t.scalar_values(a) == {"eps": 1e-5, "k": 5} and isinstance(t.scalar_values(a)["k"], int)
    assert a.id.startswith("B=2,N=64,k=5/") and t.scalar_values(b)["k"] == 3
    with pytest.raises(TaskError, match=r"k is an int scalar, got 2\.5"):
        variant(tmp_path / "x", [{"B": 2, "N": 64, "k": 2.5}], ints)


def test_a_float_scalar_widens_an_int_and_a_hand_made_case_takes_the_defaults(tmp_path):
    t = variant(tmp_path, [{"B": 2, "N": 64, "eps": 1}])
    value = t.scalar_values(t.configs("small")[0])["eps"]
    assert value == 1.0 and isinstance(value, float)
    assert t.scalar_values(Case((("B", 2), ("N", 64)), "random", 0)) == {"eps": 1e-5}


@pytest.mark.parametrize("config, scalars, message", [
    ({"B": 2, "N": 64, "epsilon": 1.0e-3}, None, r"unknown key 'epsilon'"),
    ({"B": 2, "N": 64, "eps": "1e-6"}, None, r"eps is a float scalar, got '1e-6' \(YAML reads 1e-6 as a string: "
                                              r"write 1\.0e-6\)"),
    ({"B": 2, "N": 64, "eps": True}, None, r"eps is a float scalar, got True"),
    ({"B": 2, "N": 64, "eps": float("nan")}, None, r"eps is a float scalar, got nan"),
    ({"B": 2, "eps": 1.0e-3}, None, r"sizes must be exactly \['B', 'N'\] \(missing \['N'\]\)"),
    ({"B": 2, "N": 64}, [{"name": "eps", "type": "float", "value": "small"}], r"scalar eps: eps is a float scalar"),
    ({"B": 2, "N": 64}, [{"name": "N", "type": "int", "value": 1}], r"scalar N: a scalar's name must differ"),
    ({"B": 2, "N": 64}, [{"name": "eps", "type": "half", "value": 1.0}], r"type 'half' not one of"),
])
def test_a_malformed_scalar_is_a_task_error_naming_it(tmp_path, config, scalars, message):
    with pytest.raises(TaskError, match=message) as e:
        variant(tmp_path, [config], scalars)
    assert "task.yaml" in str(e.value)


def test_robust_kbench_configurations_keep_their_ids():
    ids = [c.id for c in load_task("layernorm_fwd").configs("bench")[:2]]
    assert ids == ["B=1,(1,256,256)/random/s0", "B=1,(1,256,256)/identity/s0"]
    assert load_task("rmsnorm_fwd").configs("bench")[4].id == "BT=16384,(4096,),eps=1e-08/random/s0"


# ---------------------------------------------------------------- the values reach every callee
def test_reference_and_baseline_take_the_configurations_scalars(tmp_path):
    t = variant(tmp_path, [{"B": 2, "N": 64, "eps": 4.0}])
    c = t.configs("small")[0]
    inputs = t.make_inputs(c, "cpu")
    x, w, b = (up(inputs)[n] for n in ("x", "weight", "bias"))
    by_hand = (x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, unbiased=False, keepdim=True) + 4.0) * w + b
    torch.testing.assert_close(t.call_reference(up(inputs), c)[0], by_hand)
    torch.testing.assert_close(t.call_baseline(inputs, c)[0].double(), by_hand, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="pass the Case"):
        t.call_reference(inputs, c.size_dict)


EPS_KERNEL = """#include <cstdint>
extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    for (int64_t i = 0; i < B * N; ++i) out[i] = eps;
    return 0;
}
"""


@pytest.mark.usefixtures("private_build_cache")
def test_the_c_abi_passes_each_calls_scalars_and_demands_them():
    t = load_task(TINY)
    built = build(EPS_KERNEL, "cpu")
    assert built.ok, built.error
    kernel, sizes = CKernel(built.lib_path, t, "cpu"), {"B": 2, "N": 3}
    inputs = {s.name: torch.zeros(t.shape(s, sizes)) for s in t.inputs}
    out = {"out": torch.full((2, 3), float("nan"))}
    for eps in (0.25, 1e-3):
        assert kernel(inputs, out, sizes, torch.empty(0, dtype=torch.uint8), scalars={"eps": eps}) == 0
        assert torch.equal(out["out"], torch.full((2, 3), eps, dtype=torch.float32))
    with pytest.raises(TypeError, match="scalars"):
        kernel(inputs, out, sizes, torch.empty(0, dtype=torch.uint8))


def test_the_torch_abi_passes_each_calls_scalars():
    class Extension:                      # a module object with robust-kbench's `forward(x, weight, bias, eps)`
        @staticmethod
        def forward(x, weight, bias, eps):
            return torch.full_like(x, eps)
    t = load_task(TINY)
    kernel, sizes = TorchKernel(Extension, t), {"B": 2, "N": 3}
    inputs = {s.name: torch.zeros(t.shape(s, sizes)) for s in t.inputs}
    out = {"out": torch.full((2, 3), float("nan"))}
    for eps in (0.5, 0.125):
        kernel(inputs, out, sizes, None, scalars={"eps": eps})
        assert torch.equal(out["out"], torch.full((2, 3), eps))


# ---------------------------------------------------------------- the norm tasks: a hard-coded eps fails
@functools.lru_cache(maxsize=None)
def _norm(name: str):
    return load_task(name)


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("shape_set", ["small", "bench"])
def test_a_kernel_that_hard_codes_eps_fails_on_the_set(name, shape_set):
    """For every eps the set uses, and 1e-5: a kernel that always uses it fails the tolerance on one of the set's
    cheap configurations (tiny init, seed 0; the set's others only add chances to fail)."""
    t = _norm(name)
    cases = t.configs(shape_set)
    values = {t.scalar_values(c)["eps"] for c in cases} | {1e-5}
    cheap = [c for c in cases if c.init == "tiny" and c.seed == 0 and c.size_dict["B"] * c.size_dict["N"] <= 140_000]
    caught = set()
    for c in cheap:
        inputs = up(t.make_inputs(c, "cpu"))
        refs = t.call_reference(inputs, c)
        args = [inputs[s.name] for s in t.inputs]
        for eps in values - caught:
            outs = t.reference(*args, **c.size_dict, eps=eps)
            if worst_ratio(t, _listed(outs), refs) > 1:
                caught.add(eps)
    assert caught == values, f"a kernel hard-coding eps={sorted(values - caught)} passes {name}/{shape_set}"


def test_a_resnet_block_that_hard_codes_eps_fails_on_the_small_set():
    """resnet_block_fwd's batch norms take eps too: its small set varies it (1e-5, 1e-3, 0.1), so a kernel that
    always uses one of them fails the tolerance on a configuration that uses another."""
    t = _norm("resnet_block_fwd")
    cases = t.configs("small")
    values = {t.scalar_values(c)["eps"] for c in cases}
    assert len(values) >= 3, values
    caught = set()
    for c in cases:
        inputs = up(t.make_inputs(c, "cpu"))
        refs = t.call_reference(inputs, c)
        args = [inputs[s.name] for s in t.inputs]
        for eps in values - caught:
            if (eps != t.scalar_values(c)["eps"]
                    and worst_ratio(t, _listed(t.reference(*args, **c.size_dict, eps=eps)), refs) > 1):
                caught.add(eps)
    assert caught == values, f"a kernel hard-coding eps={sorted(values - caught)} passes resnet_block_fwd/small"
