"""The exported CUDA op as a user uses it, on a GPU: a model whose LayerNorm and RMSNorm run it (outputs and gradients
against torch's modules, eager and torch.compile(fullgraph=True), opcheck, one warning per fallback), and its speed
against torch.nn.LayerNorm under torch.compile at each bench size its op was judged on (tests/export/op_speed.py;
printed, not asserted: timing is measured, never a test's verdict).

The runs: KEVOLVE_OP_RUNS="FWD,BWD" (two runs or best/ folders of layernorm_fwd and layernorm_bwd, e.g. the
lead's H200 searches), else two short searches made here (`search.wall_time_s=120` each, target cuda, or the seconds
KEVOLVE_OP_SEARCH_S gives). Run:

    python -m pytest -m gpu tests/export/test_export_gpu.py -s
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

pytestmark = pytest.mark.gpu


def runs(tmp_path: Path) -> tuple[str, str]:
    given = os.environ.get("KEVOLVE_OP_RUNS")
    if given:
        forward, backward = given.split(",")
        return forward, backward
    made = []
    for task in ("layernorm_fwd", "layernorm_bwd"):
        run_dir = tmp_path / task
        wall = os.environ.get("KEVOLVE_OP_SEARCH_S", "120")
        subprocess.run([sys.executable, "-m", "kevolve", f"task={task}", "resources.target=cuda",
                        f"search.wall_time_s={wall}", "progress=false", f"run_dir={run_dir}"], check=True, cwd=ROOT,
                       timeout=1800)
        made.append(str(run_dir))
    return made[0], made[1]


def test_the_cuda_op_in_a_model_and_its_speed_against_torch_compile(tmp_path):
    import torch
    assert torch.cuda.is_available(), "a gpu test: run it on a CUDA machine"
    forward, backward = runs(tmp_path)
    subprocess.run([sys.executable, "-m", "kevolve.export", forward, "--backward", backward, "-o",
                    str(tmp_path / "pkg")], check=True, cwd=ROOT)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(tmp_path / "site"), str(tmp_path / "pkg")], check=True)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "KEVOLVE_OPS_BUILD": str(tmp_path / "build"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    print((tmp_path / "pkg" / "README.md").read_text())
    for mode in ("kernels", "auto"):                 # the kernels on every size, then as the op decided
        done = subprocess.run([sys.executable, str(HERE / "user_model.py"), "--device", "cuda", "kevolve_layernorm"],
                              env={**env, "KEVOLVE_OPS": mode}, cwd=tmp_path, capture_output=True, text=True)
        print(done.stdout)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done = subprocess.run([sys.executable, str(HERE / "op_speed.py"), "kevolve_layernorm", "--device", "cuda"],
                          env=env, cwd=tmp_path, capture_output=True, text=True)
    print(done.stdout)
    assert done.returncode == 0, done.stderr[-3000:]
