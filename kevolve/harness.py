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

from kevolve import build as builder
from kevolve import verify
from kevolve.results import Evaluation, Measurement, Stats
from kevolve.sandbox import clean_env
from kevolve.task import Config, Task

ROOT = Path(__file__).resolve().parent.parent


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
    """A `python -m kevolve.worker` child speaking JSON lines, killed with its process group on a hang."""

    def __init__(self, options: Options):
        extra = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                 "CUDA_HOME": builder.cuda_home(), "PYTHONUNBUFFERED": "1"}
        if options.gpu is not None:
            extra["CUDA_VISIBLE_DEVICES"] = _physical_gpu(options.gpu)
        if options.target == "cpu":
            # torch's OpenMP and the kernel's (the system libgomp) are two thread pools; spinning ones
            # starve each other on few cores and time each other's spin, not work
            extra.setdefault("OMP_WAIT_POLICY", os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
        self.proc = subprocess.Popen([sys.executable, "-m", "kevolve.worker"], stdin=subprocess.PIPE,
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


def judge(task: Task, lib_path: str, options: Options, module: str | None = None) -> Evaluation:
    """Runs a built library in a fresh worker: correctness on every configuration, then timing."""
    start = time.perf_counter()
    configs = task.configs(options.shapes)
    base = dict(task=task.name, target=options.target, abi=options.abi, shapes=options.shapes, compiled=True)
    exchange = Path(tempfile.mkdtemp(prefix="kevolve-", dir=_exchange_root()))
    worker = WorkerProcess(options)
    device_name, bandwidth, measurements = "", None, []

    def verdict(stage: str = "done", failure: str | None = None, ms: list | None = None) -> Evaluation:
        return Evaluation(**base, correct=failure is None, stage=stage, failure=failure,
                          measurements=tuple(measurements if ms is None else ms),
                          eval_seconds=time.perf_counter() - start, device=device_name, bandwidth_gbs=bandwidth,
                          log=worker.stderr_text()[-4000:])
    try:
        try:
            info = worker.call("init", options.timeout + 120, task_dir=task.ref, lib=lib_path, abi=options.abi,
                               target=options.target, module=module, exchange=str(exchange), threads=options.threads)
        except WorkerDied as e:            # a crash or hang while the library loads (static initialisers)
            info = {"error": f"{e.kind}: {e.detail}"}
        if "error" in info:
            return verdict("load", f"load error: {info['error']}")
        device_name, bandwidth = info["device"], info["bandwidth_gbs"]
        worker.call("set_configs", 60, shapes=options.shapes)
        checker = Checker(task, options)
        for i, cfg in enumerate(configs):
            m = checker.check_config(worker, i, cfg)
            measurements.append(m)
            if not m.correct:
                return verdict("correctness", f"{cfg.id}: {m.failure}")
        if options.time_kernel:
            timed, wrong = _time_all(worker, task, configs, measurements, options, bandwidth, checker)
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
        shutil.rmtree(exchange, ignore_errors=True)


def _exchange_root() -> str | None:
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > (8 << 30):
        return shm
    return None


def _time_all(worker: WorkerProcess, task: Task, configs, measurements: list[Measurement], options: Options,
              bandwidth: float, checker: "Checker") -> tuple[list[Measurement], Measurement | None]:
    """Times one configuration per (shape, init) — per shape with time_inits="first" — the first seed's.
    Returns the measurements, and the
    configuration whose last timed call gave a wrong answer, if any (timed calls must compute too)."""
    out, timed = [], set()
    for i, (cfg, m) in enumerate(zip(configs, measurements)):
        key = (cfg.shape_id, cfg.init if options.time_inits == "all" else "")
        if key in timed:
            out.append(m)
            continue
        timed.add(key)
        prep = worker.call("prepare", 600 + options.timeout, config=i, baselines=list(options.baselines))
        n_fns = 1 + len(options.baselines)
        limit = options.timeout + 3 * options.budget_s * n_fns + 60
        reply = worker.call("time", limit, config=i, reps=options.reps, budget_s=options.budget_s,
                            baselines=list(options.baselines), rotate=_rotations(task, cfg, options))
        if "error" in reply:
            raise WorkerDied("crash", f"while timing: {reply['error']}")
        if "outputs" in reply:
            why, _, _ = checker.compare_files(cfg, reply["variant"], reply["outputs"])
            if why:
                return out, Measurement(**{**m.__dict__, "correct": False, "failure": why})
        s = reply["samples"]
        floor_ms = task.floor(cfg.size_dict) / (bandwidth * 1e9) * 1e3 if bandwidth else None
        notes = {**prep.get("notes", {}), **reply.get("notes", {})}
        failure = "; ".join(f"{k}: {v}" for k, v in notes.items()) or None
        out.append(Measurement(**{**m.__dict__, "kernel": Stats.of(s["kernel"]),
                                  "eager": Stats.of(s["eager"]) if "eager" in s else None,
                                  "compile": Stats.of(s["compile"]) if "compile" in s else None,
                                  "floor_ms": floor_ms, "failure": failure}))
    return out, None


def _rotations(task: Task, cfg: Config, options: Options) -> int:
    import torch
    nbytes = sum(math.prod(task.shape(s, cfg.size_dict)) * torch.empty(0, dtype=getattr(torch, s.dtype)).element_size()
                 for s in task.inputs + task.outputs)
    limit = (16 << 30) if options.target == "cuda" else (1 << 30)
    return max(1, min(options.rotate, limit // max(nbytes, 1)))


class Checker:
    """The evaluator's side of correctness: same inputs, float64 reference, digests, element-wise verdict."""

    CALLS = ((0, False), (1, False), (2, True))   # (variant, new buffers): fresh, same buffers new data, new buffers

    def __init__(self, task: Task, options: Options):
        self.task, self.options = task, options
        self.device = "cuda" if options.target == "cuda" else "cpu"

    def check_config(self, worker: WorkerProcess, index: int, cfg: Config) -> Measurement:
        from kevolve.worker import digest
        worst_abs = worst_rel = 0.0
        pointers = None
        for variant, new_buffers in self.CALLS:
            reply = worker.call("check", self.options.timeout, config=index, variant=variant, new_buffers=new_buffers)
            fail = lambda why: Measurement(cfg.id, cfg.shape_id, cfg.init, cfg.heldout, False,  # noqa: E731
                                           worst_abs, worst_rel, failure=why)
            if "error" in reply:
                worker.kill()          # a CUDA error poisons the context: never reuse this worker
                return fail(f"crash: {reply['error']}")
            inputs = self.task.make_inputs(cfg, self.device, variant)
            mine = {n: digest(t) for n, t in inputs.items()}
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
            why, a, r = self._compare(inputs, cfg, reply["outputs"], _CALLS.get(variant, "a timed call"))
            worst_abs, worst_rel = max(worst_abs, a), max(worst_rel, r)
            if why:
                return fail(why)
        return Measurement(cfg.id, cfg.shape_id, cfg.init, cfg.heldout, True, worst_abs, worst_rel)

    def compare_files(self, cfg: Config, variant: int, files: dict) -> tuple[str | None, float, float]:
        """Checks outputs a worker wrote for inputs `variant` (a timed call's, say) against the reference."""
        return self._compare(self.task.make_inputs(cfg, self.device, variant), cfg, files,
                             _CALLS.get(variant, "a timed call"))

    def _compare(self, inputs: dict, cfg: Config, files: dict, call: str) -> tuple[str | None, float, float]:
        import numpy as np
        import torch
        task, sizes = self.task, cfg.size_dict
        up = {n: t.double() if t.dtype.is_floating_point else t for n, t in inputs.items()}
        refs = task.call_reference(up, sizes)
        worst_abs = worst_rel = 0.0
        for spec, ref in zip(task.outputs, refs):
            shape = task.shape(spec, sizes)
            mapped = torch.from_file(files[spec.name], shared=True, size=math.prod(shape), dtype=getattr(torch, spec.dtype))
            out = mapped.reshape(shape).to(self.device, copy=True)
            del mapped
            os.unlink(files[spec.name])
            ref = ref.reshape(shape)
            if not out.dtype.is_floating_point:
                bad = out != ref
                if bad.any():
                    return f"output {spec.name}: {int(bad.sum())} wrong values ({call})", 0.0, float("inf")
                continue
            out64 = out.double()
            ref_finite = torch.isfinite(ref)
            nan = torch.isnan(out64) & ref_finite
            if nan.any():
                idx = _first(nan)
                return (f"output {spec.name}: {int(nan.sum())} of {out.numel()} elements NaN — not written? "
                        f"first at {idx} ({call})", float("inf"), float("inf"))
            inf = torch.isinf(out64) & ref_finite
            if inf.any():
                return f"output {spec.name}: {int(inf.sum())} elements Inf where the reference is finite, first at {_first(inf)} ({call})", float("inf"), float("inf")
            err = (out64 - ref).abs().masked_fill(~ref_finite, 0)
            ratio = err / (task.atol + task.rtol * ref.abs().masked_fill(~ref_finite, 0))
            worst = float(ratio.max()) if ratio.numel() else 0.0
            worst_abs, worst_rel = max(worst_abs, float(err.max()) if err.numel() else 0.0), max(worst_rel, worst)
            if worst > 1.0:
                flat = int(ratio.reshape(-1).argmax())
                idx = tuple(int(i) for i in np.unravel_index(flat, shape))
                n_bad = int((ratio > 1).sum())
                return (f"output {spec.name}: {n_bad} of {out.numel()} elements outside tolerance "
                        f"(atol={task.atol:g}, rtol={task.rtol:g}); worst at {idx}: got {float(out64.reshape(-1)[flat]):.6g}, "
                        f"expected {float(ref.reshape(-1)[flat]):.6g} ({call})", worst_abs, worst_rel)
        return None, worst_abs, worst_rel


_CALLS = {0: "first call", 1: "second call, same buffers, new inputs", 2: "third call, new buffers"}


def _first(mask) -> tuple[int, ...]:
    import numpy as np
    flat = int(mask.reshape(-1).nonzero()[0, 0])
    return tuple(int(i) for i in np.unravel_index(flat, tuple(mask.shape)))
