"""Which layer of the worker's confinement keeps the CUDA driver from starting after it (`Options.strict_cuda`; on an
H100 every strict judgement failed at `cudaGetDeviceCount` with error 304, "OS call failed").

    python experiments/strict_cuda_probe.py        (on the GPU machine, from the repository root)

Each step runs in a fresh process: the confinement's layers applied one at a time, as `confine.confine` applies
them (no_new_privs, not dumpable, the capabilities dropped, Landlock with a worker's paths, the first seccomp
filter without a listener), then each layer alone, then the CUDA driver started as the worker starts it. Where
Landlock alone stops it, two bisections say what it needs: Landlock with its ABI capped (6 scopes signals and
abstract unix sockets, 5 handles device ioctls, 4 TCP, 3 truncate, 2 refer), and Landlock granting one more folder
in full (`/dev/shm`, `/dev`, `/proc`, ...). The device nodes are listed before the first step and after each (a
node the driver creates on its first start would mask the cause in later steps), and under Landlock the child tries
the files a driver is known to open and prints which are refused; with `strace` on the machine, the Landlock-only
step is traced and its refused calls printed; without it, it runs with `open_refusals.c` preloaded, which prints
every open or mkdir refused. Needs no GPU to run (every step then fails the same way).
"""
from __future__ import annotations

import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

LAYERS = ("no_new_privs", "not_dumpable", "capabilities", "landlock", "seccomp")
TRIED = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
         "/proc/driver/nvidia/params", "/proc/driver/nvidia/version", "/proc/self/maps", "/proc/self/status",
         "/proc/sys/vm/mmap_min_addr", "/proc/modules", "/sys/bus/pci/devices", "/sys/devices/system/memory",
         "/dev/shm", "/proc/self/task")
GRANTS = ("/dev/shm", "/dev", "/proc", "/proc/self", "/proc/self/task", "/proc/driver", "/proc/sys", "/sys", "/tmp",
          "/run", "/var", "/")


def child(layers: list[str], tmp: str) -> dict:
    """In the child: `layers` applied in order, then the driver started; what happened. A layer `landlock:abi=N`
    caps the Landlock ABI at N; `landlock:+PATH` grants PATH in full besides a worker's paths; `landlock:own` is
    Landlock as a CUDA worker has it (its own threads' files in /proc writable)."""
    from kevolve.judge.worker import confine
    seen: dict = {"layers": layers}
    for layer in layers:
        if layer == "no_new_privs":
            confine._prctl(confine.PR_SET_NO_NEW_PRIVS, 1)
        elif layer == "not_dumpable":
            confine._prctl(confine.PR_SET_DUMPABLE, 0)
        elif layer == "capabilities":
            confine._drop_capabilities()
        elif layer.startswith("landlock"):
            extra = layer.partition(":")[2]
            if extra.startswith("abi="):
                real, cap = confine.landlock_abi(), int(extra[4:])
                confine.landlock_abi = lambda: min(real, cap)
            readable = [p for p in sys.path if p] + [sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr/local/cuda"]
            seen["abi"] = confine._landlock(readable, [tmp] + ([extra[1:]] if extra.startswith("+") else []),
                                            own_threads=extra == "own")
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
        elif layer == "seccomp":
            confine._seccomp()
    try:
        import torch
        torch.cuda.init()
        torch.empty(1, device="cuda")
        seen["cuda"] = "ok: " + torch.cuda.get_device_name()
    except Exception as e:  # noqa: BLE001 — what the driver says is the result
        seen["cuda"] = f"{type(e).__name__}: {str(e)[:160]}"
    return seen


SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "open_refusals.c")


def shim(folder: str) -> str | None:
    """open_refusals.c built into `folder` (None without a C compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    out = os.path.join(folder, "open_refusals.so")
    if cc and subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", out, SHIM, "-ldl"]).returncode == 0:
        return out
    return None


def step(layers: list[str], trace: bool = False, preload: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, __file__, "--child", tmp, *layers]
        log = os.path.join(tmp, "strace.txt")
        if trace:
            cmd = ["strace", "-f", "-qq", "-o", log, "-e", "trace=%file,%desc,%ipc,%memory,%network", "-Z", *cmd]
        env = {**os.environ, "TMPDIR": tmp, **({"LD_PRELOAD": preload} if preload else {})}
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        try:
            seen = json.loads(r.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            seen = {"cuda": f"the child died (exit {r.returncode}): {r.stderr[-300:]}"}
        if trace and os.path.exists(log):
            with open(log) as f:
                failed = [line.strip() for line in f if "EACCES" in line or "EPERM" in line]
            seen["strace"] = failed[:40]
        if preload:
            seen["opens"] = sorted({line for line in r.stderr.splitlines() if line.startswith("refused: ")})[:60]
    return seen


def nodes() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/nvidia-caps/*"))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[3:], sys.argv[2])), flush=True)
        return
    from kevolve.judge.worker import confine
    print(f"kernel {platform.release()}, Landlock ABI {confine.landlock_abi()}, strace: {shutil.which('strace')}")
    print(f"device nodes before any step: {nodes()}", flush=True)
    steps = [[layer] for layer in LAYERS] + [list(LAYERS[:k]) for k in range(2, len(LAYERS) + 1)]
    steps += [[f"landlock:abi={n}"] for n in (5, 4, 3, 2, 1)] + [[f"landlock:+{p}"] for p in GRANTS]
    steps += [["landlock:own"], list(LAYERS[:3]) + ["landlock:own", "seccomp"], []]
    if os.environ.get("PROBE_STEPS"):         # e.g. "landlock landlock:+/proc/self no_new_privs,landlock"
        steps = [s.split(",") for s in os.environ["PROBE_STEPS"].split()]
    landlock_alone = None
    for layers in steps:
        before = nodes()
        seen = step(layers)
        if layers == ["landlock"]:
            landlock_alone = seen
        extra = f"   refused: {seen['refused']}" if seen.get("refused") else ""
        new = sorted(set(nodes()) - set(before))
        extra += f"   nodes created: {new}" if new else ""
        print(f"{'+'.join(layers) or 'nothing':48s} {seen['cuda']}{extra}", flush=True)
    if landlock_alone and not landlock_alone["cuda"].startswith("ok"):
        with tempfile.TemporaryDirectory() as built:
            so = shim(built)
            seen = step(["landlock"], preload=so) if so else {"opens": ["no C compiler: open_refusals.c not built"]}
        print(f"landlock alone with open_refusals.so preloaded: {seen['cuda']}; the refused opens:", flush=True)
        print("\n".join(f"  {line[:240]}" for line in seen.get("opens", [])) or "  none", flush=True)
    if shutil.which("strace") and landlock_alone and not landlock_alone["cuda"].startswith("ok"):
        seen = step(["landlock"], trace=True)
        print("strace of landlock alone, the refused calls:", flush=True)
        print("\n".join(f"  {line[:240]}" for line in seen.get("strace", [])) or "  none", flush=True)


if __name__ == "__main__":
    main()
