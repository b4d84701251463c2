"""Starting a judgement's worker: `init` (the task loaded, the process confined, the kernel not yet loaded),
`configure` (the shape set, how outputs travel), and `seal_and_load` (no new process from here on, then the
kernel's library loaded: the first moment any of its code runs).

Guarantees: the kernel loads only after the seal, after the baselines were compiled and timed alone; a crash or
hang while it loads is a `load` failure; on CUDA outputs travel by IPC only where a probe tensor reads back
exactly. Called by the harness and `compare`; calls nothing above.
"""
from __future__ import annotations

from kevolve.judge import exchange, protocol
from kevolve.judge.evaluator.fused import Fused
from kevolve.judge.evaluator.process import WorkerDied, WorkerProcess
from kevolve.judge.options import Options


def init_command(task_dir: str, lib: str, module: str | None, files: str, options: Options,
                 also: tuple[str, ...] = ()) -> protocol.Init:
    """The worker's start on the task with `lib` named (loaded later, `seal_and_load`), confined first."""
    return protocol.Init(task_dir=task_dir, lib=lib, abi=options.abi, target=options.target, module=module,
                         exchange=files, threads=options.threads, also=tuple(also), load=False, **cold(options))


def init(worker: WorkerProcess, command: protocol.Init, options: Options) -> protocol.Started | protocol.Failed:
    """`command` sent; a worker that died doing it is a `Failed` reply."""
    try:
        return worker.call(command, options.timeout + 120)
    except WorkerDied as e:
        return protocol.Failed(f"{e.kind}: {e.detail}")


def landlocked(info: protocol.Reply) -> bool:
    """Whether the worker's confinement holds Landlock (a kernel then cannot reach the spare or the caches)."""
    return isinstance(info, protocol.Started) and bool((info.confinement or {}).get("landlock"))


def configure(worker: WorkerProcess, info: protocol.Started, options: Options) -> bool:
    """The shape set named, and on CUDA the exchange decided (`exchange.ipc_works`): whether outputs go by CUDA IPC
    (False: by files, or not on CUDA)."""
    worker.call(protocol.SetConfigs(options.shapes), 60)
    ipc = False
    if options.target == "cuda":
        ipc = exchange.ipc_works(lambda: worker.call(protocol.IpcProbe(), 60).probe, info.uuid, options.exchange)
        worker.call(protocol.SetExchange(ipc), 60)
    return ipc


def seal_and_load(worker: WorkerProcess, options: Options, clock) -> str | None:
    """Seals the worker, then loads the kernel; returns the load error, if any."""
    with clock("seal"):
        worker.call(protocol.Seal(threads_after_seal(options)), 60)
    try:
        with clock("load"):
            loaded = worker.call(protocol.Load(), options.timeout + 60)
    except WorkerDied as e:                # a crash or hang while the library loads (static initialisers)
        return f"{e.kind}: {e.detail}"
    return loaded.error if isinstance(loaded, protocol.Failed) else None


def attempts_reject(options: Options) -> bool:
    """Whether an attempt the confinement refused rejects the kernel: always on the CPU; on CUDA with
    `Options.strict_cuda` (the default; off, an attempt on CUDA is noted in the verdict's log only)."""
    return options.target != "cuda" or options.strict_cuda


def threads_after_seal(options: Options) -> bool:
    """New threads after the seal: allowed on the CPU (OpenMP), refused on CUDA with `Options.strict_cuda`."""
    return options.target != "cuda" or not options.strict_cuda


def cold(options: Options) -> dict:
    """How the worker's CPU clock makes a timed call cold (`timing.CpuClock`): the mode, and the evictor's library
    (`judge.worker.evict`, built once per node) for `lines`."""
    if options.target != "cpu":
        return {"strict_cuda": options.strict_cuda}
    from kevolve.judge.worker import evict
    return {"cpu_flush": options.cpu_flush,
            "evict": evict.library(options.cache_dir) if options.cpu_flush == "lines" else None}


def fused(task, options: Options, reuse, info: protocol.Started):
    """The compiled checks (`judge.evaluator.fused`) where `options.compiled_checks` asks for them — auto: on CUDA, for
    an evaluator that keeps them across judgements (`reuse`, a `reuse.Reuse`, or None: a search's; one judgement
    alone would pay the compile for little) — and only for a Landlock-confined worker: the evaluator's Inductor and
    Triton caches must be out of a kernel's reach. None: eager checks."""
    mode = options.compiled_checks
    if mode == "off" or not (info.confinement or {}).get("landlock"):
        return None
    if mode == "auto" and not (options.target == "cuda" and reuse is not None):
        return None
    device = "cuda" if options.target == "cuda" else "cpu"
    return reuse.fused(task, device) if reuse is not None else Fused(task, device)
