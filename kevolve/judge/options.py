"""How to judge: the options every judgement takes (target, ABI, shape set, limits, timing effort).

Resolved once (by `kevolve.search.plan` for a search, by `kevolve.cli.evaluate` for one kernel) and passed down
unchanged. What a node may set for itself (its cache folder, the exchange, the baseline cache) is read from its
environment here, and only here: `resolved(options)` where a judgement starts (`harness.judge`, `compare`), and
`node_cache`, `baseline_cache_on`, `baseline_cache_bytes` for the modules that keep the node's caches.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from kevolve.config import env
from kevolve.config.schema import BASELINES, COMPILED_CHECKS, CPU_FLUSH  # noqa: F401  (the choices, kept in the schema)


@dataclass(frozen=True)
class Options:
    """How to judge: target, ABI, shape set, limits and timing effort."""
    target: str = "cpu"
    abi: str = "c"
    shapes: str = "small"
    timeout: float = 60.0          # seconds any one step that runs candidate code may take
    baselines: tuple[str, ...] = ("eager", "compile")   # any of BASELINES; "best torch" is the fastest timed
    reps: int = 100                # timed calls per contender and configuration, fixed before timing starts...
    budget_s: float = 0.5          # ...fewer when `reps` calls of the slowest baseline (its warm-up) take longer
    calls: int = 10                # calls per round, each on fresh inputs with its own buffers (one CUDA graph)
    time_kernel: bool = True
    time_inits: str = "all"        # time every (shape, init), or "first": one init per shape (the search's default)
    gpu: int | None = None         # CUDA device index the evaluator owns (None: what CUDA_VISIBLE_DEVICES gives)
    threads: int | None = None     # CPU target: threads for torch and the kernel, on as many claimed CPUs
                                   # (judge/cpus.py; None: all)
    exchange: str = "auto"         # how outputs reach the evaluator on cuda: auto (CUDA IPC when it works) | files
    cache_dir: str | None = None   # resources.cache_dir: where the node keeps builds and torch.compile's caches
    compiled_checks: str = "auto"  # the evaluator's reference and comparison compiled (judge/evaluator/fused.py): auto
                                   # (on CUDA, where an evaluator keeps them across judgements) | on | off
    strict_cuda: bool = True       # cuda: the confinement of issue 37 in full — the driver started after Landlock, new
                                   # threads refused after the seal, a refused attempt a rejection; false: the driver
                                   # started before the confinement, threads allowed, attempts noted in the log only
                                   # (docs/guarantees.md). The CPU target always has it all
    domain: str = "draw"           # draw: every judgement also checks configurations drawn from the task's domain
                                   # (judge/evaluator/drawn.py) | off: the shape set's alone (tools that time only)
    cpu_flush: str = "lines"       # how a timed CPU call is made cold (judge/worker/timing.py CpuClock): lines (its own
                                   # buffers evicted, cost ∝ their bytes) | llc (2 × the LLC rewritten, the old way)
    replay: bool = False           # cuda, C ABI: time the kernel's device code in a worker that never ran its host
                                   # code (judge/evaluator/replayed.py; issue 49). KEVOLVE_CUDA_REPLAY=1 turns it on



def default_shapes(target: str) -> str:
    """The shape set a judgement uses unless told: `bench` (robust-kbench's sizes) on a GPU, `small` on the CPU."""
    return "bench" if target == "cuda" else "small"


def node_cache(configured: str | None = None) -> Path:
    """This node's cache folder: KEVOLVE_CACHE if set here, else the configured one (`resources.cache_dir`), else
    ~/.cache/kevolve. Read where the build or the evaluator runs, so each node of a cluster may set its own."""
    return Path(env.cache_dir() or configured or Path.home() / ".cache" / "kevolve")


def baseline_cache_on() -> bool:
    """Whether this node seeds workers from its torch.compile cache (KEVOLVE_BASELINE_CACHE=0 turns it off)."""
    return env.baseline_cache_on()


def baseline_cache_bytes() -> int:
    """The node's torch.compile cache's size cap: KEVOLVE_BASELINE_CACHE_GB GiB, else 2."""
    return int(env.baseline_cache_bytes())


def resolved(options: Options) -> Options:
    """`options` with this node's settings read in: its cache folder (`node_cache`), the exchange
    (KEVOLVE_EXCHANGE overrides `exchange`) and the CUDA replay (KEVOLVE_CUDA_REPLAY=1|0 overrides `replay`).
    Idempotent; what every step of a judgement below is given."""
    replay = os.environ.get("KEVOLVE_CUDA_REPLAY", "").strip()     # read here, as the node's other settings are
    return replace(options, cache_dir=str(node_cache(options.cache_dir)),
                   exchange=env.exchange() or options.exchange,
                   replay=options.replay if not replay else replay not in ("0", "false", "off"))
