"""Test support only — never imported by kevolve: the real worker on a machine that denies seccomp. Both
filters fail as OSError, as where seccomp is disabled or the architecture is not x86-64: the first
(`confine._seccomp`: no setsid / setpgid, no sockets but AF_UNIX, ...) and the seal (`confine.seal`: no new
process). Landlock, the capabilities, no_new_privs and the rlimits still apply; the confinement report says
seccomp is missing and the judgement goes on.

`python tests/adversarial/noseccomp_worker.py` runs the production worker's protocol loop so;
`NoSeccompWorker` is the evaluator-side handle that starts it (`monkeypatch.setattr(harness, "WorkerProcess",
NoSeccompWorker)`). Which worker an evaluator starts is decided in the evaluator's process
(`WorkerProcess.command`), never in the worker's.
"""
from __future__ import annotations

import errno
from pathlib import Path


def main() -> None:
    from kevolve.judge.worker import confine, serve as worker

    def denied(*args, **kwargs):
        raise OSError(errno.EINVAL, "seccomp denied (taken away by the test)")
    confine._seccomp = denied
    confine.seal = denied
    worker.main()


def _worker_class():
    from kevolve.judge.evaluator.process import WorkerProcess

    class NoSeccompWorker(WorkerProcess):
        def command(self) -> list[str]:
            return [str(Path(__file__).resolve())]
    return NoSeccompWorker


if __name__ == "__main__":
    main()
else:
    NoSeccompWorker = _worker_class()
