"""The torch baselines of one judgement, in the clean baseline worker (`judge.evaluator.baseline_worker`): which to
time (`plan`), compiling them there (`prepare`, seeded from and harvested into the node's cache,
`judge.evaluator.baseline_cache`, with a second worker compiling half of them the first time a node meets a shape set,
`judge.evaluator.precompile`), and, the first time the baseline worker meets a configuration, timing them alone
(`time_alone`): their slowest call sets the configuration's rounds and the canary's length before the kernel's
timing starts. The interleaved timing is `measure.time_all`'s, with `paced.Paced`.

Guarantees: no code of any candidate runs where torch is compiled or timed; the kernel's worker compiles nothing;
a compile failure in a worker seeded from the cache turns the cache off on the node and asks the harness to judge
again (`CACHE_RETRY`); the baseline worker's failure is the harness's (`harness: ...`). Called by the harness; calls
nothing above.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kevolve.judge import protocol
from kevolve.judge.evaluator import baseline_cache, precompile, timed
from kevolve.judge.evaluator.baseline_worker import HarnessFailed
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
    baselines to time now (`wanted`: compiled by `prepare`, timed beside the kernel by `measure.time_all`)."""
    if not options.time_kernel:
        return {}
    plan = {}
    for i in timed_configs(configs, options):
        known = known_baselines.get(configs[i].id) if known_baselines is not None else None
        plan[i] = {"known": known, "wanted": () if known else tuple(options.baselines), "notes": {}}
    return plan


def prepare(j: Judgement, plan: dict[int, dict]) -> tuple[str, str] | None:
    """The baseline worker started (or found running) for this judgement, pinned to the kernel worker's CPUs, and
    torch.compile's graphs of every `wanted` configuration compiled there (once per baseline worker: it keeps them),
    each configuration's slowest baseline known (`time_alone` adds what is not). Returns (stage, failure) where the
    judgement ends here."""
    options, clock, bw = j.options, j.clock, j.baseline
    wanted = [i for i, p in sorted(plan.items()) if p["wanted"]]
    if not wanted:
        return None
    try:
        info = bw.ready(j.task, options)
        bw.pin(j.worker)
        todo = [i for i in wanted if (i, plan[i]["wanted"]) not in bw.prepared]
        cached = bool(todo and (info.confinement or {}).get("landlock") and baseline_cache.enabled(options.cache_dir))
        helped = precompile.needed(j.task, options, todo) if cached else []
        helper = precompile.Precompiler(j.task, options, str(Path(j.task.dir) / "task.yaml"), bw.files, helped, plan) \
            if helped else None
        try:
            for i in bar([i for i in todo if i not in helped] + helped, "compiling torch baselines"):
                if helper is not None and i in helped and not helper.joined:
                    with clock("baselines", "waiting for the second worker's compiles"):
                        helper.join()      # its graphs into the master, then into the baseline worker's caches
                        baseline_cache.seed(bw.worker.tmp, options.cache_dir)
                with clock("baselines"):
                    reply = bw.call(protocol.Prepare(i, tuple(plan[i]["wanted"])), 600 + options.timeout)
                bw.prepared.add((i, plan[i]["wanted"]))
                bw.notes[i] = reply.notes if isinstance(reply, protocol.Prepared) else {}
        finally:
            if helper is not None and not helper.joined:
                helper.join()
    except HarnessFailed as e:
        return "load", f"harness: {e}"
    for i in wanted:
        plan[i]["notes"] = bw.notes.get(i, {})
        plan[i]["slowest"] = bw.slowest.get(j.configs[i].id)
    if cached:
        failed = sorted({n for i in todo for n in plan[i]["notes"].values() if "torch.compile failed" in n})
        if failed:                         # the seeded copy broke torch.compile: the node stops using it, and
            baseline_cache.disable(failed[0][:500], options.cache_dir)   # `judge` starts again unseeded
            bw.close()
            return CACHE_RETRY, (f"harness: torch.compile failed in a worker seeded from the node's baseline cache "
                                 f"({failed[0][:300]}); the cache is now off on this node")
        baseline_cache.harvest(bw.worker.tmp, options.cache_dir)   # no candidate code has ever run there
        if helped:
            precompile.mark(j.task, options)
    return None


def time_alone(j: Judgement, checker: Checker, plan: dict[int, dict],
               known_baselines: Recent | None) -> str | None:
    """Times the `wanted` baselines alone in the baseline worker, for each configuration whose slowest baseline that
    worker does not know yet (its first judgement of it): the rounds of the configuration's timing and the canary's
    length follow from it, and these `clean` times are a bound the interleaved times are taken with (each baseline
    counts at the faster of the two, `measure.time_all`). `known_baselines` (the evaluator's `Reuse`, which later
    candidates' speedups use) gets them until the interleaved times replace them. Returns the harness's failure, if
    any."""
    configs, options, clock, bw = j.configs, j.options, j.clock, j.baseline
    for i, p in bar(sorted(plan.items()), "timing torch alone"):
        if not p["wanted"] or p.get("slowest") is not None:
            continue
        cfg = configs[i]
        try:
            with clock("time"):
                t = timed.time_config(bw.worker, checker, cfg, i, clean_options(options), p["wanted"], kernel=False)
        except WorkerDied as e:
            bw.close()
            return f"the baseline worker died timing the torch baselines: {e.kind}: {e.detail}"
        if t.failure:
            return f"{cfg.id}: timing the torch baselines alone failed: {t.failure}"
        p["clean"] = Baselines.of(t, p["wanted"], p["notes"])
        p["slowest"] = bw.slowest[cfg.id] = p["clean"].slowest_ms
        if known_baselines is not None:
            known_baselines.put(cfg.id, p["clean"])
    return None


def clean_options(options: Options) -> Options:
    """The time-alone effort (`time_alone`): half the calls of the interleaved timing, at least 10."""
    return replace(options, reps=max(10, options.reps // 2))
