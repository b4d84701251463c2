"""The worker: the only process in which a candidate's code runs.

Started by `kevolve.judge.evaluator.process` as `python -m kevolve.judge.worker` with an environment holding no
secrets. It speaks `judge.protocol` on a private pipe (the candidate's own prints go to stderr): each line is
decoded to a typed command, dispatched on its type to the `Worker` method that handles it
(`judge.worker.commands`), and answered with one reply carrying the command's nonce; an exception becomes a
`Failed` reply, a line that is no command a `Failed` reply too. It never sees a reference output: it draws the
inputs itself (from the task's seeded generators), calls the kernel, and hands back the outputs (CUDA IPC handles
to its buffers when the evaluator can open them, else files), and its inputs the same way after the call.
A crash or hang kills only this process; the evaluator turns it into a verdict.
"""
from __future__ import annotations

import dataclasses
import gc
import os
import sys
import traceback

from kevolve.judge import protocol
from kevolve.judge.worker.calls import NVTX_ENV, NVTX_RANGE  # noqa: F401 (search.profile reads them here)
from kevolve.judge.worker.commands import Worker

# each command type -> the `Worker` method that handles it (looked up at call time: tests replace methods)
HANDLERS: dict[type[protocol.Command], str] = {kind: kind.name for kind in protocol.COMMANDS.values()
                                               if kind is not protocol.Exit}


def handle(worker: Worker, command: protocol.Command) -> dict:
    """The reply's fields for one command; an exception becomes a `Failed` reply's."""
    try:
        fields = {f.name: getattr(command, f.name) for f in dataclasses.fields(command)}
        return getattr(worker, HANDLERS[type(command)])(**fields)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}


def _exit_with_parent() -> None:
    """A worker whose evaluator died (SIGKILL, node loss) must not linger, even mid-kernel: SIGKILL when its parent
    (its namespace's init, or the evaluator where the relay became the worker) ends. No watcher thread: a thread
    started before the confinement runs without Landlock (`confine._other_threads`)."""
    import ctypes
    import signal
    parent = os.getppid()
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)     # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(3)


def main() -> None:
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)          # PR_SET_DUMPABLE 0: no /proc/<pid>/fd for others
    _exit_with_parent()
    os.environ["OPENBLAS_NUM_THREADS"] = "1"        # numpy's OpenBLAS (imported with torch) starts no server threads
    from kevolve.judge import cpus
    cpus.pin_from_env()                              # before any thread starts: every later one inherits it
    import torch  # noqa: F401  (before the first request: a spare worker is ready when it is handed work)
    import kevolve.task.abi, kevolve.task.spec, kevolve.judge.worker.timing  # noqa: F401,E401
    # the imports' objects out of the collector's reach: its later passes scan only what comes after
    gc.freeze()
    proto = os.fdopen(os.dup(1), "w", buffering=1)   # the protocol pipe
    os.dup2(2, 1)                                    # the candidate's printf goes to stderr
    worker = Worker()
    for line in sys.stdin:
        try:
            command, nonce = protocol.decode_command(line)
        except protocol.ProtocolError as e:
            proto.write(protocol.encode_fields({"error": f"ProtocolError: {e}"}, e.nonce).decode())
            continue
        if isinstance(command, protocol.Exit):
            break
        proto.write(protocol.encode_fields(handle(worker, command), nonce).decode())
    proto.close()
    sys.stderr.flush()
    os._exit(0)             # no atexit handlers, no library destructors: nothing of the kernel's runs at teardown


if __name__ == "__main__":
    main()
