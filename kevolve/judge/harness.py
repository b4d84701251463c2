"""The harness: judges one kernel on one shape set, truthfully.

`evaluate(task, source, options)` runs the static rules, builds, then `judge`s the library: a fresh worker
process (`kevolve.worker`, no secrets in its environment) loads it and, for every configuration, is asked for
three calls — new buffers, the same buffers with new contents, a second set of buffers — each with outputs
and workspace poisoned with NaN. This process draws the same inputs, computes the reference in float64 on
its own device, digests the inputs, and compares: every element written, finite where the reference is,
within tolerance; inputs unchanged. Only a kernel correct on every configuration is timed, interleaved with
torch eager and torch.compile on the same inputs (see `kevolve.timing`).

Guarantees: the reference never exists in the worker; a crash, CUDA error or hang of the worker is a
verdict (`crash`, `timeout`) and the next evaluation starts a new worker; nothing the candidate prints can
be mistaken for the protocol. `Evaluation.failure` says what failed, where, and by how much.
Not guaranteed: timing stability on a loaded machine; protection from a candidate that attacks the worker's
Python objects in memory (the static rules forbid the means; see `kevolve.verify`).
"""
from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kevolve.judge import build as builder
from kevolve.judge import exchange
from kevolve.judge import rules as verify
from kevolve.judge.results import Evaluation, Measurement, Stats
from kevolve import ROOT
from kevolve.judge.sandbox import clean_env
from kevolve.task.spec import Case, Task




@dataclass(frozen=True)
class Options:
    """How to judge: target, ABI, shape set, limits and timing effort."""
    target: str = "cpu"
    abi: str = "c"
    shapes: str = "small"
    timeout: float = 60.0          # seconds any one step that runs candidate code may take
    baselines: tuple[str, ...] = ("eager", "compile")
    reps: int = 100                # at most this many timed calls per function and configuration...
    budget_s: float = 0.5          # ...or until this many seconds per function are spent
    rotate: int = 3                # input sets the timed calls rotate through
    time_kernel: bool = True
    time_inits: str = "all"        # time every (shape, init), or "first": one init per shape (the search's default)
    gpu: int | None = None         # CUDA device index the evaluator owns (None: what CUDA_VISIBLE_DEVICES gives)
    threads: int | None = None     # CPU threads for the worker (None: all)


class WorkerDied(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


class WorkerProcess:
    """A `python -m kevolve.judge.worker` child speaking JSON lines, killed with its process group on a hang."""

    def __init__(self, options: Options):
        extra = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                 "CUDA_HOME": builder.cuda_home(), "PYTHONUNBUFFERED": "1"}
        if options.gpu is not None:
            extra["CUDA_VISIBLE_DEVICES"] = _physical_gpu(options.gpu)
        if options.target == "cpu":
            # torch's OpenMP and the kernel's (the system libgomp) are two thread pools; spinning ones
            # starve each other on few cores and time each other's spin, not work
            extra.setdefault("OMP_WAIT_POLICY", os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
        self.proc = subprocess.Popen([sys.executable, "-m", "kevolve.judge.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(extra),
                                     start_new_session=True, cwd=tempfile.gettempdir())
        self.stderr = collections.deque(maxlen=256)       # the tail only: a kernel may print without end
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)

    def _drain(self) -> None:
        for line in iter(self.proc.stderr.readline, b""):
            self.stderr.append(line[:2000].decode(errors="replace"))

    def call(self, cmd: str, timeout: float, **args) -> dict:
        """Sends one command; the reply must carry the request's nonce (a kernel writing to the protocol
        pipe cannot know it), else the worker is killed and the call fails as `protocol`."""
        nonce = secrets.token_hex(16)
        try:
            self.proc.stdin.write((json.dumps({"cmd": cmd, "nonce": nonce, **args}) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerDied("crash", self._died()) from None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerDied("timeout", f"{cmd} did not finish within {timeout:.0f} s")
            if self.sel.select(timeout=min(left, 1.0)):
                line = self.proc.stdout.readline()
                if not line:
                    raise WorkerDied("crash", self._died())
                try:
                    reply = json.loads(line)
                except ValueError:
                    reply = None
                if not isinstance(reply, dict) or reply.pop("nonce", None) != nonce:
                    self.kill()
                    raise WorkerDied("protocol", "something other than the harness wrote to its protocol pipe "
                                     f"during {cmd} (the kernel?): {line[:120]!r}")
                return reply

    def _died(self) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        self._drainer.join(timeout=2)
        why = f"killed by signal {signal.Signals(-code).name}" if code and code < 0 else f"exit status {code}"
        return f"the worker process died ({why}){_tail(self.stderr_text())}"

    def stderr_text(self) -> str:
        return "".join(self.stderr)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"cmd": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.sel.close()


def _physical_gpu(index: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible.split(",")[index] if visible else str(index)


def _tail(text: str, lines: int = 12) -> str:
    keep = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return (":\n" + "\n".join(keep)) if keep else ""


# ---------------------------------------------------------------------- what an evaluator keeps between judgements
class References:
    """Input digests and float64 reference outputs per (configuration, input variant), up to `max_bytes`.

    Inputs are drawn from fixed seeds, so every candidate of a search is checked against the same
    references; recomputing them is the evaluator's largest cost on small shapes. Entries are kept in the
    order first needed and never evicted (the configurations are swept in order, so LRU would thrash);
    what does not fit is computed each time."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.bytes, self.entries = max_bytes, 0, {}

    def get(self, key, compute):
        if key in self.entries:
            return self.entries[key]
        value = compute()
        size = sum(t.numel() * t.element_size() for pair in value[1] for t in pair if t is not None)
        if self.bytes + size <= self.max_bytes:
            self.entries[key] = value
            self.bytes += size
        return value


class BaselineTimes:
    """torch eager / torch.compile times per configuration, reused for `refresh_s` seconds.

    Baselines do not depend on the candidate; timing them for each one (and compiling torch.compile in
    each fresh worker) is most of a search's judging time. Every `refresh_s` they are timed again,
    interleaved with that candidate's kernel as `python -m kevolve.evaluate` always does."""

    def __init__(self, refresh_s: float):
        self.refresh_s, self.entries = refresh_s, {}

    def get(self, config_id: str):
        hit = self.entries.get(config_id)
        return hit[1] if hit and time.monotonic() - hit[0] < self.refresh_s else None

    def put(self, config_id: str, value) -> None:
        self.entries[config_id] = (time.monotonic(), value)


class Reuse:
    """An evaluator's state across judgements: a spare worker process started while the last candidate
    was judged (its Python and torch imports are done; no candidate code has touched
    it), the reference cache and the baseline times."""

    def __init__(self, options: Options, reference_bytes: int, baseline_refresh_s: float):
        self.options = options
        self.references = References(reference_bytes)
        self.baselines = BaselineTimes(baseline_refresh_s) if baseline_refresh_s > 0 else None
        self._spare: WorkerProcess | None = None

    def worker(self) -> WorkerProcess:
        """The spare if it is alive, else a new worker."""
        spare, self._spare = self._spare, None
        if spare is not None and spare.proc.poll() is None:
            return spare
        if spare is not None:
            spare.close()
        return WorkerProcess(self.options)

    def start_spare(self) -> None:
        """Starts the next judgement's worker. `judge` calls this once its own worker has loaded, so the
        spare's imports overlap the correctness calls, never the timed ones."""
        if self._spare is None:
            self._spare = WorkerProcess(self.options)

    def close(self) -> None:
        if self._spare is not None:
            self._spare.close()
            self._spare = None


# ---------------------------------------------------------------------- entry points
def evaluate(task: Task, source: str, options: Options) -> Evaluation:
    """Static rules, build, then judge: the whole verdict on one source."""
    base = dict(task=task.name, target=options.target, abi=options.abi, shapes=options.shapes)
    verdict = verify.check(source, options.target, options.abi)
    if not verdict.ok:
        return Evaluation(**base, compiled=False, correct=False, failure=f"static rule: {verdict.reason}",
                          stage="verify")
    built = builder.build(source, options.target, options.abi)
    if not built.ok:
        return Evaluation(**base, compiled=False, correct=False, failure=f"compile error: {built.error}",
                          stage="build", build_seconds=built.seconds)
    ev = judge(task, built.lib_path, options, module=built.module_name)
    return Evaluation(**{**ev.__dict__, "build_seconds": built.seconds})


def judge(task: Task, lib_path: str, options: Options, module: str | None = None,
          reuse: "Reuse | None" = None, fresh_baselines: bool = False) -> Evaluation:
    """Runs a built library in a fresh worker: correctness on every configuration, then timing.

    `reuse` (an evaluator's, kept across its judgements) supplies a worker started in advance, cached
    float64 references and recently timed baselines; none of it is shared with, or reachable by, a kernel.
    `fresh_baselines` times the baselines interleaved with this kernel even when recent times are known."""
    start = time.perf_counter()
    configs = task.configs(options.shapes)
    base = dict(task=task.name, target=options.target, abi=options.abi, shapes=options.shapes, compiled=True)
    files = Path(tempfile.mkdtemp(prefix="kevolve-", dir=exchange.files_root()))
    worker = reuse.worker() if reuse else WorkerProcess(options)
    device_name, bandwidth, measurements = "", None, []
    clock = _Phases()
    baselines_reused = False               # some configuration's baseline times came from `reuse`

    def verdict(stage: str = "done", failure: str | None = None, ms: list | None = None) -> Evaluation:
        return Evaluation(**base, correct=failure is None, stage=stage, failure=failure,
                          measurements=tuple(measurements if ms is None else ms),
                          eval_seconds=time.perf_counter() - start, device=device_name, bandwidth_gbs=bandwidth,
                          phases=clock.done(), baselines_reused=baselines_reused, log=worker.stderr_text()[-4000:])
    try:
        try:
            with clock("load"):
                info = worker.call("init", options.timeout + 120, task_dir=task.ref, lib=lib_path, abi=options.abi,
                                   target=options.target, module=module, exchange=str(files),
                                   threads=options.threads)
        except WorkerDied as e:            # a crash or hang while the library loads (static initialisers)
            info = {"error": f"{e.kind}: {e.detail}"}
        if reuse:
            reuse.start_spare()
        if "error" in info:
            return verdict("load", f"load error: {info['error']}")
        device_name, bandwidth = info["device"], info["bandwidth_gbs"]
        worker.call("set_configs", 60, shapes=options.shapes)
        if options.target == "cuda":
            ipc = exchange.ipc_works(lambda cmd: worker.call(cmd, 60), info.get("uuid"))
            worker.call("set_exchange", 60, ipc=ipc)
        checker = Checker(task, options, clock, reuse.references if reuse else None)
        for i, cfg in enumerate(configs):
            m = checker.check_config(worker, i, cfg)
            measurements.append(m)
            if not m.correct:
                return verdict("correctness", f"{cfg.id}: {m.failure}")
        worker.call("release", 60)
        if options.time_kernel:
            known = reuse.baselines if reuse and not fresh_baselines else None
            timed, wrong, baselines_reused = _time_all(worker, task, configs, measurements, options, bandwidth,
                                                       checker, clock, known)
            if wrong is not None:
                return verdict("timing", f"{wrong.config}: {wrong.failure}", timed + [wrong])
            measurements = timed
        return verdict()
    except WorkerDied as e:
        stage = "correctness" if len(measurements) < len(configs) or not options.time_kernel else "timing"
        where = configs[len(measurements)].id + ": " if len(measurements) < len(configs) else ""
        return verdict(stage, f"{where}{e.kind}: {e.detail}")
    finally:
        worker.close()
        shutil.rmtree(files, ignore_errors=True)


class _Phases:
    """Wall seconds per judging phase: `load` (worker start, library load), `check` (the worker's correctness
    calls and output export), `reference` (this process: inputs, float64 reference, comparison),
    `baselines` (torch.compile per shape), `time` (interleaved timing). Tells where a slow judgement goes."""

    def __init__(self):
        self.seconds: dict[str, float] = collections.defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - t0

    def done(self) -> dict[str, float]:
        return dict(self.seconds)


def _time_all(worker: WorkerProcess, task: Task, configs, measurements: list[Measurement], options: Options,
              bandwidth: float, checker: "Checker", clock: _Phases,
              known_baselines: "BaselineTimes | None") -> tuple[list[Measurement], Measurement | None, bool]:
    """Times one configuration per (shape, init) — per shape with time_inits="first" — the first seed's.
    Baselines timed recently by this evaluator (`known_baselines`) are reused, and only the kernel is timed.
    Returns the measurements, the configuration whose last timed call gave a wrong answer, if any (timed
    calls must compute too), and whether any baseline times were reused."""
    out, timed, reused = [], set(), False
    for i, (cfg, m) in enumerate(zip(configs, measurements)):
        key = (cfg.shape_id, cfg.init if options.time_inits == "all" else "")
        if key in timed:
            out.append(m)
            continue
        timed.add(key)
        known = known_baselines.get(cfg.id) if known_baselines is not None else None
        reused = reused or known is not None
        wanted = [] if known else list(options.baselines)
        prep = {}
        if wanted:
            with clock("baselines"):
                prep = worker.call("prepare", 600 + options.timeout, config=i, baselines=wanted)
        limit = options.timeout + 3 * options.budget_s * (1 + len(wanted)) + 60
        with clock("time"):
            reply = worker.call("time", limit, config=i, reps=options.reps, budget_s=options.budget_s,
                                baselines=wanted, rotate=_rotations(task, cfg, options))
        if "error" in reply:
            raise WorkerDied("crash", f"while timing: {reply['error']}")
        if "outputs" in reply:
            why, _, _ = checker.compare_files(cfg, reply["variant"], reply["outputs"])
            if why:
                return out, Measurement(**{**m.__dict__, "correct": False, "failure": why}), reused
        s = reply["samples"]
        if known:
            base_stats, notes = known
        else:
            base_stats = {b: Stats.of(s[b]) for b in ("eager", "compile") if b in s}
            notes = {**prep.get("notes", {}), **reply.get("notes", {})}
            if known_baselines is not None:
                known_baselines.put(cfg.id, (base_stats, notes))
        floor_ms = task.floor(cfg.size_dict) / (bandwidth * 1e9) * 1e3 if bandwidth else None
        failure = "; ".join(f"{k}: {v}" for k, v in notes.items()) or None
        out.append(Measurement(**{**m.__dict__, "kernel": Stats.of(s["kernel"]), "eager": base_stats.get("eager"),
                                  "compile": base_stats.get("compile"), "floor_ms": floor_ms, "failure": failure}))
    return out, None, reused


def _rotations(task: Task, cfg: Case, options: Options) -> int:
    import torch
    nbytes = sum(math.prod(task.shape(s, cfg.size_dict)) * torch.empty(0, dtype=getattr(torch, s.dtype)).element_size()
                 for s in task.inputs + task.outputs)
    limit = (16 << 30) if options.target == "cuda" else (1 << 30)
    return max(1, min(options.rotate, limit // max(nbytes, 1)))


class Checker:
    """The evaluator's side of correctness: same inputs, float64 reference, digests, element-wise verdict."""

    CALLS = ((0, False), (1, False), (2, True))   # (variant, new buffers): fresh, same buffers new data, new buffers

    def __init__(self, task: Task, options: Options, clock: _Phases | None = None,
                 references: "References | None" = None):
        self.task, self.options, self.clock = task, options, clock or _Phases()
        self.references = references if references is not None else References(0)
        self.device = "cuda" if options.target == "cuda" else "cpu"

    def reference(self, cfg: Case, variant: int) -> tuple[dict, tuple]:
        """The inputs' digests and, per output, the float64 reference and where it is finite (None: all of
        it, the usual case) for inputs `variant` of `cfg`."""
        import torch
        from kevolve.judge.worker import digest

        def compute():
            inputs = self.task.make_inputs(cfg, self.device, variant)
            up = {n: t.double() if t.dtype.is_floating_point else t for n, t in inputs.items()}
            expected = []
            for spec, r in zip(self.task.outputs, self.task.call_reference(up, cfg.size_dict)):
                r = r.reshape(self.task.shape(spec, cfg.size_dict))
                finite = torch.isfinite(r) if r.dtype.is_floating_point else None
                expected.append((r, None if finite is None or bool(finite.all()) else finite))
            return {n: digest(t) for n, t in inputs.items()}, tuple(expected)
        with self.clock("reference"):
            return self.references.get((cfg.id, variant), compute)

    def check_config(self, worker: WorkerProcess, index: int, cfg: Case) -> Measurement:
        worst_abs = worst_rel = 0.0
        pointers = None
        for variant, new_buffers in self.CALLS:
            with self.clock("check"):
                reply = worker.call("check", self.options.timeout, config=index, variant=variant,
                                    new_buffers=new_buffers)
            fail = lambda why: Measurement(cfg.id, cfg.shape_id, cfg.init, cfg.heldout, False,  # noqa: E731
                                           worst_abs, worst_rel, failure=why)
            if "error" in reply:
                worker.kill()          # a CUDA error poisons the context: never reuse this worker
                return fail(f"crash: {reply['error']}")
            mine, expected = self.reference(cfg, variant)
            if reply["before"] != mine:
                raise RuntimeError(f"harness error: the worker drew different inputs for {cfg.id} "
                                   "(nondeterministic generator?) — please report this")
            if reply["rc"] != 0:
                return fail(f"the kernel returned {reply['rc']} (call {variant + 1})")
            if reply.get("overruns"):
                return fail(f"wrote past the end of {', '.join(reply['overruns'])} (call {variant + 1})")
            changed = [n for n in mine if reply["after"][n] != mine[n]]
            if changed:
                return fail(f"input {', '.join(changed)} modified by the kernel (call {variant + 1})")
            if new_buffers and pointers == reply["pointers"]:
                raise RuntimeError("harness error: the second buffer set reused the first one's addresses")
            pointers = reply["pointers"]
            with self.clock("reference"):
                why, a, r = self._compare(expected, cfg, reply["outputs"], _CALLS.get(variant, "a timed call"))
            worst_abs, worst_rel = max(worst_abs, a), max(worst_rel, r)
            if why:
                return fail(why)
        return Measurement(cfg.id, cfg.shape_id, cfg.init, cfg.heldout, True, worst_abs, worst_rel)

    def compare_files(self, cfg: Case, variant: int, files: dict) -> tuple[str | None, float, float]:
        """Checks outputs a worker wrote for inputs `variant` (a timed call's, say) against the reference."""
        _, expected = self.reference(cfg, variant)
        with self.clock("reference"):
            return self._compare(expected, cfg, files, _CALLS.get(variant, "a timed call"))

    def _compare(self, expected: tuple, cfg: Case, files: dict, call: str) -> tuple[str | None, float, float]:
        """One pass for the verdict (NaN and Inf propagate through the maxima); the diagnosis of a failure
        (what is NaN, what is out of tolerance, and where) runs only when there is one."""
        import torch
        task, sizes = self.task, cfg.size_dict
        worst_abs = worst_rel = 0.0
        for spec, (ref, finite) in zip(task.outputs, expected):
            out = exchange.read(files[spec.name], getattr(torch, spec.dtype), task.shape(spec, sizes), self.device)
            if not out.dtype.is_floating_point:
                bad = out != ref
                if bad.any():
                    return f"output {spec.name}: {int(bad.sum())} wrong values ({call})", 0.0, float("inf")
                continue
            out64 = out.double()
            err = torch.sub(out64, ref).abs_()
            tol = torch.abs(ref).mul_(task.rtol).add_(task.atol)
            if finite is not None:             # where the reference is NaN or Inf, any value passes
                err.masked_fill_(~finite, 0)
                tol.masked_fill_(~finite, task.atol)
            worst_err = float(err.max()) if err.numel() else 0.0
            ratio = err.div_(tol)
            worst = float(ratio.max()) if ratio.numel() else 0.0
            if math.isfinite(worst) and worst <= 1.0:
                worst_abs, worst_rel = max(worst_abs, worst_err), max(worst_rel, worst)
                continue
            return self._diagnose(spec.name, out64, ref, finite, ratio, call, max(worst_abs, worst_err),
                                  max(worst_rel, worst))
        return None, worst_abs, worst_rel

    def _diagnose(self, name: str, out64, ref, finite, ratio, call: str, worst_abs: float, worst_rel: float):
        import numpy as np
        import torch
        task, shape = self.task, tuple(out64.shape)
        not_finite = ~torch.isfinite(out64)
        if finite is not None:
            not_finite &= finite
        if not_finite.any():
            nan = torch.isnan(out64) & not_finite
            if nan.any():
                return (f"output {name}: {int(nan.sum())} of {out64.numel()} elements NaN — not written? "
                        f"first at {_first(nan)} ({call})", float("inf"), float("inf"))
            return (f"output {name}: {int(not_finite.sum())} elements Inf where the reference is finite, "
                    f"first at {_first(not_finite)} ({call})", float("inf"), float("inf"))
        flat = int(ratio.reshape(-1).argmax())
        idx = tuple(int(i) for i in np.unravel_index(flat, shape))
        n_bad = int((ratio > 1).sum())
        return (f"output {name}: {n_bad} of {out64.numel()} elements outside tolerance "
                f"(atol={task.atol:g}, rtol={task.rtol:g}); worst at {idx}: got {float(out64.reshape(-1)[flat]):.6g}, "
                f"expected {float(ref.reshape(-1)[flat]):.6g} ({call})", worst_abs, worst_rel)


_CALLS = {0: "first call", 1: "second call, same buffers, new inputs", 2: "third call, new buffers"}


def _first(mask) -> tuple[int, ...]:
    import numpy as np
    flat = int(mask.reshape(-1).nonzero()[0, 0])
    return tuple(int(i) for i in np.unravel_index(flat, tuple(mask.shape)))
