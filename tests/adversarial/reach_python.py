"""Test support: hostile kernels that run Python of a test's choosing in their worker.

`with_python(python)` is cpu/slows_torch.cpp — a walk past both static layers from its own PLT slot to libpython's
PyRun_SimpleString, run once on its first call — with `python` as the text it runs. The kernel computes layernorm
forward correctly in every call; what the Python does to the worker around its calls is the attack."""
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

# Computes the kernel's answer with torch (the worker's eager baseline on that call's inputs) each time the harness
# poisons the kernel's outputs, and makes every timed call of the kernel a 20 us spin.
POISON = """import sys, time
import kevolve.judge.worker.session as S
import kevolve.judge.worker.buffers as Bf
_poison = Bf.poison_all
def _poisoned(bufs):
    _poison(bufs)
    f = sys._getframe(1)
    se, i = f.f_locals.get('self'), f.f_locals.get('i')
    if isinstance(se, S.Session) and isinstance(i, int) and 'eager' in se.calls and 'kernel' in se.outs:
        r = se.calls['eager'](i)
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


def forger(divisor: float, spare: bool) -> str:
    """FORGE with its divisor, and whether it spares the canary's calls, as the Python the walk runs."""
    return with_python(FORGE.replace("DIVISOR", repr(divisor)).replace("SPARE", repr(spare)))


def judged(source: str, task_dir: Path, options):
    """`source` judged on the CPU as an attacker's kernel: it must get past the static rules and the symbol check
    (else the test proves nothing), then `judge` on the task in `task_dir`."""
    from kevolve.judge import build as builder
    from kevolve.judge.evaluator.harness import judge
    from kevolve.judge.static import rules, symbols
    from kevolve.task import load_task
    assert rules.check(source, "cpu").ok, "the attacker must get past the static rules"
    built = builder.build(source, "cpu")
    assert built.ok, built.error
    assert symbols.check(built.lib_path, "cpu") is None, "... and past the symbol check"
    return judge(load_task(task_dir), built.lib_path, options)


def with_python(python: str) -> str:
    """slows_torch.cpp with `python` (no backslash or double quote in it) as the Python its walk runs."""
    if "\\" in python or '"' in python:
        raise ValueError("the Python goes into a C string as it is: no backslashes or double quotes")
    lines = "".join(f'"{line}\\n"\n' for line in python.splitlines())
    source, n = _RUN.subn(lambda m: f"as<run_t>(w[0].got)({lines});", (HERE / "cpu" / "slows_torch.cpp").read_text())
    assert n == 1, "slows_torch.cpp no longer runs its Python where this helper replaces it"
    return source
