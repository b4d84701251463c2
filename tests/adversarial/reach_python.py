"""Test support: hostile kernels that run Python of a test's choosing in their worker.

`with_python(python)` is cpu/slows_torch.cpp — a walk past both static layers from its own PLT slot to libpython's
PyRun_SimpleString, run once on its first call — with `python` as the text it runs. The kernel computes layernorm
forward correctly in every call; what the Python does to the worker around its calls is the attack."""
from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
_RUN = re.compile(r'as<run_t>\(w\[0\]\.got\)\((?:\s*"(?:[^"\\]|\\.)*")+\);')


def with_python(python: str) -> str:
    """slows_torch.cpp with `python` (no backslash or double quote in it) as the Python its walk runs."""
    if "\\" in python or '"' in python:
        raise ValueError("the Python goes into a C string as it is: no backslashes or double quotes")
    lines = "".join(f'"{line}\\n"\n' for line in python.splitlines())
    source, n = _RUN.subn(lambda m: f"as<run_t>(w[0].got)({lines});", (HERE / "cpu" / "slows_torch.cpp").read_text())
    assert n == 1, "slows_torch.cpp no longer runs its Python where this helper replaces it"
    return source
