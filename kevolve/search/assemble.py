"""The assembled op: a run's result as one C-ABI library that dispatches each size bucket to its own kernel, and the
choice, per bucket, between that kernel and torch.

`choose(buckets, options, best)` picks the kernels: per judged bucket the fastest of its options — the search gives
the bucket's champion (`champion.PerBucket`: paired evidence), the fastest judged there, and the best kernel by its
final judgement, each with its speedup on the bucket — and the best kernel for sizes of no judged bucket: the
function a release check hooks (it returns the kernels chosen, nothing is built). `source(task, target, buckets,
choice)` writes one source that holds every chosen kernel in a namespace of its own (`kevolve_k0`, ...; its `extern
"C"` dropped, its includes outside the namespace, its macros undefined after it) and one `extern "C"` entry point
with the task's signature that computes the bucket of its sizes against the same boundaries as `Buckets.index` and
calls that bucket's kernel. The library is judged like any candidate (every configuration, baselines timed afresh),
and `decide(buckets, choice, evaluation)` reads that judgement: a bucket goes to its kernel only when the kernel is
confirmed faster than the faster torch baseline there — the interval of its speedup over the bucket lies above 1 —
and is at least `FLOOR`× torch on every configuration of the bucket; otherwise to torch. By construction the op is
then ≥ `FLOOR`× torch on every judged size (1× where torch runs).

Guarantees: the dispatch computes the bucket from the sizes alone (scalars and contents never choose a kernel);
every size reaches exactly one kernel in the library (the default where no bucket was judged), so the library is
correct wherever each kernel is. A bucket's interval is the joint one of its configurations' geometric mean, from
their own intervals (each a bootstrap over that configuration's paired samples): the normal approximation of
resampling each configuration apart, as `judge.evaluator.noise.ratio_ci` does — log-widths added in quadrature.
Pure: no Ray, no build. Not guaranteed: that every kernel survives being put in a namespace (a kernel that names its
own globals with `::`, or opens `namespace std`, fails to build; the op is then reported as not built and the best
kernel stands alone).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kevolve.messages import Candidate, OpRoute
from kevolve.search.buckets import Buckets
from kevolve.task.abi import c_prototype
from kevolve.task.expr import geomean

FLOOR = 0.98        # a kernel runs a bucket only if it is at least this fast against torch on each of its sizes


@dataclass(frozen=True)
class Choice:
    """The kernels of an op before it is judged: `kernels[i]` is `kevolve_k{i}`; `routes` maps each judged bucket
    to a kernel's index; `default` serves sizes of no judged bucket."""
    kernels: tuple[Candidate, ...]
    routes: tuple[tuple[str, int], ...]
    default: int = 0

    def kernel_of(self, bucket: str) -> Candidate:
        return self.kernels[dict(self.routes).get(bucket, self.default)]


def choose(buckets: Buckets, options: dict[str, list[tuple[Candidate, float]]], best: Candidate) -> Choice:
    """Per judged bucket, of its `options` (candidate, its speedup there), the fastest — the first among equals —
    and `best` where it has none; `best` is kernel 0 and the default."""
    kernels = [best]
    routes = []
    for bucket in buckets.judged():
        c = best
        if options.get(bucket):
            c = max(enumerate(options[bucket]), key=lambda o: (o[1][1], -o[0]))[1][0]
        ids = [k.id for k in kernels]
        if c.id not in ids:
            kernels.append(c)
            ids.append(c.id)
        routes.append((bucket, ids.index(c.id)))
    return Choice(tuple(kernels), tuple(routes), 0)


# ---------------------------------------------------------------- the source
_INCLUDE = re.compile(r"^\s*#\s*include\b")
_IF = re.compile(r"^\s*#\s*if(n?def)?\b")
_ENDIF = re.compile(r"^\s*#\s*endif\b")
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)")
_EXTERN_BLOCK = re.compile(r'extern\s*"C"\s*\{')
_EXTERN = re.compile(r'extern\s*"C"\s*')


def namespaced(source: str, name: str) -> tuple[list[str], str]:
    """(the includes at the top level of `source`, its text in `namespace name` with C linkage dropped and its
    macros undefined after it). An include under a conditional stays where it is, the namespace closed around it
    (both branches stay balanced)."""
    includes, body, depth, macros = [], [], 0, []
    for line in source.splitlines():
        if _INCLUDE.match(line) and depth == 0:
            includes.append(line.strip())
            continue
        if _INCLUDE.match(line):
            body += [f"}}  // namespace {name}", line, f"namespace {name} {{"]
            continue
        depth += 1 if _IF.match(line) else -1 if _ENDIF.match(line) else 0
        if m := _DEFINE.match(line):
            macros.append(m[1])
        body.append(_EXTERN.sub("", _EXTERN_BLOCK.sub("inline namespace kevolve_c {", line)))
    undef = "".join(f"#undef {m}\n" for m in dict.fromkeys(macros))
    return includes, f"namespace {name} {{\n" + "\n".join(body) + f"\n}}  // namespace {name}\n{undef}"


def source(task, target: str, buckets: Buckets, choice: Choice) -> str:
    """The op's one C-ABI source (see the module's docstring)."""
    includes: list[str] = ["#include <cstdint>"]
    parts = []
    for i, k in enumerate(choice.kernels):
        inc, text = namespaced(k.source, f"kevolve_k{i}")
        includes += inc
        parts.append(f"// ---- kernel {i}: candidate {k.id} ({k.operator})\n{text}")
    proto = c_prototype(task, target).rstrip(";")
    args = ([s.name for s in task.inputs] + [s.name for s in task.outputs] + list(task.sizes)
            + [s.name for s in task.scalars] + ["workspace", "workspace_bytes"] + (["stream"] if target == "cuda"
                                                                                  else []))
    call = ", ".join(args)
    lines = [f"// kevolve: the assembled op of task {task.name} ({target}): {len(choice.kernels)} kernel(s), one per "
             "size bucket; the bucket of the sizes picks the kernel.", *dict.fromkeys(includes), "", *parts,
             "static int kevolve_interval(int64_t v, const int64_t* edges, int n) {",
             "    int i = 0;", "    while (i < n && v >= edges[i]) ++i;", "    return i;", "}", "",
             f"{proto} {{"]
    for name, bounds in buckets.edges:
        if bounds:
            lines.append(f"    static const int64_t kevolve_edges_{name}[] = {{{', '.join(map(str, bounds))}}};")
            lines.append(f"    const int kevolve_i_{name} = kevolve_interval({name}, kevolve_edges_{name}, "
                         f"{len(bounds)});")
        else:
            lines.append(f"    const int kevolve_i_{name} = 0;")
    for bucket, k in choice.routes:
        index = buckets.index_of(bucket)
        cond = " && ".join(f"kevolve_i_{n} == {i}" for (n, _), i in zip(buckets.edges, index)) or "true"
        lines.append(f"    if ({cond}) return kevolve_k{k}::{task.direction}({call});   // {bucket}")
    lines += [f"    return kevolve_k{choice.default}::{task.direction}({call});   // sizes of no judged bucket",
              "}", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- kernel or torch, per bucket
def decide(buckets: Buckets, choice: Choice, evaluation) -> tuple[OpRoute, ...]:
    """Per judged bucket, from the op's judgement (`evaluation`, correct): its kernel when confirmed faster than
    the faster torch baseline there and ≥ `FLOOR`× on each configuration, else torch (see the module)."""
    of = buckets.of_shape
    per: dict[str, list] = {}
    for m in evaluation.measurements:
        if m.kernel is not None and m.shape in of and m.speedup("best"):
            per.setdefault(of[m.shape], []).append(m)
    routes = []
    for bucket in buckets.judged():
        ms, k = per.get(bucket, []), choice.kernel_of(bucket)
        speedups = [m.speedup("best") for m in ms]
        ci = bucket_interval(speedups, [m.speedup_ci for m in ms]) if ms else None
        speedup, worst = (geomean(speedups), min(speedups)) if ms else (None, None)
        worst_at = min(ms, key=lambda m: m.speedup("best")).shape if ms else ""
        if not ms:
            why = "torch: no configuration of the bucket was timed"
        elif ci is None or math.isnan(ci[0]):
            why = "torch: no interval (baselines not timed paired)"
        elif ci[0] <= 1.0:
            why = f"torch: the interval [{ci[0]:.2f}, {ci[1]:.2f}] does not lie above 1"
        elif worst < FLOOR:
            why = f"torch: {worst:.2f}x on {worst_at}, under {FLOOR}x"
        else:
            why = f"kernel: faster, [{ci[0]:.2f}, {ci[1]:.2f}]"
        routes.append(OpRoute(bucket=bucket, configs=tuple(buckets.configs(bucket)),
                              kernel=k.id if why.startswith("kernel") else None, library_kernel=k.id,
                              speedup=speedup, ci=ci, worst=worst, why=why))
    return tuple(routes)


Z95 = 1.959964


def bucket_interval(speedups: list[float], intervals: list) -> tuple[float, float] | None:
    """The 95% interval of the geometric mean of `speedups` from each one's 95% `intervals` (None without one of
    them; one configuration: its own): per configuration a standard error of log(speedup) of log(hi / lo) / (2 z),
    the mean's the root of their sum of squares over n, centred on the mean of the logs."""
    if not speedups or any(not ci or ci[0] <= 0 for ci in intervals):
        return None
    if len(speedups) == 1:                  # one configuration: its own bootstrap interval
        return tuple(intervals[0])
    n = len(speedups)
    centre = sum(math.log(s) for s in speedups) / n
    se = math.sqrt(sum((math.log(hi / lo) / (2 * Z95)) ** 2 for lo, hi in intervals)) / n
    return math.exp(centre - Z95 * se), math.exp(centre + Z95 * se)


def op_speedup(buckets: Buckets, routes: tuple[OpRoute, ...], evaluation) -> float | None:
    """The op's geometric mean over the timed configurations: its kernel's speedup where a kernel runs, 1 where
    torch does."""
    to_kernel = {r.bucket for r in routes if r.kernel is not None}
    of = buckets.of_shape
    values = [(m.speedup("best") if of.get(m.shape) in to_kernel else 1.0)
              for m in evaluation.measurements if m.kernel is not None and m.speedup("best")]
    g = geomean(values)
    return None if math.isnan(g) else g
