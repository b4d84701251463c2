"""On CUDA, a C-ABI kernel's device code timed in a worker that never ran its host code (issue 49, item 2;
`judge.replay`). On with `Options.replay` (`KEVOLVE_CUDA_REPLAY=1`; off by default until it is measured on a GPU).

Per timed configuration (`Replay.prepare`): the kernel's worker captures one call and describes it
(`protocol.Describe`: its word); what cannot be replayed apart from the host code — host nodes, copies to or from the
host, allocations, child graphs, events, another library's kernels, memsets or copies outside the call's buffers
(`nodes.unreplayable`), or a call that cannot be captured at all — is a rejection naming it; the rest goes to the
replaying worker (`protocol.LoadDevice`): a fresh worker, confined and sealed like the kernel's before anything of the
candidate reaches it, that loads the library's device code alone (`replay.device`). The configuration is then timed in
that worker as any kernel is (`timed.time_config`: every call checked against the float64 reference, the canary,
the outside clock; torch's baselines in the clean baseline worker, paced round by round), with the kernel's worker
stopped throughout, the CPU it burned meanwhile checked (the quiet bound). The times reported are the replaying
worker's: the host code that could forge them never ran there.

Guarantees: a kernel timed so had none of its host code in the process whose clock timed it; its replayed calls are
checked like its own. Not guaranteed: the same time as its own calls where its host code did more per call than
launch (that work is not timed, nor replayed); kernels the torch ABI imports (their calls run ATen's kernels and
allocator: not replayed, timed in their own worker as before).
"""
from __future__ import annotations

import shutil
import tempfile

from kevolve.judge import exchange, protocol
from kevolve.judge.evaluator import startup, timed
from kevolve.judge.evaluator.checks import Checker
from kevolve.judge.evaluator.judgement import Judgement
from kevolve.judge.evaluator.process import WorkerDied, WorkerProcess
from kevolve.judge.options import Options
from kevolve.judge.replay import fatbin, nodes


def wanted(options: Options) -> bool:
    return options.replay and options.target == "cuda" and options.abi == "c"


class Replay:
    """A judgement's replaying worker and its checker (its own exchange folder; the judgement's references)."""

    def __init__(self, j: Judgement, checker: Checker):
        self.j, self.worker, self.files = j, None, None
        self.checker = checker
        self.kernel_checker = checker
        try:
            found = fatbin.symbols(fatbin.images(j.lib_path))
            self.functions = found[0] if found else None
            self.error = None
        except fatbin.FatbinError as e:
            self.functions, self.error = None, f"its device code cannot be read apart from its host code: {e}"

    def start(self) -> str | None:
        """The replaying worker started, confined and sealed; the harness's failure, if any."""
        if self.worker is not None:
            return None
        o = self.j.options
        self.files = tempfile.mkdtemp(prefix="kevolve-replay-", dir=exchange.files_root())
        self.worker = WorkerProcess(o)
        info = startup.init(self.worker, startup.init_command(self.j.task.ref, self.j.lib_path, self.j.module,
                                                              self.files, o), o)
        if isinstance(info, protocol.Failed):
            return f"harness: the replaying worker did not start: {info.error}"
        try:
            startup.configure(self.worker, info, o)
            self.worker.call(protocol.Seal(startup.threads_after_seal(o)), 60)
        except WorkerDied as e:
            return f"harness: the replaying worker died starting: {e.kind}: {e.detail}"
        c = self.kernel_checker
        self.checker = Checker(c.task, o, c.clock, c.references, folder=self.files, fused=c.fused)
        return None

    def prepare(self, index: int, cfg) -> str | None:
        """Configuration `cfg` described in the kernel's worker and loaded in the replaying one; the verdict's
        failure where it cannot be (raises `WorkerDied` where the kernel's worker died describing it)."""
        if self.error:
            return self.error
        failure = self.start()
        if failure:
            return failure
        o = self.j.options
        reply = self.j.worker.call(protocol.Describe(index, timed.fresh_variant()), o.timeout + 60)
        if isinstance(reply, protocol.Failed):
            self.j.worker.kill()
            return (f"its call could not be captured and described, so its device code cannot be timed apart from "
                    f"its host code: {reply.error}")
        try:
            desc = nodes.from_wire(reply.description)
        except ValueError as e:
            return f"the kernel's worker described its call in a form the protocol does not allow: {e}"
        reasons = nodes.unreplayable(desc, self.functions)
        if reasons:
            more = f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else ""
            return "its call cannot be timed apart from its host code: " + "; ".join(reasons[:3]) + more
        try:
            loaded = self.worker.call(protocol.LoadDevice(reply.description), o.timeout + 60)
        except WorkerDied as e:
            return f"its device code, replayed alone, killed the replaying worker: {e.kind}: {e.detail}"
        if isinstance(loaded, protocol.Failed):
            return f"its device code could not be replayed apart from its host code: {loaded.error}"
        return None

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        if self.files:
            shutil.rmtree(self.files, ignore_errors=True)
            self.files = None
