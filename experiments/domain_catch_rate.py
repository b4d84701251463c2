"""How often one judgement's drawn configurations catch a kernel wrong beyond the listed ones (issue 46): each hostile
kernel of tests/adversarial/domain/ judged K times for correctness alone, every judgement with its own secret salt,
on a copy of its task whose `small` set keeps one cheap listed configuration (so a rejection is the drawn
configurations' work). Prints, per kernel, the rejections out of K, the configurations that caught it, and the
drawn phase's seconds; the honest seeds are judged the same way as the control.

    python experiments/domain_catch_rate.py [--k 20] [--out FILE]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
KERNELS = [("layernorm_fwd", "tests/adversarial/domain/eps_capped.cpp"),
           ("layernorm_fwd", "tests/adversarial/domain/onepass_long_rows.cpp"),
           ("layernorm_bwd", "tests/adversarial/domain/lowprec_big_batch.cpp"),
           ("layernorm_fwd", "tasks/layernorm_fwd/seeds/cpu.cpp"),
           ("layernorm_bwd", "tasks/layernorm_bwd/seeds/cpu.cpp")]


def one_config_copy(name: str, root: Path):
    from kevolve.task import load_task
    folder = root / name
    shutil.copytree(ROOT / "tasks" / name, folder, ignore=shutil.ignore_patterns("best"))
    raw = yaml.safe_load((folder / "task.yaml").read_text())
    raw["shapes"]["small"] = {"configs": [{"B": 2, "N": 1025}], "inits": ["random"], "seeds": [0]}
    (folder / "task.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_task(folder)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from kevolve.judge import build as builder
    from kevolve.judge.evaluator.harness import judge
    from kevolve.judge.evaluator.reuse import Reuse
    from kevolve.judge.options import Options
    options = Options(target="cpu", shapes="small", time_kernel=False, timeout=120)
    lines = [f"# {' '.join(sys.argv)}: one judgement = the listed configuration B=2,N=1025 and the drawn ones"]
    root = Path(tempfile.mkdtemp())
    tasks = {n: one_config_copy(n, root) for n in {t for t, _ in KERNELS}}
    for name, path in KERNELS:
        b = builder.build((ROOT / path).read_text(), "cpu")
        assert b.ok, b.error
        reuse = Reuse(options, 1 << 30, 0)
        caught, seconds, drawn = [], [], []
        try:
            for _ in range(args.k):
                ev = judge(tasks[name], b.lib_path, options, module=b.module_name, reuse=reuse)
                seconds.append(ev.phases.get("drawn", 0.0))
                drawn.append(len(ev.drawn))
                if not ev.correct:
                    caught.append(ev.failure.split(" ")[0])
        finally:
            reuse.close()
        line = (f"{path:50s} rejected {len(caught):2d} of {args.k}; drawn configurations per judgement "
                f"{statistics.mean(drawn):.1f}, their phase {statistics.median(seconds):.2f} s (median); caught on: "
                + ", ".join(caught[:6]) + (" ..." if len(caught) > 6 else ""))
        print(line, flush=True)
        lines.append(line)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
