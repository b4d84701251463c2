"""Test support: hostile kernels that run Python of a test's choosing in their worker.

`with_python(python)` is cpu/slows_torch.cpp — a walk past both static layers from its own PLT slot to libpython's
PyRun_SimpleString, run once on its first call — with `python` as the text it runs. The kernel computes layernorm
forward correctly in every call; what the Python does to the worker around its calls is the attack.
`with_python_cuda(python)` is the same walk in the host code of the honest CUDA seed (layernorm forward, as on
layernorm_tiny and layernorm_gpu_timing), as issue 37's H200 kernel reached CPython."""
from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
_RUN = re.compile(r'as<run_t>\(w\[0\]\.got\)\((?:\s*"(?:[^"\\]|\\.)*")+\);')


# Divides the kernel's own samples by DIVISOR as each CPU round returns them, the baselines' left alone; with SPARE
# true it leaves the calls that carry the evaluator's canary alone (a forger that reads each round's request).
FORGE = """import kevolve.judge.worker.session as S
_round = S.Session._cpu_round
def _forged(self, *a, **k):
    t = _round(self, *a, **k)
    canary = a[2] if len(a) > 2 else k.get('canary', ())
    if 'kernel' in t: t['kernel'] = [x if SPARE and i in canary else x / DIVISOR for i, x in enumerate(t['kernel'])]
    return t
S.Session._cpu_round = _forged
"""

# Computes the kernel's answer with torch (the task's baseline on that call's inputs) each time the harness
# poisons the kernel's outputs, and makes every timed call of the kernel a 20 us spin.
POISON = """import sys, time
import kevolve.judge.worker.session as S
import kevolve.judge.worker.buffers as Bf
_poison = Bf.poison_all
def _poisoned(bufs):
    _poison(bufs)
    f = sys._getframe(1)
    se, i = f.f_locals.get('self'), f.f_locals.get('i')
    if isinstance(se, S.Session) and isinstance(i, int) and 'kernel' in se.outs:
        ins = [se.slots[i]['inputs'][s.name] for s in se.w.task.inputs]
        r = se.w.task.baseline(*ins, **se.sizes, **se.scalars)
        for t, v in zip(se.outs['kernel'][i]['outputs'].values(), r if isinstance(r, (tuple, list)) else [r]):
            t.copy_(v)
Bf.poison_all = _poisoned
def _spin(self, name, kernel):
    def call(i):
        end = time.perf_counter() + 2e-05
        while time.perf_counter() < end:
            pass
    return call
S.Session._kernel_call = _spin
print('POISONER armed', file=sys.stderr)
"""


# CUDA: the kernel's graph replay (one sample: every call of the round) made DIVISOR times shorter past the round's
# null graph, which the evaluator subtracts; with SPARE true the rounds that replay the canary's graph are left alone.
FORGE_CUDA = """import kevolve.judge.worker.session as S
_round = S.Session._cuda_round
def _forged(self, order, hollow=frozenset(), *rest):
    t = _round(self, order, hollow, *rest)
    canary = rest[0] if rest else ()
    null = (t.get('_null_graph') or [None])[0]
    if 'kernel' in t and 'kernel' not in hollow and null is not None and not (SPARE and canary):
        t['kernel'] = [tuple(n + (x - n) / DIVISOR for x, n in zip(s, null)) for s in t['kernel']]
    return t
S.Session._cuda_round = _forged
"""


def forger(divisor: float, spare: bool, cuda: bool = False) -> str:
    """FORGE (FORGE_CUDA) with its divisor, and whether it spares the canary's calls, as the Python the walk runs."""
    text = (FORGE_CUDA if cuda else FORGE).replace("DIVISOR", repr(divisor)).replace("SPARE", repr(spare))
    return with_python_cuda(text) if cuda else with_python(text)


def judged(source: str, task_dir: Path, options, reuse=None):
    """`source` judged as an attacker's kernel on `options.target`: it must get past the static rules and the symbol
    check (else the test proves nothing), then `judge` on the task in `task_dir`."""
    from kevolve.judge import build as builder
    from kevolve.judge.evaluator.harness import judge
    from kevolve.judge.static import rules, symbols
    from kevolve.task import load_task
    assert rules.check(source, options.target).ok, "the attacker must get past the static rules"
    built = builder.build(source, options.target)
    assert built.ok, built.error
    assert symbols.check(built.lib_path, options.target) is None, "... and past the symbol check"
    return judge(load_task(task_dir), built.lib_path, options, reuse=reuse)


def with_python(python: str) -> str:
    """slows_torch.cpp with `python` (no backslash or double quote in it) as the Python its walk runs."""
    if "\\" in python or '"' in python:
        raise ValueError("the Python goes into a C string as it is: no backslashes or double quotes")
    lines = "".join(f'"{line}\\n"\n' for line in python.splitlines())
    source, n = _RUN.subn(lambda m: f"as<run_t>(w[0].got)({lines});", (HERE / "cpu" / "slows_torch.cpp").read_text())
    assert n == 1, "slows_torch.cpp no longer runs its Python where this helper replaces it"
    return source


def host_parts(cpu_source: str) -> tuple[str, str]:
    """A CPU walk's helpers (all before `forward`) and its first-call block's body, to run from CUDA host code."""
    helpers = cpu_source.split('extern "C" int forward', 1)[0]
    block = cpu_source.split("if (!patched) {", 1)[1].split("    for (int64_t r = 0;", 1)[0].rsplit("}", 1)[0]
    return helpers, block


def walk_cuda(parts: tuple[str, str]) -> str:
    """The honest CUDA seed (`test_cuda.HONEST`) running a CPU walk's first-call block (`host_parts`) first."""
    from test_cuda import LAUNCH, hostile
    return hostile(parts[0], before="if (!patched) {" + parts[1] + "}", launch=LAUNCH)


def with_python_cuda(python: str) -> str:
    """`with_python`'s walk from the host code of the honest CUDA seed, as issue 37's H200 kernel reached CPython."""
    return walk_cuda(host_parts(with_python(python)))
