"""Test support only — never imported by kevolve: the real worker with its seal taken away, as on a machine
whose kernel denies seccomp (`Worker.seal` then reports the seal missing and the judgement goes on).

`python tests/adversarial/unsealed_worker.py` runs the production worker's protocol loop with `seal` replying
"missing"; `UnsealedWorker` is the evaluator-side handle that starts it (`monkeypatch.setattr(harness,
"WorkerProcess", UnsealedWorker)`). Nothing in the production worker can turn its seal off: which worker an
evaluator starts is decided in the evaluator's process (`WorkerProcess.command`).
"""
from __future__ import annotations

from pathlib import Path


def main() -> None:
    from kevolve.judge.worker import serve as worker
    worker.Worker.seal = lambda self, threads=None: {"seal": None, "missing": "taken away by the test"}
    worker.main()


def _worker_class():
    from kevolve.judge.evaluator.process import WorkerProcess

    class UnsealedWorker(WorkerProcess):
        def command(self) -> list[str]:
            return [str(Path(__file__).resolve())]
    return UnsealedWorker


if __name__ == "__main__":
    main()
else:
    UnsealedWorker = _worker_class()
