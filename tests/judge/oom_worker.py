"""Test support only — never imported by kevolve: the real worker, whose timing setup runs out of device memory.

`python tests/judge/oom_worker.py FLAG` raises torch's OutOfMemoryError from `time_setup` of a kernel's timing session,
as a GPU shared with other evaluators does when they hold its memory: once (the first worker, which creates FLAG) or,
with FLAG `always`, in every worker. `OomWorker.of(FLAG)` is the evaluator-side handle that starts it
(`monkeypatch.setattr(harness, "WorkerProcess", OomWorker.of(FLAG))`).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    import torch
    from kevolve.judge.worker import serve as worker
    flag = sys.argv[1]
    if flag == "always" or not os.path.exists(flag):
        if flag != "always":
            open(flag, "w").close()

        original = worker.Worker.time_setup

        def out_of_memory(self, *args, kernel: bool = True, stand_in: bool = False, **kwargs):
            if not kernel or stand_in:      # the baselines alone, or the clean probe, before the kernel loads
                return original(self, *args, kernel=kernel, stand_in=stand_in, **kwargs)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1024.00 MiB (another process holds it)")
        worker.Worker.time_setup = out_of_memory
    worker.main()


def _worker_class():
    from kevolve.judge.evaluator.process import WorkerProcess

    class OomWorker(WorkerProcess):
        flag = "always"

        def command(self) -> list[str]:
            return [str(Path(__file__).resolve()), self.flag]

        @classmethod
        def of(cls, flag: str):
            return type("OomWorker", (cls,), {"flag": flag})
    return OomWorker


if __name__ == "__main__":
    main()
else:
    OomWorker = _worker_class()
