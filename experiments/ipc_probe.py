"""Which confinement layer stops CUDA IPC between a worker and its evaluator? (run on a GPU host)

    python experiments/ipc_probe.py

Starts one child per layer set; each applies those layers of `kevolve.judge.worker.confine` (after CUDA init, as the
worker does), shares a tensor through `exchange.describe`, and this process tries to open it. Prints a table.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, os, signal, torch
from kevolve.judge import exchange
from kevolve.judge.worker import confine
layers = sys.argv[1].split(",") if sys.argv[1] else []
torch.cuda.init(); t = torch.arange(1024, dtype=torch.float32, device="cuda"); torch.cuda.synchronize()
tmp = sys.argv[2]
if "dumpable" in layers: confine._prctl(confine.PR_SET_DUMPABLE, 0)
if "nnp" in layers: confine._prctl(confine.PR_SET_NO_NEW_PRIVS, 1)
if "caps" in layers: confine._drop_capabilities()
if "landlock" in layers:
    from kevolve.judge.build import cuda_home
    confine._landlock([sys.prefix, sys.base_prefix, cuda_home(), os.getcwd()] + [p for p in sys.path if p], [tmp])
if "seccomp" in layers: confine._seccomp()
print(json.dumps(exchange.describe(t)), flush=True)
sys.stdin.readline()
"""


def main() -> None:
    import torch
    from kevolve.judge import exchange
    torch.cuda.init()
    sets = ["landlock", "seccomp", "dumpable,nnp,caps,seccomp", "dumpable,nnp,caps,landlock,seccomp"]
    rows = []
    for layers in sets:
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.Popen([sys.executable, "-c", CHILD, layers, tmp], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env={**os.environ})
            line = p.stdout.readline()
            try:
                view = exchange.open_ipc(json.loads(line), torch.float32, (1024,))
                ok = bool(torch.equal(view, torch.arange(1024, dtype=torch.float32, device="cuda")))
                why = ""
                del view
            except Exception as e:                  # noqa: BLE001
                ok, why = False, f"{type(e).__name__}: {str(e)[:160]}" if line else "child: " + p.stderr.read()[-300:]
            try:
                p.stdin.write("\n"); p.stdin.flush(); p.wait(30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                p.kill()
                why += " child: " + p.stderr.read()[-400:].replace("\n", " | ")
            rows.append((layers or "(none)", ok, why))
            print(f"{layers or '(none)':40s} {'IPC ok' if ok else 'IPC FAILS'} {why}", flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    main()
