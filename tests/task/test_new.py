"""Your own op in minutes (kevolve/task/new.py, kevolve/cli/task_new.py): a torch function and its inputs become a
task folder that loads, with the C signature in its prompt, naive seeds listed, what to fill in and a domain block;
a file that cannot be a task is refused with what to write and leaves nothing behind; nothing is overwritten. End to
end (slow): `python -m kevolve.tasks new` judges the CPU seed correct, and a CPU search from it finishes."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from kevolve.task.load import load_task
from kevolve.task.new import new_task, unlist
from kevolve.task.problem import ProblemError

ROOT = Path(__file__).resolve().parents[2]
SILU = '''"""SiLU: x * sigmoid(x), elementwise."""
import torch
import torch.nn.functional as F

B, N = 32, 1000


def forward(x):
    return F.silu(x)


def get_inputs():
    return [torch.randn(B, N) * 4]
'''


def write(tmp_path: Path, text: str, name: str = "op.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_function_becomes_a_task_that_loads_with_its_seeds(tmp_path):
    created = new_task("silu", write(tmp_path, SILU), tmp_path / "tasks")
    folder = created.folder
    task = load_task(folder)
    assert (task.name, task.sizes, [s.name for s in task.inputs], [s.name for s in task.outputs]) == \
        ("silu", ("B", "N"), ["x"], ["out"])
    assert created.seeds == {"cpu": "cpu.cpp", "cuda": "cuda.cu"} and created.no_seed is None
    assert [p.name for p in task.seed_paths("cpu")] == ["cpu.cpp"]
    case = task.configs("small")[0]
    x = torch.randn(case.size_dict["B"], case.size_dict["N"], dtype=torch.float64)
    got = task.reference(x, **case.size_dict)
    torch.testing.assert_close(got[0] if isinstance(got, (list, tuple)) else got, F.silu(x))
    raw = yaml.safe_load((folder / "task.yaml").read_text())
    assert raw["description"] == "SiLU: x * sigmoid(x), elementwise." and "imported_from" not in raw
    assert raw["domain"]["sizes"] == {"B": {"min": 1, "max": 128}, "N": {"min": 1, "max": 4000}}
    text = (folder / "task.yaml").read_text()
    assert "What to fill in" in text and "python -m kevolve.tasks check silu" in text
    prompt = (folder / "prompt.md").read_text()
    assert 'extern "C" int forward(const float* x, float* out, int64_t B, int64_t N, void* workspace' in prompt
    assert "Compute what `forward` computes" in prompt and "added by" not in prompt
    unlist(folder, "cuda")
    assert list(load_task(folder).seeds) == ["cpu"]
    assert (folder / "task.yaml").read_text().startswith("# Written by `python -m kevolve.tasks new silu")


@pytest.mark.parametrize("text,why", [
    ("import torch\nB = 4\ndef get_inputs():\n    return [torch.randn(B)]\n", "defines no `forward` function"),
    ("import torch\nB = 4\ndef forward(x):\n    return x\n", "defines no get_inputs"),
    ("import torch\nB = 4\ndef forward(x):\n    return torch.nn.functional.dropout(x, 0.5, True)\n"
     "def get_inputs():\n    return [torch.randn(B, 64)]\n", "not deterministic|different outputs"),
])
def test_a_file_that_cannot_be_a_task_is_refused_and_leaves_nothing(tmp_path, text, why):
    with pytest.raises(ProblemError, match=why):
        new_task("op", write(tmp_path, text), tmp_path / "tasks")
    assert not (tmp_path / "tasks" / "op").exists()


def test_nothing_is_overwritten(tmp_path):
    (tmp_path / "tasks" / "silu").mkdir(parents=True)
    with pytest.raises(ProblemError, match="exists"):
        new_task("silu", write(tmp_path, SILU), tmp_path / "tasks")
    assert not any((tmp_path / "tasks" / "silu").iterdir())


def test_an_op_the_naive_writer_cannot_follow_says_why_and_the_task_still_loads(tmp_path):
    text = SILU.replace("return F.silu(x)", "return torch.cumsum(x, dim=1)")
    created = new_task("scan", write(tmp_path, text), tmp_path / "tasks")
    assert created.seeds == {} and "aten.cumsum" in created.no_seed
    assert load_task(created.folder).seeds == {}


@pytest.mark.slow
def test_tasks_new_to_a_finished_cpu_search(tmp_path):
    """The commands docs/tasks.md shows: `tasks new`, then a CPU search from the naive seed."""
    source = write(tmp_path, SILU, "silu.py")
    new = subprocess.run([sys.executable, "-m", "kevolve.tasks", "new", "silu", "--from", str(source), "--out",
                          str(tmp_path / "tasks")], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert new.returncode == 0, new.stdout + new.stderr
    assert "seeds/cpu.cpp: correct on every configuration of the small set" in new.stdout
    assert "seeds/cuda.cu: passes the static rules" in new.stdout
    run = subprocess.run([sys.executable, "-m", "kevolve", f"task={tmp_path / 'tasks' / 'silu'}",
                          "resources.target=cpu", "search.candidates=4", "search.reps=5", "search.budget_s=0.02",
                          "search.baselines=[eager]", f"run_dir={tmp_path / 'run'}", "progress=false"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["task"] == "silu" and summary["candidates"] == 4 and summary["best"]["confirmed"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("op", ["F.silu(x)", "torch.softmax(x, dim=-1)", "F.layer_norm(x, (N,)) * 2 + x.mean()"])
def test_the_naive_cuda_seed_is_correct_on_a_gpu(tmp_path, op):
    """The CUDA seed `tasks new` writes (compiled, never run, on a host without a GPU), judged on one."""
    from kevolve.judge.evaluator.harness import evaluate
    from kevolve.judge.options import Options
    created = new_task("op", write(tmp_path, SILU.replace("F.silu(x)", op)), tmp_path / "tasks")
    task = load_task(created.folder)
    ev = evaluate(task, (created.folder / "seeds" / "cuda.cu").read_text(),
                  Options(target="cuda", shapes="bench", time_kernel=False))
    assert ev.correct, ev.failure


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found")
@pytest.mark.parametrize("op", ["F.silu(x)", "torch.softmax(x, dim=-1)", "F.layer_norm(x, (N,)) * 2 + x.mean()"])
def test_the_naive_cuda_seed_is_correct_under_the_cpu_emulator(tmp_path, op):
    """The CUDA seed `tasks new` writes, run where no GPU is: under the CPU emulator of CUDA that checks the shipped
    CUDA seeds (tests/task/test_seeds.py: every thread a fiber, blocks in both orders), on the small set's
    configurations, twice each with new inputs in the same buffers, outputs and workspace poisoned, every buffer
    between NaN guards."""
    from kevolve.task.abi import CKernel
    from test_seeds import emulated_source, run_kernel
    created = new_task("op", write(tmp_path, SILU.replace("F.silu(x)", op)), tmp_path / "tasks")
    task = load_task(created.folder)
    (tmp_path / "k.cpp").write_text(emulated_source((created.folder / "seeds" / "cuda.cu").read_text()))
    subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-fno-gnu-unique", "-w", "-o",
                    str(tmp_path / "k.so"), str(tmp_path / "k.cpp")], check=True, capture_output=True)
    kernel = CKernel(str(tmp_path / "k.so"), task, "cuda")
    configs = [c for c in task.configs("small") if c.seed == task.configs("small")[0].seed]
    for reverse in (0, 1):
        kernel.lib.emu_set_order(reverse)
        assert run_kernel(task, kernel, configs, cuda_abi=True) == []
