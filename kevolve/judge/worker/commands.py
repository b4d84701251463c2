"""The worker's command handlers (`Worker`): one method per protocol command (`judge.protocol`), each taking the
command's fields and returning its reply's fields. The loop that decodes commands and dispatches them is
`judge.worker.serve`.

Guarantees: the kernel's code runs only inside `load`/`load_other` (dlopen's initialisers) and the calls of `check`
and a timing session, after `init` confined the process; the worker never holds a reference output; inputs go back
with the outputs after every call, for the evaluator to compare exactly.
"""
from __future__ import annotations

import gc
import importlib.util
import os
import sys
import time
from pathlib import Path

from kevolve.judge.exchange import fingerprint
from kevolve.judge.worker.baselines import compiled_baseline
from kevolve.judge.worker.buffers import allocate, overruns, poison_all
from kevolve.judge.worker.calls import cpu_name, fill_uninitialized, profiled_range
from kevolve.task import draw


def _stand_in(inputs, outputs, sizes, workspace, stream=None, *, scalars=None) -> int:
    """The kernel's place in a clean probe's session (`Worker.time_setup(stand_in=True)`): does nothing."""
    return 0


class Worker:
    def __init__(self):
        self.task = self.kernel = None
        self.buffers: dict[int, list[dict]] = {}     # config index -> buffer sets allocated for it
        self.copies: list[dict] = []                 # exported copies of the edge call's mapped buffers (`_export`)
        self.compiled = {}
        self._drawn: dict = {}                       # config index -> a configuration drawn from the domain
        self.session = None                         # the timing session (`time_setup` .. `time_end`)
        self.ipc = False                            # outputs through CUDA IPC (set_exchange) or files
        self.evictor = None                         # the CPU clock's cache-line evictor (`judge.worker.evict`)
        self.cpu_flush = "lines"
        self.evict_path = None                      # the evictor's library: its no-op is the trivial call (`trivial`)

    # ------------------------------------------------------------------ commands
    def init(self, task_dir: str, lib: str, abi: str, target: str, module: str | None, exchange: str,
             threads: int | None = None, also: list[str] | None = None, load: bool = True,
             evict: str | None = None, cpu_flush: str = "lines", strict_cuda: bool = True) -> dict:
        """Loads the task and the kernel `lib`, confined first; `also`: libraries loaded later by `load_other`
        (`harness.compare`), which the confinement must let this process read. `load=False` leaves the kernel
        for `load`, after `prepare` and `seal` (the harness's order: the kernel's code runs only sealed).
        `evict`: the evictor's library (`judge.worker.evict`), loaded here, before the confinement and any candidate
        code, for the CPU clock's `cpu_flush` mode `lines`. `strict_cuda` (`Options.strict_cuda`, the default): on CUDA
        the driver starts after the confinement, so its threads carry Landlock too (it may write its own threads'
        names, `confine.OWN_THREADS`); `strict_cuda=False`: before it, so its threads predate Landlock (seccomp
        still covers them)."""
        import torch
        from kevolve.task.precision import set_strict_float32
        from kevolve.task.load import load_task
        # torch's baselines in IEEE float32, as the task filters compute them
        set_strict_float32()
        self.target, self.abi, self.exchange = target, abi, Path(exchange)
        self.device = "cuda" if target == "cuda" else "cpu"
        self.task = load_task(task_dir)
        self.cpu_flush = cpu_flush
        if target == "cpu" and cpu_flush == "lines":
            from kevolve.judge.worker.evict import Evictor
            if evict:
                self.evictor, self.evict_path = Evictor(evict), evict
            else:
                print("kevolve worker: no cache-line evictor could be built here (no C compiler?); timed CPU calls "
                      "are made cold by rewriting 2 x the LLC instead (cpu_flush=llc)", file=sys.stderr, flush=True)
        # confined once the evictor's library is loaded (the confinement does not let it be read) and before any thread
        # but this one exists: Landlock and the capabilities' drop hold only on threads started after it (`confine`),
        # and torch's pool and the CUDA driver start theirs below
        early_cuda = target == "cuda" and not strict_cuda
        if early_cuda:
            self._start_cuda()
        self.confinement = self._confine([lib, *(also or [])], target)
        if threads:
            torch.set_num_threads(threads)
        if target == "cuda" and not early_cuda:
            try:
                self._start_cuda()
            except RuntimeError as e:       # the driver needs something the confinement closes (docs/guarantees.md)
                if any(s in str(e) for s in ("no NVIDIA driver", "no CUDA GPUs", "not compiled with CUDA")):
                    raise                       # no GPU here at all: nothing the confinement did
                devices = self.confinement.get("paths", {}).get("devices")
                raise RuntimeError(f"strict_cuda: the CUDA driver did not start under the worker's confinement "
                                   f"({e}); device nodes open to it: {devices}. `python experiments/strict_cuda_probe"
                                   ".py` names what it needs; meanwhile judge with resources.strict_cuda=false, where "
                                   "the driver starts before the confinement") from e
        self.lib, self.module = lib, module
        from kevolve.judge.worker.state import HarnessState      # put back after every call of candidate code
        self.state = HarnessState(self.evictor.lib if self.evictor is not None else None)
        if load:
            self.load()
        name = torch.cuda.get_device_name() if target == "cuda" else cpu_name()
        uuid = str(torch.cuda.get_device_properties(0).uuid) if target == "cuda" else None
        return {"device": name, "bandwidth_gbs": self._bandwidth(), "uuid": uuid, "confinement": self.confinement,
                "peak_gbs": self._peak()}

    def _start_cuda(self) -> None:
        """The CUDA driver and runtime started (their threads with them), and the runtime's handle found once."""
        import torch
        from kevolve.judge.worker import l2
        torch.cuda.init()
        torch.empty(1, device="cuda")
        l2.cudart()

    def load(self) -> dict:
        """Loads the kernel library named at `init`: the first moment any of its code can run (dlopen's
        initialisers, a torch extension's module init)."""
        self.kernel = self._load(self.lib, self.module)
        self.state.restore()                        # what its initialisers set (a torch extension's module init)
        return {}

    def seal(self, threads: bool | None = None) -> dict:
        """No new process from here on (`confine.seal`: exec, fork, vfork refused), once torch.compile is done
        with its compilers and compile workers, which are shut down first (a kernel could feed them work
        through their pipes). Replies with what holds, or why not."""
        async_compile = sys.modules.get("torch._inductor.async_compile")
        if async_compile is not None:               # not imported: nothing compiled here, no workers to end (and
            try:                                    # importing it just to ask cost 1.9 s of every reused judgement)
                getattr(async_compile, "shutdown_compile_workers", lambda: None)()
            except Exception:                       # noqa: BLE001 — no workers to end
                pass
        from kevolve.judge import cpus
        from kevolve.judge.worker import confine
        if self.target == "cuda" and not threads:   # the seal refuses new threads there: torch's CPU pool now
            import torch
            torch.ones(1 << 22).sum()
        try:
            allow = self.target != "cuda" if threads is None else threads
            return {"seal": confine.seal(pinned=bool(os.environ.get(cpus.ENV)), threads=allow)}
        except OSError as e:
            return {"seal": None, "missing": str(e)}

    def _load(self, lib: str, module: str | None):
        from kevolve.task.abi import CKernel, TorchKernel
        if self.abi == "c":
            return CKernel(lib, self.task, self.target)
        spec = importlib.util.spec_from_file_location(module, lib)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return TorchKernel(mod, self.task)

    def _confine(self, libs: list[str], target: str) -> dict:
        """Confines this process (`judge.worker.confine`) before the kernel loads: it may read the system, Python,
        the CUDA toolkit, the task and its own libraries' folders, and write only its private temporary
        directory and the output-exchange folder."""
        from kevolve import ROOT
        from kevolve.judge.worker import confine
        from kevolve.judge.build import cuda_home
        tmp = os.environ.get("TMPDIR", "")
        if not Path(tmp, ".kevolve-worker").exists():
            raise RuntimeError("the worker has no private TMPDIR "
                               "(start it through judge.evaluator.process.WorkerProcess)")
        root = str(ROOT.resolve())
        readable = [str(self.task.dir), *(os.path.dirname(os.path.realpath(lib)) for lib in libs), cuda_home(),
                    sys.prefix, sys.base_prefix, sys.exec_prefix, str(ROOT / "kevolve"), str(ROOT / "tasks")]
        readable += [p for p in sys.path if p and os.path.realpath(p) != root]
        # the repository's own package metadata (an editable install's), which importlib.metadata reads when torch
        # looks up entry points after the kernel loads: a refused read there was once blamed on an honest kernel
        readable += [str(p) for pattern in ("*.egg-info", "*.dist-info") for p in ROOT.glob(pattern) if p.is_dir()]
        return confine.confine(readable, [tmp, str(self.exchange)], target)

    def check(self, config: int, variant: int, new_buffers: bool, case: dict | None = None) -> dict:
        """One correctness call: NaN-poisoned outputs and workspace; the inputs' fingerprints before the call,
        and after it the inputs go back with the outputs, for the evaluator to compare exactly. `case`: a
        configuration drawn from the domain, numbered `config` from now on (past the shape set's)."""
        if case is not None:
            self._drawn[config] = draw.from_message(self.task, case)
        task, cfg = self.task, self._drawn[config] if config in self._drawn else self.task_configs[config]
        sizes = cfg.size_dict
        if config not in self.buffers:
            self.buffers.clear()                    # an earlier configuration's buffers are done with
        sets = self.buffers.setdefault(config, [])
        if new_buffers or not sets:                 # earlier sets stay alive: the new one has new addresses;
            sets.append(self._allocate(sizes, edge="misaligned" if sets else "aligned"))   # both end near or
                                                    # at a page's edge; the second's bases only element-aligned
        buf = sets[-1]
        self.copies = []                            # the last call's exported copies (`_export`) are read by now
        fresh = task.make_inputs(cfg, self.device, variant)
        for name, t in fresh.items():
            buf["inputs"][name].copy_(t)
        poison_all([buf])
        before = {n: fingerprint(t) for n, t in buf["inputs"].items()}
        self._sync()
        start = time.perf_counter()
        with fill_uninitialized(self.abi == "torch"), profiled_range():
            rc = self.kernel(buf["inputs"], buf["outputs"], sizes, buf["workspace"], self._stream(),
                             scalars=task.scalar_values(cfg), case=cfg)
            self._sync()
        seconds = time.perf_counter() - start
        self.state.restore()
        overrun = overruns(buf)
        files = self._export(buf["outputs"], config, variant)
        handles = self._export(buf["inputs"], config, f"{variant}.in")
        return {"rc": int(rc), "before": before, "input_handles": handles, "outputs": files, "seconds": seconds,
                "overruns": overrun, "layout": buf["layout"],
                "pointers": {n: t.data_ptr() for n, t in buf["inputs"].items()}}

    def release(self) -> dict:
        """Frees the correctness calls' buffers before timing (the bench shapes' can fill a GPU)."""
        self.buffers.clear()
        self._end_session()
        return {}

    def prepare(self, config: int, baselines: list[str]) -> dict:
        """Compiles the torch.compile baselines for this configuration's shape (slow once, cached after)."""
        cfg = self.task_configs[config]
        probe = self._allocate(cfg.size_dict)
        for name, t in self.task.make_inputs(cfg, self.device, 99).items():
            probe["inputs"][name].copy_(t)
        notes: dict = {}
        for which in baselines:
            compiled_baseline(self, which, cfg, [probe["inputs"][s.name] for s in self.task.inputs], notes)
        self._sync()
        return {"notes": notes}

    def load_other(self, lib: str, module: str | None = None) -> dict:
        """Loads a second kernel, timed paired with the first by `harness.compare` (same checks)."""
        self.other = self._load(lib, module)
        self.state.restore()
        return {}

    def time_setup(self, config: int, baselines: list[str], seed: int, calls: int, reps: int,
                   budget_s: float | None = None, baseline_ms: float | None = None, other: bool = False,
                   kernel: bool = True, canary: float = 0.0, stand_in: bool = False) -> dict:
        """Starts one configuration's timing session (`judge.worker.session`): buffers for `calls` calls per round,
        warm-up of every contender on inputs drawn from `seed` (sent now, after the kernel is loaded),
        CUDA graphs captured. Replies with the rounds to run (fixed now), the clock per contender and the
        warm-up's outputs to check. `kernel=False`: the baselines alone, before any kernel is loaded (the
        harness times them so, where no code of a candidate has run). `canary`: what the evaluator's canary rounds
        add inside each checked call's interval (`Session._canaried`: ms on the CPU, cycles of sleep on CUDA).
        `stand_in`: a function that does nothing takes the kernel's place, in a worker no kernel has loaded in yet
        (refused after): the session the evaluator's clean probe runs (`timed.clean_probe`), every round of it with
        the kernel's calls left out, so that it costs what the harness's own work around them costs."""
        from kevolve.judge.worker.session import WARMUP_SETS, Session, calls_for, plan_rounds, set_bytes
        self._end_session()
        t0 = time.perf_counter()
        notes = self.prepare(config, baselines)["notes"] if baselines else {}
        prepared = time.perf_counter() - t0
        cfg = self.task_configs[config]
        sizes = cfg.size_dict
        fns = {}
        for which in baselines:
            fn = compiled_baseline(self, which, cfg, None, notes)
            if fn is not None:
                fns[which] = fn
        if stand_in and self.kernel is not None:
            raise RuntimeError("time_setup: a stand-in only before a kernel loads")
        if kernel and self.kernel is None and not stand_in:
            raise RuntimeError("time_setup: no kernel is loaded (`load` first, or kernel=False for the baselines)")
        mine = _stand_in if stand_in else self.kernel
        checked = {"kernel": mine, **({"other": self.other} if other else {})} if kernel else {}
        n = calls_for(self.task, sizes, self.abi, calls, reps, self.target == "cuda", len(checked))
        t0 = time.perf_counter()
        session = Session(self, config, checked, fns, n, canary if checked else 0.0)
        allocated = time.perf_counter() - t0
        warm, slowest = session.warmup([seed + i for i in range(min(WARMUP_SETS, len(session.slots)))])
        self.session = session
        gc.freeze()                                 # no collector pass inside a timed round: everything alive now is
        gc.disable()                                # out of its reach, and it is off until the session ends (a full
                                                    # pass over torch's objects costs 0.1-0.3 s of the main thread,
                                                    # which the outside clock would charge to the kernel)
        rounds = plan_rounds(reps, n, self.target == "cuda", budget_s, baseline_ms or slowest,
                             set_bytes(self.task, sizes))
        clock = {name: session.kind.get(name, "wall") for name in session.calls}
        seconds = {f"setup {k}": v
                   for k, v in {"baselines": prepared, "allocate": allocated, **session.seconds}.items()}
        return {**warm, "rounds": rounds, "calls": n, "inputs": len(session.slots), "warm": len(warm["input_handles"]),
                "clock": clock,
                "notes": {**notes, **session.notes}, "worker_s": seconds}

    def time_round(self, variants: list[int], hollow: list[str] | None = None, canary: list[int] | None = None
                   ) -> dict:
        """One round of the session: every contender timed interleaved on inputs `variants`; the kernels'
        outputs of every call come back to be checked. `hollow`: contenders left out of a probe round of the
        evaluator's outside clock (`judge.evaluator.outside`); `canary`: a canary round (`Session.run_round`)."""
        return self.session.run_round(variants, hollow or (), tuple(canary or ()))

    def time_upload(self) -> dict:
        """Each captured graph replayed once, untimed (`Session.upload`), after the warm-up was checked."""
        return self.session.upload()

    def time_end(self) -> dict:
        self.release()
        return {}

    def _end_session(self) -> None:
        """The timing session's buffers and graphs freed now (`Session.close`, never left to a later garbage
        collection: docs/decisions/judge.md), and torch's cached blocks handed back to the device."""
        if self.session is not None:
            self.session.close()
            self.session = None
        gc.enable()
        if self.target == "cuda":
            import torch
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------ helpers
    def ipc_probe(self) -> dict:
        """Shares a small known tensor through CUDA IPC; the evaluator opens it to decide the exchange."""
        import torch
        self._probe = torch.arange(1024, dtype=torch.float32, device="cuda")
        self._sync()
        from kevolve.judge import exchange
        return {"probe": exchange.describe(self._probe)}

    def set_exchange(self, ipc: bool) -> dict:
        self.ipc = ipc
        return {}

    def _export(self, outputs: dict, config: int, variant) -> dict:
        """`exchange.export` of a correctness call's buffers. CUDA IPC cannot share the edge call's buffers, which
        the driver mapped apart (`judge.worker.vmm`): those go as copies, kept alive until the next correctness call."""
        from kevolve.judge import exchange
        from kevolve.judge.worker import vmm
        if self.ipc and any(vmm.owns(t) for t in outputs.values()):
            outputs = {n: t.clone() if vmm.owns(t) else t for n, t in outputs.items()}
            self.copies.append(outputs)
        return exchange.export(outputs, self.exchange, f"{config}.{variant}", self.ipc)

    @property
    def task_configs(self):
        return self._configs

    def set_configs(self, shapes: str) -> dict:
        self._configs, self._drawn = self.task.configs(shapes), {}
        return {"n": len(self._configs)}

    def _allocate(self, sizes: dict, edge: str = "") -> dict:
        """One guarded buffer set for this task on this device (`judge.worker.buffers.allocate`)."""
        return allocate(self.task, self.device, sizes, edge)

    def _stream(self):
        import torch
        return torch.cuda.current_stream().cuda_stream if self.target == "cuda" else None

    def _sync(self):
        import torch
        if self.target == "cuda":
            torch.cuda.synchronize()

    def _bandwidth(self) -> float:
        from kevolve.judge.worker import timing
        return timing.copy_bandwidth(self.device)

    def _peak(self) -> float | None:
        """The device memory's peak bandwidth in GB/s from its properties (double data rate × bus width), or None
        (the CPU, or properties that do not say)."""
        if self.target != "cuda":
            return None
        import torch
        p = torch.cuda.get_device_properties(0)
        khz, bits = getattr(p, "memory_clock_rate", 0), getattr(p, "memory_bus_width", 0)
        return 2 * khz * 1e3 * bits / 8 / 1e9 if khz and bits else None

    # ------------------------------------------------------------------ a CUDA kernel replayed apart from its host code
    def describe(self, config: int, variant: int) -> dict:
        """One captured call of the loaded kernel, described (`judge.replay.describe`)."""
        from kevolve.judge.replay.describe import describe
        return {"description": describe(self, config, variant)}

    def load_device(self, description: dict) -> dict:
        """The library named at `init` replayed from its device code alone, as this worker's kernel
        (`judge.replay.device`); its host code is never loaded here."""
        from kevolve.judge.replay import device, nodes
        if self.kernel is not None and not isinstance(self.kernel, device.ReplayedKernel):
            raise RuntimeError("load_device: this worker has loaded the library's host code")
        if self.kernel is not None:
            self.kernel.close()
        self.kernel = device.ReplayedKernel(self.lib, nodes.from_wire(description))
        return {}

    # ------------------------------------------------------------------ the trivial call
    def trivial(self, n: int) -> dict:
        """ms per call of a function that does nothing, timed as a kernel's calls are (`judge.worker.trivial`);
        refused once a kernel is loaded (its code could bend it)."""
        if self.kernel is not None:
            raise RuntimeError("trivial: timed only before a kernel loads")
        from kevolve.judge.worker import trivial
        return trivial.cuda(self, n) if self.target == "cuda" else trivial.cpu(self, n)
