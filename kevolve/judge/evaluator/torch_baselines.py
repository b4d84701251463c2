"""The torch baselines of one judgement, before the kernel loads: which to time (`plan`), compiling them in the
worker (`prepare`, seeded from and harvested into the node's cache, `judge.evaluator.baseline_cache`, with a
second worker compiling half of them, `judge.evaluator.precompile`), and timing them alone (`time_alone`).

Guarantees: all of it happens before the seal and before any code of the candidate runs in the worker, so no
baseline needs compiling after the seal and nothing a kernel does can have slowed the clean times down; a
compile failure in a worker seeded from the cache turns the cache off on the node and asks the harness to judge
again (`CACHE_RETRY`). Called by the harness; calls nothing above.
"""
from __future__ import annotations

from dataclasses import replace

from kevolve.judge import protocol
from kevolve.judge.evaluator import baseline_cache, precompile, timed
from kevolve.judge.evaluator.checks import Checker
from kevolve.judge.evaluator.judgement import Judgement
from kevolve.judge.evaluator.measure import timed_configs
from kevolve.judge.evaluator.process import WorkerDied
from kevolve.judge.evaluator.reuse import Baselines, Recent
from kevolve.judge.options import Options
from kevolve.progress import bar

CACHE_RETRY = "baseline cache"            # a verdict stage `judge` never returns: it judges once more, unseeded


def plan(configs, options: Options, known_baselines: Recent | None) -> dict[int, dict]:
    """Per configuration to time: the baseline times this evaluator already has (`known`, reused) or the
    baselines to time now (`wanted`: compiled by `prepare` and timed by `time_alone`, both before the
    kernel loads). Decided once, before the seal, so no baseline needs compiling after it."""
    if not options.time_kernel:
        return {}
    plan = {}
    for i in timed_configs(configs, options):
        known = known_baselines.get(configs[i].id) if known_baselines is not None else None
        plan[i] = {"known": known, "wanted": () if known else tuple(options.baselines), "notes": {}}
    return plan


def prepare(j: Judgement, plan: dict[int, dict], info: protocol.Started, helper) -> tuple[str, str] | None:
    """torch.compile's compilers run in the worker now, before the kernel's code can (the seal refuses every new
    process after this): the configurations `helper` (a `precompile.Precompiler`, or None) compiles are taken
    from the node's cache once it is done. Returns (stage, failure) where the judgement ends here."""
    options, worker, clock = j.options, j.worker, j.clock
    wanted = [i for i, p in sorted(plan.items()) if p["wanted"]]
    helped = helper.configs if helper is not None else []
    cached = bool(wanted and (info.confinement or {}).get("landlock") and baseline_cache.enabled(options.cache_dir))
    if not cached:
        helped = []
    if cached:                             # torch.compile's caches as the node has them, only when it will compile
        baseline_cache.seed(worker.tmp, options.cache_dir)
    try:
        for i in bar([i for i in wanted if i not in helped] + helped, "compiling torch baselines"):
            if helper is not None and i in helped and not helper.joined:
                with clock("baselines", "waiting for the second worker's compiles"):
                    helper.join()          # its graphs into the master, then into this worker's caches
                    baseline_cache.seed(worker.tmp, options.cache_dir)
            with clock("baselines"):
                reply = worker.call(protocol.Prepare(i, tuple(plan[i]["wanted"])), 600 + options.timeout)
                plan[i]["notes"] = reply.notes if isinstance(reply, protocol.Prepared) else {}
    except WorkerDied as e:           # no code of the kernel has run yet: the harness's failure, said so
        return "load", (f"harness: the worker died compiling the torch baselines, before the kernel loaded: "
                        f"{e.kind}: {e.detail}")
    if cached:
        failed = sorted({n for p in plan.values() for n in p["notes"].values() if "torch.compile failed" in n})
        if failed:                         # the seeded copy broke torch.compile: the node stops using it, and
            baseline_cache.disable(failed[0][:500], options.cache_dir)   # `judge` starts again unseeded
            return CACHE_RETRY, (f"harness: torch.compile failed in a worker seeded from the node's baseline cache "
                                 f"({failed[0][:300]}); the cache is now off on this node")
        baseline_cache.harvest(worker.tmp, options.cache_dir)   # before the kernel loads: nothing of it
        if helped:
            precompile.mark(j.task, options)
    return None


def time_alone(j: Judgement, checker: Checker, plan: dict[int, dict],
               known_baselines: Recent | None) -> str | None:
    """Times every configuration's `wanted` baselines alone, in this worker before the kernel's library is
    loaded, as each entry's `clean` times: no code of the candidate has run in the process yet, so nothing it
    does can have slowed torch down. A kernel that reaches CPython by pointer arithmetic (no static layer can
    stop that in C) could otherwise patch torch beside its own calls and inflate its speedup
    (`tests/adversarial/test_inprocess.py`). `measure.time_all` then times them again interleaved with the kernel and
    counts, per baseline, the faster of the two; `known_baselines` (the evaluator's `Reuse`, which later
    candidates' speedups use) is fed from the clean times only. Returns the harness's failure, if any."""
    worker, configs, options, clock = j.worker, j.configs, j.options, j.clock
    for i, p in bar(sorted(plan.items()), "timing torch alone"):
        if not p["wanted"]:
            continue
        cfg = configs[i]
        with clock("time"):
            t = timed.time_config(worker, checker, cfg, i, clean_options(options), p["wanted"], kernel=False)
        if t.failure:
            return f"{cfg.id}: timing the torch baselines before the kernel loaded failed: {t.failure}"
        p["clean"] = Baselines.of(t, p["wanted"], p["notes"])
        if known_baselines is not None:
            known_baselines.put(cfg.id, p["clean"])
    return None


def clean_options(options: Options) -> Options:
    """The clean timing's effort (`time_alone`): half the calls of the interleaved timing, at least 10. It is a
    bound — each baseline counts at the faster of it and its interleaved time — not the headline's only sample."""
    return replace(options, reps=max(10, options.reps // 2))
