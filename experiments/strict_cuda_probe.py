"""Which layer of the worker's confinement keeps the CUDA driver from starting after it (`Options.strict_cuda`; on an
H100 every strict judgement failed at `cudaGetDeviceCount` with error 304, "OS call failed").

    python experiments/strict_cuda_probe.py        (on the GPU machine, from the repository root)

Each step runs in a fresh process: the confinement's layers applied one at a time, as `confine.confine` applies
them (no_new_privs, not dumpable, the capabilities dropped, Landlock with a worker's paths, the first seccomp
filter without a listener), then each layer alone and all of them, then the CUDA driver started as the worker
starts it. Under Landlock it also tries the files a driver is known to open, and prints which are refused. One line
per step: the layers, ok or the error. Needs no GPU to run (every step then fails the same way).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

LAYERS = ("no_new_privs", "not_dumpable", "capabilities", "landlock", "seccomp")
TRIED = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
         "/proc/driver/nvidia/params", "/proc/driver/nvidia/version", "/proc/self/maps", "/proc/self/status",
         "/proc/sys/vm/mmap_min_addr", "/proc/modules", "/sys/bus/pci/devices", "/sys/devices/system/memory",
         "/dev/shm", "/proc/self/task")


def child(layers: list[str], tmp: str) -> dict:
    """In the child: `layers` applied in order, then the driver started; what happened."""
    from kevolve.judge.worker import confine
    seen: dict = {"layers": layers}
    for layer in layers:
        if layer == "no_new_privs":
            confine._prctl(confine.PR_SET_NO_NEW_PRIVS, 1)
        elif layer == "not_dumpable":
            confine._prctl(confine.PR_SET_DUMPABLE, 0)
        elif layer == "capabilities":
            confine._drop_capabilities()
        elif layer == "landlock":
            readable = [p for p in sys.path if p] + [sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr/local/cuda"]
            confine._landlock(readable, [tmp])
            refused = []
            for path in TRIED:
                if not os.path.exists(path):
                    continue
                try:
                    if os.path.isdir(path):
                        os.listdir(path)
                    else:
                        os.close(os.open(path, os.O_RDWR if path.startswith("/dev/nvidia") else os.O_RDONLY))
                except OSError as e:
                    refused.append(f"{path}: {e.strerror}")
            seen["refused"] = refused
            seen["missing"] = [p for p in TRIED if p.startswith("/dev/") and not os.path.exists(p)]
        elif layer == "seccomp":
            confine._seccomp()
    try:
        import torch
        torch.cuda.init()
        torch.empty(1, device="cuda")
        seen["cuda"] = "ok: " + torch.cuda.get_device_name()
    except Exception as e:  # noqa: BLE001 — what the driver says is the result
        seen["cuda"] = f"{type(e).__name__}: {str(e)[:200]}"
    return seen


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[3:], sys.argv[2])), flush=True)
        return
    steps = [[]] + [list(LAYERS[:k]) for k in range(1, len(LAYERS) + 1)] + [[layer] for layer in LAYERS[1:]]
    for layers in steps:
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([sys.executable, __file__, "--child", tmp, *layers], capture_output=True, text=True,
                               timeout=120, env={**os.environ, "TMPDIR": tmp})
        try:
            seen = json.loads(r.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            seen = {"cuda": f"the child died (exit {r.returncode}): {r.stderr[-300:]}"}
        extra = "" if "refused" not in seen else f"   refused: {seen['refused']} missing: {seen['missing']}"
        print(f"{'+'.join(layers) or 'nothing':62s} {seen['cuda']}{extra}", flush=True)


if __name__ == "__main__":
    main()
