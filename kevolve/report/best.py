"""A task's best kernels, `tasks/<name>/best/`: what `python -m kevolve.tasks best RUN_DIR` writes from a finished
run, and what a search starts from with `search.seeds=all|best` (`kevolve.search.plan.seed_files`).

`promote(run_dir)` reads the run's store read-only and takes the summary's best: the kernel the run's `finish`
event names, confirmed by its final judgement (its last correct `confirm` event, baselines interleaved), whose
source the run wrote to `best.cu`/`best.cpp` (`search.finish.Finish.best_path`). It writes `best/<target>.<ext>`, those
bytes unchanged, and `best/<target>.md`: a YAML front matter of its numbers (read back by `numbers(path)`: task,
target, speedups and their interval, device, shapes, run, dates), then the command that produced the run, the
configuration it set beside the defaults, and the final judgement per configuration (kernel, eager and compile
times, speedups). A run whose assembled op (`kevolve.search.assembly`) was judged correct also gives `best/op/<target>.
<ext>` (the op's one source) and `best/op/<target>.json` (its record: buckets, routes, numbers, judgement; what
`python -m kevolve.export tasks/<task>/best` reads), and the .md a section on the op per size bucket.

Guarantees: nothing is written unless the run finished with a confirmed correct best (and nothing of the op unless
it was judged correct); an existing best of the
same target with a higher recorded speedup (or none recorded) is kept unless `force`, the message giving both;
the .md (and the op's .json) holds no secret — the config and the command pass `record.scrub` (values of keys that
name a secret, and of secret-named environment variables), and the whole text once more.
Not guaranteed: that two speedups compare (another device, another shape set: the refusal names both devices).
"""
from __future__ import annotations

import json
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kevolve.task.spec import BEST_FILES, Task, TaskError
from kevolve.task.load import load_task


class PromotionError(ValueError):
    """A run that cannot be promoted (unfinished, no confirmed correct best), or a better best already there."""


@dataclass(frozen=True)
class Promoted:
    kernel: Path
    notes: Path
    speedup: float | None
    replaced: float | None          # the speedup of the best it replaced (None: there was none)


# ---------------------------------------------------------------- reading a best
def numbers(md: Path) -> dict[str, Any]:
    """The front matter of a best's .md (`---` YAML `---`); {} when it has none that parses."""
    m = re.match(r"---\n(.*?)\n---\n", md.read_text() if md.is_file() else "", re.S)
    try:
        data = yaml.safe_load(m[1]) if m else None
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def recorded_speedup(task: Task, target: str) -> float | None:
    """The speedup a task's best/ kernel for `target` recorded; None when there is none or it says none."""
    paths = task.best_paths(target)
    value = numbers(paths[0].with_suffix(".md")).get("speedup") if paths else None
    return float(value) if isinstance(value, (int, float)) else None


# ---------------------------------------------------------------- promoting a run's best
def promote(run_dir: str | Path, force: bool = False, task: str | Path | None = None) -> Promoted:
    """Writes the run's confirmed best into its task's best/ (see the module's docstring); `task` (a name or a
    folder) overrides the task folder the run's config names."""
    from kevolve.judge.results import Evaluation
    from kevolve.record.store import DB_NAME, Store, StoreError
    run_dir = Path(run_dir).resolve()
    if not (run_dir / DB_NAME).is_file():
        raise PromotionError(f"{run_dir} is not a run directory (no {DB_NAME}): give the directory a search wrote "
                             f"(its summary's run_dir)")
    try:
        store = Store.open(run_dir, readonly=True)
    except StoreError as e:
        raise PromotionError(str(e)) from None
    with store:
        meta = store.meta()
        finish = [p for _, _, p in store.events("finish")]
        best = finish[-1].get("best") if finish else None
        if not finish:
            raise PromotionError(f"{run_dir}: the run has not finished (no finish event): let it end, or resume it "
                                 f"(resume={run_dir}), then promote its best")
        if not best:
            raise PromotionError(f"{run_dir}: the run found no correct kernel: nothing to promote")
        if not best.get("confirmed"):
            why = "; ".join(best.get("not_confirmed") or []) or "it was not judged again at the end"
            raise PromotionError(f"{run_dir}: the run's best {best.get('id')} was not confirmed by its final "
                                 f"judgement ({why[:300]}): promote a run whose best was")
        confirms = [p for _, _, p in store.events("confirm") if p.get("id") == best["id"] and p.get("correct")]
        releases = [p for _, _, p in store.events("release") if p.get("id") == best["id"] and p.get("passed")]
        record = store.get(best["id"])
        counts = store.counts()
        assembled = [p for _, _, p in store.events("assembled")]
    op = assembled[-1] if assembled and (assembled[-1].get("op") or {}).get("correct") else None
    if not confirms or not confirms[-1].get("evaluation"):
        raise PromotionError(f"{run_dir}: no correct final judgement of the best {best['id']} in the store")
    ev = Evaluation.from_json(confirms[-1]["evaluation"])
    t = _task(task, meta)
    target = ev.target
    source = _source_bytes(run_dir, target, record.candidate.source)
    folder = t.dir / "best"
    kernel = folder / BEST_FILES[target]
    old = recorded_speedup(t, target) if t.best_paths(target) else None
    if t.best_paths(target) and not force and (old is None or ev.speedup is None or old > _round(ev.speedup)):
        was = numbers(kernel.with_suffix(".md"))
        raise PromotionError(
            f"{kernel} is already a best with " + (f"speedup {old:.3f}x" if old is not None else "no recorded speedup")
            + f" (on {was.get('device', 'an unknown device')}); this run's is "
            + (f"{ev.speedup:.3f}x" if ev.speedup is not None else "unknown") + f" (on {ev.device or target}): "
            "kept. Pass --force to replace it")
    notes = notes_text(t, ev, record, meta, run_dir, counts, releases[-1] if releases else None) + \
        (op_notes(op) if op else "")
    folder.mkdir(exist_ok=True)
    kernel.write_bytes(source)
    kernel.with_suffix(".md").write_text(notes)
    if op is not None:
        (folder / "op").mkdir(exist_ok=True)
        op_file = run_dir / f"op{SUFFIX_OF[target]}"          # where the store has no source (older runs)
        (folder / "op" / f"{target}{SUFFIX_OF[target]}").write_text(op.get("source_text") or op_file.read_text())
        kept = {k: v for k, v in op.items() if k != "source_text"}
        from kevolve.record.scrub import scrub_text
        (folder / "op" / f"{target}.json").write_text(scrub_text(json.dumps({**kept, "run_dir": str(run_dir)},
                                                                            indent=1)) + "\n")
    return Promoted(kernel, kernel.with_suffix(".md"), ev.speedup, old)


def _task(task: str | Path | None, meta: dict) -> Task:
    """The task folder: the one given, else the one the run's config names, else its name among tasks/."""
    name = str(meta.get("task") or "")
    if task is not None:
        t = load_task(task)
    else:
        configured = ((meta.get("config") or {}).get("task") or {}).get("name")
        try:
            t = load_task(configured or name)
        except TaskError:                 # a folder of another machine: the task of that name here
            t = load_task(name)
    if name and t.name != name:
        raise PromotionError(f"task {t.name} ({t.dir}) is not the run's task {name!r}: pass --task with its folder")
    return t


def _source_bytes(run_dir: Path, target: str, source: str) -> bytes:
    """The best's file the run wrote (`best.cu`/`best.cpp`), byte for byte, checked against the store's source."""
    from kevolve.judge.build import SUFFIX
    path = run_dir / f"best{SUFFIX[target]}"
    if path.is_file():
        raw = path.read_bytes()
        if raw.decode("utf-8", "replace") != source:
            raise PromotionError(f"{path} is not the source of the run's best in its store (written by another "
                                 f"run?): nothing promoted")
        return raw
    return source.encode()


# ---------------------------------------------------------------- the .md
def notes_text(task: Task, ev, record, meta: dict, run_dir: Path, counts: dict[str, int],
               released: dict | None = None) -> str:
    """The best's .md: front matter (its numbers, the domain it was proven on: `released`, the run's release
    check), the command, the configuration, the per-configuration table."""
    from kevolve.record.scrub import scrub, scrub_text
    config = scrub(meta.get("config") or {})
    command = [str(a) for a in scrub(meta.get("command") or _hydra_overrides(run_dir) or [])]
    changed = overrides(config)
    if not any(o.startswith("task.name=") for o in changed):     # the default task, named all the same
        changed.insert(0, f"task.name={task.name}")
    ci = list(ev.speedup_ci) if ev.speedup_ci else None
    front = {"task": task.name, "target": ev.target, "kernel": BEST_FILES[ev.target],
             "speedup": _round(ev.speedup), "speedup_ci": [_round(x) for x in ci] if ci else None,
             "speedup_eager": _round(ev.speedup_eager), "speedup_compile": _round(ev.speedup_compile),
             "floor_fraction": _round(ev.floor_fraction), "device": ev.device or ev.target, "shapes": ev.shapes,
             "configurations": len(ev.measurements), "candidate": record.candidate.id,
             "operator": record.candidate.operator, "run_dir": str(run_dir),
             "run_started": _date(meta.get("started")), "promoted": _date(time.time()),
             "kevolve": meta.get("version"),
             "proven_on": (f"{released['checked']} configurations swept over the domain: {released['proven']}"
                           if released else "the shape set only (no release check recorded)")}
    lines = ["---", yaml.safe_dump(front, sort_keys=False, allow_unicode=True).strip(), "---",
             f"# {task.name}: the best {ev.target} kernel so far", "",
             f"`{BEST_FILES[ev.target]}`: {_x(ev.speedup)} over the faster torch baseline, the geometric mean over "
             f"{len(ev.measurements)} configurations of the `{ev.shapes}` set"
             + (f" (95% interval {ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
             + f"; over eager {_x(ev.speedup_eager)}, over torch.compile {_x(ev.speedup_compile)}"
             + (f", {_pct(ev.floor_fraction)} of the memory floor" if ev.floor_fraction else "")
             + f". On {ev.device or ev.target}, from the run's final judgement (baselines timed afresh, interleaved).",
             "", ("Correct on the task's domain: " + f"{released['checked']} configurations swept over it before the "
                  f"run named it ({released['proven']}), besides the configurations every judgement drew from it."
                  if released else "Checked on the shape set's configurations (the run recorded no release check)."),
             "", "## How it was found", "",
             f"Run `{run_dir}`, started {_date(meta.get('started'))}; candidate `{record.candidate.id}` "
             f"({record.candidate.operator}, generation {record.candidate.generation}) of "
             f"{sum(counts.values())} ({counts.get('evaluated', 0)} judged).", ""]
    if command:
        lines += ["The command:", "", "```bash", "python -m kevolve " + " ".join(shlex.quote(a) for a in command),
                  "```", ""]
    else:
        lines += ["The run recorded no command line (it was not started by `python -m kevolve`).", ""]
    lines += ["Its configuration beside the defaults (from the run's store; `python -m kevolve` with these "
              "overrides runs it again):", "", "```bash",
              "python -m kevolve " + " ".join(shlex.quote(o) for o in changed) if changed else "python -m kevolve",
              "```", "", "## Per configuration", "", *_table(ev), "",
              "Times per call in µs: medians (p10-p90 of the kernel's calls); "
              + ("device time, launch overhead removed (CUDA graph replay, L2 flushed)." if ev.target == "cuda"
                 else "wall time, its buffers evicted from the caches first.") + " `vs best`: over the faster torch "
                                                                                 "baseline.", ""]
    return scrub_text("\n".join(lines))


def op_notes(op: dict) -> str:
    """The .md's section on the run's assembled op: per size bucket, what runs it and why."""
    o = op["op"]
    rows = [[r["bucket"], f"`{r['kernel']}`" if r["kernel"] else "torch", _x(r["speedup"]),
             f"{r['ci'][0]:.2f}-{r['ci'][1]:.2f}" if r.get("ci") else "-", _x(r.get("worst")), r["why"]]
            for r in o["routes"]]
    header = ["bucket", "runs", "kernel vs best torch", "95% interval", "worst size", "why"]
    table = ["| " + " | ".join(r) + " |" for r in [header, ["---"] * len(header), *rows]]
    return "\n".join(["", "## The assembled op", "",
                      f"`op/{op['target']}{SUFFIX_OF[op['target']]}` (its record: `op/{op['target']}.json`): the "
                      f"run's result as one op, judged as a whole on {op.get('device') or op['target']} (baselines "
                      f"interleaved): each size bucket runs its kernel where it was confirmed faster than the faster "
                      f"torch baseline, torch elsewhere. Its geomean: {_x(o.get('speedup'))} over the faster torch "
                      f"baseline (1.00x where torch runs), against {_x(o.get('best_speedup'))} for the best single "
                      "kernel. `python -m kevolve.export` makes a torch package of it.", "", *table, ""])


SUFFIX_OF = {"cpu": ".cpp", "cuda": ".cu"}


def overrides(config: dict) -> list[str]:
    """`key=value` for every field of a run's config that differs from what `python -m kevolve` composes by default
    (conf/config.yaml and its groups' defaults), in the Hydra override syntax; the run's own directory left out."""
    defaults = _defaults()
    out: list[str] = []

    def walk(got: Any, default: Any, key: str) -> None:
        if isinstance(got, dict) and isinstance(default, dict):
            for k in got:
                walk(got[k], default.get(k, _MISSING), f"{key}.{k}" if key else str(k))
        elif got != default:
            out.append(f"{'+' if default is _MISSING else ''}{key}={_value(got)}")
    walk(config, defaults, "")
    return [o for o in out if o.partition("=")[0].lstrip("+") not in RUN_SPECIFIC]


RUN_SPECIFIC = ("run_dir", "resume")        # where that run wrote: a new run writes its own directory


_MISSING = object()


def _defaults() -> dict:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from kevolve import ROOT
    from kevolve.config import Config, from_hydra
    if GlobalHydra.instance().is_initialized():          # inside a Hydra app: the schema's defaults
        return OmegaConf.to_container(OmegaConf.structured(Config))
    from kevolve.config import hydra as hydra_setup
    hydra_setup.install()                   # the schema conf/config.yaml starts from (else Hydra cannot compose it)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config")
    return OmegaConf.to_container(OmegaConf.structured(from_hydra(cfg)))


def _value(v: Any) -> str:
    """A value as a Hydra override writes it."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_value(x)}" for k, x in v.items()) + "}"
    s = str(v)
    return s if re.fullmatch(r"[\w./@:+-]+", s) and s not in ("null", "true", "false") else json.dumps(s)


def _hydra_overrides(run_dir: Path) -> list[str]:
    """The overrides Hydra recorded in the run's directory (`.hydra/overrides.yaml`), if it wrote there."""
    path = run_dir / ".hydra" / "overrides.yaml"
    try:
        got = yaml.safe_load(path.read_text()) if path.is_file() else None
    except yaml.YAMLError:
        return []
    from kevolve.record.scrub import redact_arg
    return [redact_arg(str(a)) for a in got] if isinstance(got, list) else []


def _table(ev) -> list[str]:
    header = ["configuration", "kernel µs", "eager µs", "compile µs", "vs eager", "vs compile", "vs best",
              "of floor", "max err/tol"]
    rows = []
    for m in ev.measurements:
        if m.kernel is None:
            continue                      # seeds beyond the first are checked, not timed
        k = m.kernel
        rows.append([m.config.rsplit("/s", 1)[0] + (" (held out)" if m.heldout else ""),
                     f"{_us(k.median)} ({_us(k.p10)}-{_us(k.p90)})", _us(m.eager and m.eager.median),
                     _us(m.compile and m.compile.median), _x(m.speedup("eager")), _x(m.speedup("compile")),
                     _x(m.speedup("best")), _pct(m.floor_fraction),
                     f"{m.max_rel_err:.3f}"])
    rows.append(["geomean", "", "", "", _x(ev.speedup_eager), _x(ev.speedup_compile), _x(ev.speedup),
                 _pct(ev.floor_fraction), ""])
    return ["| " + " | ".join(r) + " |" for r in [header, ["---"] * len(header), *rows]]


def _us(ms: float | None) -> str:
    return "-" if ms is None else f"{ms * 1e3:.1f}"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def _date(t: float | None) -> str | None:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t else None
