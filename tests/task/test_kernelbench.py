"""KernelBench import (`kevolve.task.kernelbench`, `kernelbench_folder`, `problem`): a problem file becomes a task
folder that loads; its reference is Model.forward (float64, parameters drawn by torch) exactly; sizes follow the
file's constants (tuples and derived constants included) and the small set is scaled with odd held-out sizes;
importing again gives the same bytes; files kevolve cannot judge are refused with the reason; an imported task
judges a C-ABI CPU kernel through the real harness. The problem files are written here, in KernelBench's format.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

from kevolve.cli.tasks import main
from kevolve.task.kernelbench import SMALL_ELEMENTS, analyse, task_name
from kevolve.task.kernelbench_folder import import_file
from kevolve.task.problem import ProblemError
from kevolve.task.load import load_task

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"

SCALED_TANH = HEAD + '''class Model(nn.Module):
    """Scales the hyperbolic tangent of its input."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.tanh(x) * self.scale


batch_size = 64
features = 20000
scale = 1.5


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [scale]
'''

LINEAR = HEAD + '''class Model(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.shift = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x):
        return torch.relu(self.fc(x)) + self.shift


batch_size, in_features = 96, 2048
out_features = 1024
bias_shape = (out_features,)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, bias_shape]
'''

POOL = HEAD + '''class Model(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size, stride=1)

    def forward(self, x):
        return self.pool(x)


batch_size = 4
channels = 3
height, width = 30, 50
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size]
'''

BATCHNORM = HEAD + '''class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        return self.bn(x)


batch_size = 32
features = 24


def get_inputs():
    return [torch.randn(batch_size, features) * 3 + 1]


def get_init_inputs():
    return [features]
'''

LOSS = HEAD + '''class Model(nn.Module):
    def forward(self, predictions, targets):
        return F.cross_entropy(predictions, targets)


batch_size = 40
num_classes = 10


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
'''

GOOD_KERNEL = '''#include <math.h>
#include <stdint.h>
extern "C" int forward(const float* x, float* out, int64_t batch_size, int64_t features, float scale,
                       void* workspace, int64_t workspace_bytes) {
  for (int64_t i = 0; i < batch_size * features; ++i) out[i] = tanhf(x[i]) * scale;
  return 0;
}
'''
BAD_KERNEL = GOOD_KERNEL.replace("tanhf(x[i])", "(x[i] / (1.0f + fabsf(x[i])))")


def problem_file(tmp_path: Path, text: str, name: str = "7_Problem.py", folder: str = "level_1") -> Path:
    path = tmp_path / "kb" / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def with_constants(text: str, values: dict):
    """The problem file's module at other constants, by rewriting its source (independent of kevolve)."""
    for name, value in values.items():
        text, n = re.subn(rf"^{name} = .*$", f"{name} = {value}", text, flags=re.M)
        assert n == 1, name
    return module_from(text)


def module_from(text: str):
    spec = importlib.util.spec_from_loader(f"kb_test_{abs(hash(text))}", loader=None)
    mod = importlib.util.module_from_spec(spec)
    exec(compile(text, "<problem>", "exec"), mod.__dict__)
    return mod


def model_forward(mod, seed: int) -> list:
    """What KernelBench runs: get_inputs() and Model(*get_init_inputs()) under the seed, forward in float64."""
    torch.manual_seed(seed)
    inputs = mod.get_inputs()
    model = mod.Model(*mod.get_init_inputs()).double()
    with torch.no_grad():
        out = model(*[x.double() if x.is_floating_point() else x for x in inputs])
    return list(out) if isinstance(out, (tuple, list)) else [out]


def reference(task, case) -> list:
    inputs = task.make_inputs(case, "cpu", 0)
    up = {n: t.double() if t.is_floating_point() else t for n, t in inputs.items()}
    return task.call_reference(up, case)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- what a problem becomes
@pytest.mark.parametrize("text", [SCALED_TANH, LINEAR, POOL, BATCHNORM, LOSS],
                         ids=["tanh", "linear", "pool", "batchnorm", "loss"])
def test_imported_reference_is_model_forward_exactly(tmp_path, text):
    task = load_task(import_file(problem_file(tmp_path, text), tmp_path / "tasks"))
    case = task.configs("bench")[0]
    assert case.seed == 0
    for got, want in zip(reference(task, case), model_forward(module_from(text), seed=0)):
        assert got.dtype == want.dtype == (torch.float64 if want.is_floating_point() else want.dtype)
        assert torch.equal(got.reshape(want.shape), want)


def test_small_set_follows_the_constants_and_stays_small(tmp_path):
    task = load_task(import_file(problem_file(tmp_path, SCALED_TANH), tmp_path / "tasks"))
    assert task.sizes == ("batch_size", "features") and [s.name for s in task.scalars] == ["scale"]
    small = [c for c in task.configs("small") if c.seed == 0]
    assert [c.size_dict for c in small] == [{"batch_size": 64, "features": 5000}, {"batch_size": 65, "features": 5001}]
    assert [c.heldout for c in small] == [False, True]
    case = small[1]
    want = model_forward(with_constants(SCALED_TANH, case.size_dict), seed=0)
    assert torch.equal(reference(task, case)[0], want[0])
    assert task.floor(case.size_dict) == 2 * 4 * 65 * 5001


def test_parameters_are_inputs_and_derived_constants_follow(tmp_path):
    imp = analyse(problem_file(tmp_path, LINEAR))
    assert [n for n, _, _ in imp.inputs] == ["x", "shift", "fc_weight", "fc_bias"]     # named_parameters() order
    assert imp.parameters == ("shift", "fc_weight", "fc_bias")
    assert dict((n, s) for n, s, _ in imp.inputs)["shift"] == ("out_features",)     # bias_shape = (out_features,)
    assert imp.outputs == (("out", ("batch_size", "out_features"), "float32"),)
    (small, _, _), (odd, _, held) = imp.shape_sets["small"]
    elements = lambda v: (v["batch_size"] * v["in_features"] + v["out_features"] * (v["in_features"] + 2)  # noqa: E731
                          + v["batch_size"] * v["out_features"])
    assert elements(small) <= SMALL_ELEMENTS < elements(dict(imp.shape_sets["bench"][0][0]))
    assert held and all(odd[k] % 2 for k in ("batch_size", "in_features", "out_features"))
    task = load_task(import_file(problem_file(tmp_path, LINEAR), tmp_path / "tasks"))
    case = task.configs("small")[0]
    for got, want in zip(reference(task, case), model_forward(with_constants(LINEAR, {
            "batch_size, in_features": f"{case.size_dict['batch_size']}, {case.size_dict['in_features']}",
            "out_features": case.size_dict["out_features"]}), seed=0)):
        assert torch.equal(got, want)


def test_dimensions_no_constant_names_become_sizes_of_their_own(tmp_path):
    task = load_task(import_file(problem_file(tmp_path, POOL), tmp_path / "tasks"))
    assert task.sizes == ("batch_size", "channels", "height", "width", "kernel_size", "out_dim2", "out_dim3")
    assert task.outputs[0].shape == ("batch_size", "channels", "out_dim2", "out_dim3")
    for case in task.configs("bench") + task.configs("small"):
        s = case.size_dict
        assert (s["out_dim2"], s["out_dim3"]) == (s["height"] - s["kernel_size"] + 1, s["width"] - s["kernel_size"] + 1)


def test_scalar_outputs_and_integer_inputs(tmp_path):
    task = load_task(import_file(problem_file(tmp_path, LOSS), tmp_path / "tasks"))
    assert [(s.name, s.dtype) for s in task.inputs] == [("predictions", "float32"), ("targets", "int64")]
    assert task.outputs[0].shape == ()
    inputs = task.make_inputs(task.configs("small")[0], "cpu", 1)
    assert inputs["targets"].dtype == torch.int64 and int(inputs["targets"].max()) < 10


def test_names_carry_the_level_and_the_stem():
    assert task_name(Path("kb/level_1/task_19/19_ReLU.py")) == "kb_l1_19_relu"
    assert task_name(Path("somewhere/100_HingeLoss.py")) == "kb_100_hingeloss"


# ---------------------------------------------------------------- round trips and overwriting
def test_import_round_trips_byte_for_byte(tmp_path):
    path = problem_file(tmp_path, LINEAR)
    first = import_file(path, tmp_path / "a")

    def read(folder):
        return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    files = read(first)
    assert set(files) == {"task.yaml", "reference.py", "problem.py", "prompt.md", "seeds/cpu.cpp", "seeds/cuda.cu"}
    again = import_file(path, tmp_path / "a")               # over itself
    other = import_file(path, tmp_path / "b")               # elsewhere
    for folder in (again, other):
        assert read(folder) == files
    assert files["problem.py"] == path.read_bytes()


def test_import_never_overwrites_a_task_it_did_not_make(tmp_path):
    path = problem_file(tmp_path, SCALED_TANH)
    mine = tmp_path / "tasks" / task_name(path)
    mine.mkdir(parents=True)
    (mine / "task.yaml").write_text("name: handwritten\n")
    with pytest.raises(ProblemError, match="did not make"):
        import_file(path, tmp_path / "tasks")
    assert (mine / "task.yaml").read_text() == "name: handwritten\n"


def test_prompt_shows_the_program_and_the_c_prototype(tmp_path):
    task = load_task(import_file(problem_file(tmp_path, LINEAR), tmp_path / "tasks"))
    prompt = task.prompt()
    assert "torch.relu(self.fc(x)) + self.shift" in prompt
    assert ('extern "C" int forward(const float* x, const float* shift, const float* fc_weight, const float* fc_bias, '
            'float* out, int64_t batch_size, int64_t in_features, int64_t out_features') in prompt
    assert "`fc_weight`: input (a parameter of the Model" in prompt


# ---------------------------------------------------------------- the `drawn` initialiser (kevolve.task.spec)
DRAWN_YAML = """name: drawn_task
direction: forward
sizes: [N]
inputs:
  - {name: x, shape: [N], init: drawn}
outputs:
  - {name: out, shape: [N]}
floor_bytes: "8 * N"
tolerance: {atol: 1.0e-5, rtol: 1.0e-5}
domain: {sizes: {N: {min: 1, max: 64}}, max_bytes: {cpu: 1 MiB, cuda: 1 MiB}}
shapes:
  small: {configs: [{N: 5}]}
"""


@pytest.mark.parametrize("draw,why", [
    ("", "defines no draw_inputs"),
    ("def draw_inputs(seed, device, N):\n    return {'x': torch.zeros(N + 1)}\n", r"gave input x \(6,\)"),
    ("def draw_inputs(seed, device, N):\n    return {'y': torch.zeros(N)}\n", "gave input x nothing"),
])
def test_drawn_inputs_need_a_draw_inputs_that_gives_the_declared_tensors(tmp_path, draw, why):
    (tmp_path / "task.yaml").write_text(DRAWN_YAML)
    (tmp_path / "reference.py").write_text("import torch\n\n\ndef reference(x, *, N):\n    return x\n\n\n" + draw)
    from kevolve.task.spec import TaskError
    with pytest.raises(TaskError, match=why):
        task = load_task(tmp_path)
        task.make_inputs(task.configs("small")[0], "cpu", 0)


# ---------------------------------------------------------------- refusals
REFUSED = {
    "dropout": (SCALED_TANH.replace("return torch.tanh(x) * self.scale", "return F.dropout(x, 0.5, training=True)"),
                "not deterministic|different outputs"),
    "in_place": (SCALED_TANH.replace("return torch.tanh(x) * self.scale", "return x.tanh_()"), "changes its input x "
                                                                                               "in place"),
    "not_a_tensor_out": (SCALED_TANH.replace("return torch.tanh(x) * self.scale", "return float(x.sum())"),
                         "returns float"),
    "half": (SCALED_TANH.replace("torch.randn(batch_size, features)", "torch.randn(batch_size, features, "
                                                                      "dtype=torch.float16)"),
             "float16"),
    "int_input": (SCALED_TANH.replace("return [torch.randn(batch_size, features)]",
                                      "return [torch.randn(batch_size, features), 3]"),
                  "not a tensor"),
    "no_init_inputs": (SCALED_TANH.replace("def get_init_inputs():", "def get_init_args():"), "get_init_inputs"),
    "name_clash": (SCALED_TANH.replace("scale = 1.5\n", "scale = 1.5\nout = 2\n"), "used twice"),
    "data_dependent": (SCALED_TANH.replace("return torch.tanh(x) * self.scale", "return x[x > 0]"), "depend on the "
                                                                                                    "data"),
    "syntax": ("def broken(:\n", "does not parse"),
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_files_kevolve_cannot_judge_are_refused_with_the_reason(tmp_path, kind):
    text, why = REFUSED[kind]
    with pytest.raises(ProblemError, match=why):
        import_file(problem_file(tmp_path, text), tmp_path / "tasks")
    assert not (tmp_path / "tasks").exists() or not any((tmp_path / "tasks").iterdir())


def test_cli_imports_and_reports_refusals(tmp_path, capsys):
    good, bad = problem_file(tmp_path, SCALED_TANH), problem_file(tmp_path, REFUSED["dropout"][0], "8_Dropout.py")
    assert main(["import", str(good), "--out", str(tmp_path / "tasks"), "--no-check"]) == 0
    assert (tmp_path / "tasks" / "kb_l1_7_problem" / "task.yaml").is_file()
    assert main(["import", str(good), str(bad), "--out", str(tmp_path / "tasks"), "--no-check"]) == 1
    assert "refused" in capsys.readouterr().err
    assert main(["import", str(good), str(bad), "--name", "x"]) == 2


# ---------------------------------------------------------------- through the judge
def test_an_imported_task_judges_a_c_kernel_in_the_worker(tmp_path):
    """The worker (confined, another process) draws the inputs through draw_inputs; a right kernel passes, a
    slightly wrong one fails naming the output."""
    from kevolve.judge.evaluator.harness import evaluate
    from kevolve.judge.options import Options
    task = load_task(import_file(problem_file(tmp_path, SCALED_TANH), tmp_path / "tasks"))
    options = Options(target="cpu", shapes="small", time_kernel=False, timeout=60)
    good, bad = evaluate(task, GOOD_KERNEL, options), evaluate(task, BAD_KERNEL, options)
    assert good.correct, good.failure
    assert not bad.correct and "output out" in bad.failure


def test_an_imported_task_gets_a_naive_seed_listed_for_each_target(tmp_path):
    """The search can start on the CPU without a seed written by hand (kevolve/task/naive.py)."""
    folder = import_file(problem_file(tmp_path, LINEAR), tmp_path / "tasks")
    task = load_task(folder)
    assert [p.name for p in task.seed_paths("cpu")] == ["cpu.cpp"] and [p.name for p in task.seed_paths("cuda")] == \
        ["cuda.cu"]
    assert task.workspace(task.configs("small")[0].size_dict) > 0          # its temporaries, in the workspace


@pytest.mark.slow
def test_the_cli_judges_an_imported_naive_seed_correct(tmp_path, capsys):
    assert main(["import", str(problem_file(tmp_path, LINEAR)), "--out", str(tmp_path / "tasks")]) == 0
    out = capsys.readouterr().out
    assert "seeds/cpu.cpp: correct on every configuration of the small set" in out, out
