"""The README of an exported package: how to use it, and what was proven, where, with which numbers — per task the
judge's device and shape set, the domain the kernels run on, per size bucket the kernel or torch and the
interval that decided it, per configuration the op's judgement, the op's geomean against the best single
kernel's, and how calls outside it are sent to torch. Pure text from the bundles and the manifest."""
from __future__ import annotations

from typing import Any

from kevolve.export.bundle import Bundle


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
        ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def _domain(d: dict) -> str:
    parts = [f"{n} in [{lo}, {hi}]" for n, (lo, hi) in {**d.get("sizes", {}), **d.get("scalars", {})}.items()]
    return ", ".join(parts) + (f", at most {d['elements']} elements per tensor" if d.get("elements") else "")


def _task(b: Bundle, spec: dict, paired: str | None) -> list[str]:
    t, op, ev = b.task, b.op, b.evaluation
    lines = [f"## `{t.name}` ({t.direction})", "",
             f"Proven by kevolve's judge on **{ev.device or b.target}**, the `{ev.shapes}` shape set: correct on all "
             f"{len(ev.measurements)} configurations (sizes × initialisations × seeds; every output element within "
             f"atol {t.atol:g} + rtol {t.rtol:g} × |reference| of a float64 reference, inputs unchanged, no "
             f"caching between calls), the op judged as a whole — its {len(op['kernels'])} kernel(s) and the size "
             f"dispatch between them — with torch eager and torch.compile timed interleaved on the same inputs. "
             f"From `{b.origin}`" + (f" (promoted from the run `{b.record['run_dir']}`)" if b.record.get("run_dir")
                                     else "") + ".", "",
             f"Domain the kernels run on: {_domain(spec['domain'])} ({spec['domain'].get('source', '')}). Outside it, "
             f"torch.", ""]
    if paired:
        lines += [f"Gradients: `{paired}` (its kernels), through `register_autograd`.", ""]
    elif t.direction == "forward":
        lines += ["Gradients: no backward was exported with it; a call that needs gradients goes to torch.", ""]
    lines += [f"**The op: {_x(op.get('speedup'))}** over the faster torch baseline (geometric mean over the judged "
              f"sizes, 1.00x where torch runs), against **{_x(op.get('best_speedup'))}** for the best single kernel "
              "of the run.", "", "Per size bucket (a kernel runs only where the 95% interval of its speedup lies above "
              "1 and every size of the bucket is at least 0.98x):", ""]
    lines += _table(["bucket", "runs", "kernel speedup", "95% interval", "worst size", "why"],
                    [[r["bucket"], f"kernel `{r['kernel']}`" if r["kernel"] else "torch", _x(r["speedup"]),
                      f"{r['ci'][0]:.2f}-{r['ci'][1]:.2f}" if r.get("ci") else "-", _x(r.get("worst")), r["why"]]
                     for r in op["routes"]])
    bucket_of = {c: r for r in op["routes"] for c in r["configs"]}
    rows = []
    for m in ev.measurements:
        r = bucket_of.get(m.shape)
        if m.kernel is None or r is None:
            continue
        s = m.speedup("best")
        rows.append([m.shape, r["bucket"], "kernel" if r["kernel"] else "torch", _x(s if r["kernel"] else 1.0),
                     _x(s), f"{m.speedup_ci[0]:.2f}-{m.speedup_ci[1]:.2f}" if m.speedup_ci else "-",
                     f"{m.kernel.median * 1e3:.1f}", f"{m.best_torch * 1e3:.1f}" if m.best_torch else "-"])
    lines += ["", "Per configuration (the op's judgement; times per call in µs, "
              + ("device time, launch overhead removed)" if b.target == "cuda" else "wall time, caches evicted)") + ":",
              ""]
    lines += _table(["configuration", "bucket", "runs", "op", "kernel", "kernel 95%", "kernel µs", "torch µs"], rows)
    return lines + [""]


def text(name: str, bundles: list[Bundle], manifest: dict) -> str:
    tasks = [b.task.name for b in bundles]
    pair = next(iter(manifest.get("autograd", {}).values()), None)
    forward = next((b for b in bundles if b.task.direction == "forward"), None)
    fam = manifest["ops"][tasks[0]]["family"]
    module = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}.get(fam)
    target = bundles[0].target
    lines = [f"# {name}", "",
             "Kernels found by kevolve and proven correct by its judge, as torch ops: "
             + ", ".join(f"`{t}`" for t in tasks) + f" ({target}). One op per task "
             "(`torch.library.custom_op`, with a fake implementation so that `torch.compile(fullgraph=True)` "
             "traces through it" + (", and autograd pairing the forward with the backward kernels" if pair else "")
             + "); each size goes to the kernel proven fastest there, or to torch where none beat it.", "",
             "## Use", "", "```bash", "pip install FOLDER      # this folder: needs torch, ninja and a C++ compiler"
             + (" and nvcc" if target == "cuda" else ""), "```", "",
             "The kernels build on first import (torch's cpp_extension, ninja, the flags they were judged with: "
             f"`{' '.join(manifest['ops'][tasks[0]]['cflags'] or manifest['ops'][tasks[0]]['cuda_cflags'])}`), "
             "cached under `$KEVOLVE_OPS_BUILD`, else `$TORCH_EXTENSIONS_DIR`, else `~/.cache/torch_extensions`."
             + (" nvcc is torch's: `CUDA_HOME` (set it when the nvcc on PATH is a wrapper outside the toolkit)."
                if target == "cuda" else ""), "",
             "```python", "import torch", f"import {name}", ""]
    if module and forward is not None:
        lines += [f"{name}.replace(model)               # every torch.nn.{module} of the model now runs the op",
                  "model = torch.compile(model, fullgraph=True)   # traces through it",
                  f"norm = {name}.{module}(hidden)        # or build one: torch.nn.{module}'s arguments"]
    args = ", ".join([s.name for s in bundles[0].task.inputs] + [s.name for s in bundles[0].task.scalars])
    lines += [f"out = {name}.{tasks[0]}({args})   # the op itself, tensors in the task's shapes "
              f"({', '.join(f'{s.name}: [' + ', '.join(s.shape) + ']' for s in bundles[0].task.inputs)})",
              f"{name}.stats()                          # per op: kernel calls, calls sent to torch and why", "```",
              "", "## Where each call goes", "",
              "- sizes in a bucket where a kernel was confirmed faster than torch: the kernel;",
              "- sizes in a bucket where torch won, or that no judged size shares: torch (the task's baseline: what "
              "the kernels were timed against), without a warning;",
              f"- another dtype, device or layout (the kernels take contiguous {bundles[0].task.inputs[0].dtype} "
              f"tensors on {target}), other shapes, sizes or scalars outside the proven domain: torch, with a "
              f"`{name}.KevolveFallbackWarning` once per reason (none while torch.compile traces: compiled code "
              "falls back the same way);",
              "- `KEVOLVE_OPS=kernels` runs the kernels on every size of the domain (correct there; not always "
              "faster), `KEVOLVE_OPS=torch` sends every call to torch (to compare).", ""]
    for b in bundles:
        paired = pair["backward"] if pair and b.task.name in manifest["autograd"] else None
        lines += _task(b, manifest["ops"][b.task.name], paired)
    lines += ["Not proven: speed or correctness on another machine than the judge's (the build is the same source "
              "and flags, but -march=native follows the host), sizes outside the domain (they go to torch), and "
              "what the judge's own limits leave open (kevolve's docs/guarantees.md).", ""]
    return "\n".join(lines)
