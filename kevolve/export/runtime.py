"""The runtime of a package `python -m kevolve.export` writes: copied into it verbatim as `_runtime.py`, it needs torch
(and ninja, to build) and nothing of kevolve. It reads the package's `manifest.json` and, per task, builds the
op's one C-ABI source with torch's cpp_extension (ninja, the flags it was judged with, cached by content), and
registers one `torch.library.custom_op` with a fake (meta) implementation, so that `torch.compile(fullgraph=True)`
traces through it, and — where the package pairs a forward with its backward — `register_autograd`.

`Op.__call__` routes each call before the custom op: a call the kernels were proven on (target device, dtype,
strided contiguous tensors of the task's shapes, sizes and scalars inside the proven domain) in a size bucket where
a kernel was confirmed faster than torch goes to the kernel (`KEVOLVE_OPS=kernels`: in every bucket of the domain;
`KEVOLVE_OPS=torch`: none); a bucket where torch won goes to torch (the task's
own baseline, what the kernels were timed against), silently; anything else goes to torch with a
`KevolveFallbackWarning`, once per reason (never while torch.compile traces: compiled code falls back the same way,
without the warning). Without a paired backward, a call that needs gradients goes to torch as well.

Guarantees: the kernel only ever sees inputs of the proven kind and domain; every fallback computes what torch
computes; the build is keyed by the source, the flags and torch's version. Not guaranteed: speed outside the
judged sizes' buckets (those go to torch), nor that the user's host has the judge's CPU (the build is -march=native).
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
_CTYPES = {"float": ctypes.c_float, "double": ctypes.c_double, "int": ctypes.c_int64}
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "int32": torch.int32}
_ITEM_BYTES = {"float32": 4, "float64": 8, "int64": 8, "int32": 4}
_FUNCS = {"min": min, "max": max, "cdiv": lambda a, b: -(-a // b)}
MODE = os.environ.get("KEVOLVE_OPS", "auto")    # auto | kernels (every size of the domain) | torch (every call)


class KevolveFallbackWarning(UserWarning):
    """A call the exported kernels were not proven on went to torch."""


_warned: set = set()


def warn_once(key: str, text: str) -> None:
    if key in _warned or torch.compiler.is_compiling():
        return
    _warned.add(key)
    warnings.warn(text, KevolveFallbackWarning, stacklevel=4)


_EXPRS: dict = {}      # expression -> a function of the sizes (made when an op is loaded, never while tracing)


def expression(expr, names) -> None:
    """Makes `size_expr` ready for `expr`, a task's size expression (checked by kevolve when it exported it:
    integers, sizes, + - * // % **, min/max/cdiv)."""
    key = str(expr)
    if key not in _EXPRS:
        _EXPRS[key] = eval(f"lambda {', '.join(names)}: ({key})", {"__builtins__": {}, **_FUNCS})  # noqa: S307


def size_expr(expr, sizes: dict):
    """`expr` on `sizes` (a plain function call: torch.compile traces it)."""
    return _EXPRS[str(expr)](**sizes)


def build(spec: dict, package: str):
    """The op's library, built with torch's cpp_extension (ninja) unless already built for this source, these flags
    and this torch; returns its entry point with the task's C signature."""
    from torch.utils import cpp_extension
    source = HERE / spec["source"]
    flags = {k: list(spec.get(k, [])) for k in ("cflags", "cuda_cflags", "ldflags")}
    if spec["target"] == "cuda":              # the judge's arch (sm_90a: wgmma, TMA), else this GPU's
        arch = spec.get("arch")
        if not arch:
            major, minor = torch.cuda.get_device_capability()
            arch = f"{major}{minor}" + ("a" if major in (9, 10, 12) else "")
        flags["cuda_cflags"].append(f"-gencode=arch=compute_{arch},code=sm_{arch}")   # cpp_extension adds no other
    digest = hashlib.sha256(source.read_bytes() + json.dumps(flags).encode() + torch.__version__.encode())
    name = f"{package}_{spec['task']}_{digest.hexdigest()[:12]}"
    root = os.environ.get("KEVOLVE_OPS_BUILD") or os.environ.get("TORCH_EXTENSIONS_DIR") or \
        str(Path.home() / ".cache" / "torch_extensions")
    folder = Path(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    path = cpp_extension.load(name=name, sources=[str(source)], extra_cflags=flags["cflags"],
                              extra_cuda_cflags=flags["cuda_cflags"], extra_ldflags=flags["ldflags"],
                              build_directory=str(folder), is_python_module=False, verbose=False)
    fn = getattr(ctypes.CDLL(str(path)), spec["direction"])
    n = len(spec["inputs"]) + len(spec["outputs"])
    fn.argtypes = ([ctypes.c_void_p] * n + [ctypes.c_int64] * len(spec["sizes"])
                   + [_CTYPES[s["type"]] for s in spec["scalars"]] + [ctypes.c_void_p, ctypes.c_int64]
                   + ([ctypes.c_void_p] if spec["target"] == "cuda" else []))
    fn.restype = ctypes.c_int
    return fn


def reference(spec: dict):
    """The task's torch baseline (`baseline`, else `reference`): what torch runs where the kernels do not."""
    path = HERE / spec["reference"]
    module_spec = importlib.util.spec_from_file_location(f"_kevolve_ref_{spec['task']}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, "baseline", module.reference)


class Op:
    """One task's op: `op(*tensors, *scalars)` in the task's order and shapes, routed (see the module)."""

    def __init__(self, spec: dict, package: str):
        self.spec, self.package, self.name = spec, package, spec["task"]
        self.inputs, self.outputs, self.scalars = spec["inputs"], spec["outputs"], spec["scalars"]
        self.fn = build(spec, package)
        self.torch_fn = reference(spec)
        self.counts: dict[str, int] = {}
        for e in ([e for t in self.inputs + self.outputs for e in t["shape"]] + [spec["workspace"]]
                  + spec["domain"].get("where", [])):
            expression(e, spec["sizes"])
        self.backward: Op | None = None          # set by `pair`
        self.grads: dict = {}
        schema = ("(" + ", ".join([f"Tensor {t['name']}" for t in self.inputs]
                                  + [f"{'float' if s['type'] != 'int' else 'int'} {s['name']}" for s in self.scalars])
                  + ") -> " + ("Tensor" if len(self.outputs) == 1 else
                               "(" + ", ".join("Tensor" for _ in self.outputs) + ")"))
        self.custom = torch.library.custom_op(f"{package}::{self.name}", self._run, mutates_args=(), schema=schema)
        self.custom.register_fake(self._fake)

    # ---- the kernel
    def sizes(self, tensors) -> dict:
        sizes = {}
        for t, spec in zip(tensors, self.inputs):
            for dim, expr in zip(t.shape, spec["shape"]):
                if isinstance(expr, str) and expr.isidentifier():
                    sizes.setdefault(expr, dim)
        return sizes

    def _run(self, *args):
        n = len(self.inputs)
        tensors, values = args[:n], args[n:]
        sizes = self.sizes(tensors)
        device = tensors[0].device
        outs = [torch.empty([size_expr(e, sizes) for e in o["shape"]], dtype=_DTYPES[o["dtype"]], device=device)
                for o in self.outputs]
        work = torch.empty(int(size_expr(self.spec["workspace"], sizes)), dtype=torch.uint8, device=device)
        call = ([t.data_ptr() for t in tensors] + [o.data_ptr() for o in outs] + [int(sizes[s]) for s in
                self.spec["sizes"]] + [int(v) if s["type"] == "int" else float(v) for v, s in zip(values, self.scalars)]
                + [work.data_ptr() if work.numel() else None, work.numel()])
        if self.spec["target"] == "cuda":
            call.append(torch.cuda.current_stream(device).cuda_stream)
        rc = self.fn(*call)
        if rc != 0:
            raise RuntimeError(f"{self.package}.{self.name}: the kernel returned {rc} for sizes {sizes}")
        self.counts["kernel calls"] = self.counts.get("kernel calls", 0) + 1
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _fake(self, *args):
        n = len(self.inputs)
        sizes = self.sizes(args[:n])
        outs = [args[0].new_empty([size_expr(e, sizes) for e in o["shape"]], dtype=_DTYPES[o["dtype"]])
                for o in self.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    # ---- the routing
    def why_not(self, tensors, values) -> tuple[str, str] | None:
        """(key, reason) when this call must go to torch, None when a kernel takes it; key "bucket": by design."""
        target = self.spec["target"]
        for t, spec in zip(tensors, self.inputs):
            if not isinstance(t, torch.Tensor):
                return "type", f"{spec['name']} is not a tensor"
            if t.device.type != target:
                return "device", f"{spec['name']} is on {t.device}; the kernels run on {target}"
            if t.dtype != _DTYPES[spec["dtype"]]:
                return "dtype", f"{spec['name']} is {t.dtype}; the kernels take {spec['dtype']}"
            if t.layout != torch.strided or not t.is_contiguous():
                return "layout", f"{spec['name']} is not a contiguous strided tensor"
        for t in tensors:
            if t.device != tensors[0].device:
                return "device", "the tensors are on several devices"
        sizes = self.sizes(tensors)
        for t, spec in zip(tensors, self.inputs):
            if list(t.shape) != [size_expr(e, sizes) for e in spec["shape"]]:
                return "shape", f"{spec['name']} has shape {tuple(t.shape)}, not the task's {spec['shape']}"
        domain = self.spec["domain"]
        scalars = {s["name"]: v for s, v in zip(self.scalars, values)}
        for kind, got in (("sizes", sizes), ("scalars", scalars)):
            for name, (lo, hi) in domain.get(kind, {}).items():
                if not lo <= got[name] <= hi:
                    return "domain", f"{name}={got[name]} is outside the proven range [{lo}, {hi}]"
        for name, listed in domain.get("values", {}).items():
            if sizes[name] not in listed:
                return "domain", f"{name}={sizes[name]} is not one of the proven values {listed}"
        for cond in domain.get("where", []):
            if not size_expr(cond, sizes):
                return "domain", f"{','.join(f'{k}={v}' for k, v in sizes.items())} breaks the proven condition {cond}"
        nbytes = size_expr(self.spec["workspace"], sizes)        # the domain's budget holds the workspace too
        for o in self.inputs + self.outputs:                  # plain loops: torch.compile traces them
            elements = 1
            for e in o["shape"]:
                elements = elements * size_expr(e, sizes)
            if "elements" in domain and elements > domain["elements"]:
                return "domain", f"a tensor of {elements} elements is over the largest proven ({domain['elements']})"
            nbytes = nbytes + elements * _ITEM_BYTES[o.get("dtype", "float32")]
        if "max_bytes" in domain and nbytes > domain["max_bytes"]:
            return "domain", (f"its tensors and workspace take {nbytes} bytes, over the {domain['max_bytes']} proven "
                              f"on {target}")
        if MODE == "torch":
            return "bucket", "KEVOLVE_OPS=torch"
        index = []
        for name, bounds in self.spec["edges"].items():
            i = 0
            for e in bounds:
                i = i + 1 if sizes[name] >= e else i
            index.append(str(i))
        if MODE != "kernels" and self.spec["routes"].get(",".join(index), "torch") != "kernel":
            return "bucket", "torch was faster, or no kernel was confirmed faster, on these sizes"
        return None

    def __call__(self, *args):
        n = len(self.inputs)
        if len(args) != n + len(self.scalars):
            raise TypeError(f"{self.name} takes {[t['name'] for t in self.inputs] + [s['name'] for s in self.scalars]}")
        tensors, values = args[:n], args[n:]
        why = self.why_not(tensors, values)
        if why is None and self.backward is None and torch.is_grad_enabled():
            for t in tensors:
                if t.requires_grad:
                    why = "grad", "no backward kernel was exported with this op: gradients go through torch"
        if why is None:
            return getattr(getattr(torch.ops, self.package), self.name).default(*args)
        if why[0] != "bucket":
            warn_once(f"{self.name}:{why[0]}", f"{self.package}.{self.name}: sent to torch: {why[1]}")
        if not torch.compiler.is_compiling():
            self.counts[why[0]] = self.counts.get(why[0], 0) + 1
        sizes = self.sizes(tensors)
        return self.torch_fn(*tensors, **{k: v for k, v in sizes.items()},
                             **{s["name"]: v for s, v in zip(self.scalars, values)})

    # ---- autograd
    def pair(self, backward: "Op", grads: dict) -> None:
        """Gradients of this op by `backward` (`grads`: per backward input, the forward output whose gradient it
        is, or the forward input it takes; per backward output, the forward input it is the gradient of)."""
        self.backward, self.grads = backward, grads
        self.custom.register_autograd(self._backward, setup_context=self._setup)

    def _setup(self, ctx, inputs, output):
        n = len(self.inputs)
        ctx.save_for_backward(*inputs[:n])
        ctx.values = inputs[n:]

    def _backward(self, ctx, *grads):
        saved = {t["name"]: v for t, v in zip(self.inputs, ctx.saved_tensors)}
        of_output = {o["name"]: g for o, g in zip(self.outputs, grads)}
        args = []
        for t in self.backward.inputs:
            kind, name = self.grads["inputs"][t["name"]]
            args.append(of_output[name].contiguous() if kind == "grad" else saved[name])
        values = {s["name"]: v for s, v in zip(self.scalars, ctx.values)}
        got = self.backward(*args, *[values[s["name"]] for s in self.backward.scalars])
        got = got if isinstance(got, (tuple, list)) else (got,)
        by_input = {self.grads["outputs"][o["name"]]: g for o, g in zip(self.backward.outputs, got)}
        return tuple(by_input.get(t["name"]) for t in self.inputs) + (None,) * len(self.scalars)


def load(manifest: dict) -> dict[str, Op]:
    """Every op of the manifest, built and registered, backward pairs wired."""
    ops = {name: Op(spec, manifest["package"]) for name, spec in manifest["ops"].items()}
    for forward, pairing in manifest.get("autograd", {}).items():
        ops[forward].pair(ops[pairing["backward"]], pairing)
    return ops
