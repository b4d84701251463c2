"""How the torch ABI calls a kernel: a task's `torch_abi` declaration (robust-kbench's calling convention).

robust-kbench calls a compiled extension as its task's Python calls `fn`: `forward` with the arguments
`Model.forward` passes to `forward_fn`, `backward` with those `AutogradFunction.backward` passes to
`backward_fn`. Tensors come in their natural shapes (LayerNorm's x as [B, 64, 256, 256], not [B, N]), scalars
as Python numbers, derived values as Python values (LayerNorm's `normalized_shape`, a tuple of ints), a
scalar loss's upstream gradient as a 0-dim tensor. A task's `torch_abi` block in task.yaml says all of it:

    torch_abi:
      robust_kbench: layernorm                 # the robust-kbench task it follows (experiments/rkb_highlighted.py)
      args: [grad_out, x, weight, bias, eps, normalized_shape]
      dims: {normalized_shape: [N]}            # named tuples of size expressions: the default for every configuration
      views: {grad_out: [B, "*normalized_shape"], x: [B, "*normalized_shape"], weight: ["*normalized_shape"], ...}
      returns: [grad_x, grad_weight, grad_bias]   # optional: the order of the returned tensors (default: outputs)

and a configuration may carry its own value of a dims tuple (`{B: 16, N: 4194304, normalized_shape: [64, 256,
256]}`), so two configurations with the same flattened sizes keep robust-kbench's distinct shapes.

An argument is the name of an input (the tensor, in its view), a scalar (a Python float, or int for `int`), a
dims tuple (a tuple of ints) or a size (an int); or `{size: EXPR}` (an int), `{value: V}` (a literal: null, a
number, a bool), `{tuple: [ARG, ...]}` (a tuple, e.g. `[x]` for a backward that takes `ctx.saved_tensors`) or
`{arg: ARG, when: COND}` (ARG where the size condition COND holds, else None: resnet_block's projection, which
robust-kbench passes only when the shortcut needs one).
A view lists size expressions and `*NAME` (a dims tuple spliced in); `[]` is a 0-dim tensor. An output's view
is the shape the kernel must return (the task's own shape is accepted as well); results are reshaped back.

Guarantees: a declaration that loads (`check`) resolves on every configuration of its task — every name is
known, every view holds exactly its tensor's elements. Not guaranteed: that it matches robust-kbench's func
files (tests/task/test_torch_call.py calls robust-kbench's semantics through it), nor that a kernel accepts
the arguments (pybind11 says so on the first call).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kevolve.task.expr import TaskError, eval_condition, eval_expr

KEYS = ("robust_kbench", "args", "dims", "views", "returns")


@dataclass(frozen=True)
class Arg:
    """One argument: `kind` is input | scalar | dims | expr (a size expression) | value | tuple | when; `ref` the
    name, the expression, the literal, (for a tuple) the member Args, or (for when) (condition, Arg)."""
    kind: str
    ref: Any


@dataclass(frozen=True)
class TorchCall:
    args: tuple[Arg, ...]
    dims: tuple[tuple[str, tuple[str, ...]], ...]       # name -> default size expressions
    views: tuple[tuple[str, tuple[str, ...]], ...]      # tensor -> size expressions and "*dims"
    returns: tuple[str, ...]                            # output names in the order the kernel returns them
    robust_kbench: str | None = None

    def dim_values(self, sizes: dict[str, int], given: dict[str, tuple[int, ...]] | None = None) -> dict:
        """Each dims tuple on one configuration: its own value where it gives one, else the default."""
        given = given or {}
        return {n: tuple(given[n]) if n in given else tuple(eval_expr(e, sizes) for e in exprs)
                for n, exprs in self.dims}

    def view(self, name: str, sizes: dict[str, int], dims: dict) -> tuple[int, ...] | None:
        """The shape robust-kbench gives tensor `name` (None: no view declared, the task's shape)."""
        entries = dict(self.views).get(name)
        if entries is None:
            return None
        shape: list[int] = []
        for e in entries:
            shape += dims[e[1:]] if str(e).startswith("*") else [eval_expr(e, sizes)]
        return tuple(shape)

    def arguments(self, inputs: dict, sizes: dict[str, int], scalars: dict, dims: dict) -> list:
        """The call's positional arguments, in order: `inputs` the harness's tensors (viewed here), `scalars`
        the Python values, `dims` from `dim_values`."""
        def one(a: Arg):
            if a.kind == "input":
                shape = self.view(a.ref, sizes, dims)
                return inputs[a.ref] if shape is None else inputs[a.ref].view(shape)
            if a.kind == "scalar":
                return scalars[a.ref]
            if a.kind == "dims":
                return tuple(dims[a.ref])
            if a.kind == "expr":
                return eval_expr(a.ref, sizes)
            if a.kind == "tuple":
                return tuple(one(m) for m in a.ref)
            if a.kind == "when":
                cond, inner = a.ref
                return one(inner) if eval_condition(cond, sizes) else None
            return a.ref
        return [one(a) for a in self.args]


def parse(raw: dict, inputs: list[str], outputs: list[str], scalars: list[str], sizes: list[str]) -> TorchCall:
    """The `torch_abi` block of a task.yaml, given the task's names."""
    if not isinstance(raw, dict) or set(raw) - set(KEYS) or "args" not in raw:
        raise TaskError(f"torch_abi must be a mapping with `args` and optionally {list(KEYS[2:])} and "
                               f"`robust_kbench` (got {sorted(raw) if isinstance(raw, dict) else raw!r})")
    dims = {str(n): tuple(str(e) for e in _list(v, f"torch_abi.dims.{n}")) for n, v in (raw.get("dims") or {}).items()}
    names = {"input": inputs, "scalar": scalars, "dims": list(dims), "expr": sizes}
    seen = [n for group in names.values() for n in group] + outputs
    clash = sorted({n for n in seen if seen.count(n) > 1})
    if clash:
        raise TaskError(f"torch_abi: {clash} name more than one thing (inputs, outputs, scalars, dims, sizes)")

    def arg(a, where: str) -> Arg:
        if isinstance(a, str):
            for kind, group in names.items():
                if a in group:
                    return Arg(kind, a)
            raise TaskError(f"{where}: {a!r} is no input, scalar, dims tuple or size (inputs {inputs}, "
                            f"scalars {scalars}, dims {list(dims)}, sizes {sizes})")
        if isinstance(a, dict) and set(a) == {"arg", "when"}:
            return Arg("when", (str(a["when"]), arg(a["arg"], f"{where}.arg")))
        if isinstance(a, dict) and len(a) == 1:
            (k, v), = a.items()
            if k == "size":
                return Arg("expr", str(v))
            if k == "value" and (v is None or isinstance(v, (bool, int, float))):
                return Arg("value", v)
            if k == "tuple":
                return Arg("tuple", tuple(arg(m, f"{where}.tuple") for m in _list(v, where)))
        raise TaskError(f"{where}: {a!r} is not a name, {{size: EXPR}}, {{value: null | number | bool}}, "
                        f"{{tuple: [...]}} or {{arg: ARG, when: COND}}")

    args = tuple(arg(a, f"torch_abi.args[{i}]") for i, a in enumerate(_list(raw["args"], "torch_abi.args")))
    views = {}
    for name, entries in (raw.get("views") or {}).items():
        if name not in inputs and name not in outputs:
            raise TaskError(f"torch_abi.views: {name!r} is no input or output ({inputs + outputs})")
        entries = tuple(str(e) for e in _list(entries, f"torch_abi.views.{name}"))
        for e in entries:
            if e.startswith("*") and e[1:] not in dims:
                raise TaskError(f"torch_abi.views.{name}: {e!r} splices no declared dims tuple ({list(dims)})")
        views[name] = entries
    returns = tuple(_list(raw.get("returns", outputs), "torch_abi.returns"))
    if sorted(returns) != sorted(outputs):
        raise TaskError(f"torch_abi.returns must list every output once ({outputs}), not {list(returns)}")
    return TorchCall(args, tuple(dims.items()), tuple(views.items()), returns, raw.get("robust_kbench"))


def check(call: TorchCall, task) -> None:
    """Every view of every configuration holds exactly its tensor's elements, and every argument evaluates."""
    specs = {s.name: s for s in task.inputs + task.outputs}
    for set_name, configs in task.shape_sets.items():
        for c in configs:
            sizes = c.size_dict
            dims = call.dim_values(sizes, dict(c.dims))
            for name, d in dims.items():
                if any(not isinstance(v, int) or v < 0 for v in d):
                    raise TaskError(f"shape set {set_name}, {c.shape_id}: dims {name} = {list(d)} "
                                    f"must be non-negative integers")
            for name in [n for n in specs if n in dict(call.views)]:
                shape = call.view(name, sizes, dims)
                want = task.shape(specs[name], sizes)
                if math.prod(shape) != math.prod(want):
                    raise TaskError(f"shape set {set_name}, {c.shape_id}: the view of {name} is {list(shape)} "
                                    f"({math.prod(shape)} elements) but {name} is {list(want)} ({math.prod(want)}); "
                                    f"fix torch_abi.views.{name} or the configuration's dims")
            for e in _exprs(call.args):
                eval_expr(e, sizes)
            for cond in _conditions(call.args):
                eval_condition(cond, sizes)


def _exprs(args: tuple[Arg, ...]):
    """Every `{size: EXPR}` among the arguments, tuples included."""
    for a in args:
        if a.kind == "expr":
            yield a.ref
        elif a.kind == "tuple":
            yield from _exprs(a.ref)


def _conditions(args: tuple[Arg, ...]):
    """Every `when` condition among the arguments, tuples included."""
    for a in args:
        if a.kind == "when":
            yield a.ref[0]
            yield from _conditions((a.ref[1],))
        elif a.kind == "tuple":
            yield from _conditions(a.ref)


def _list(v, where: str) -> list:
    if not isinstance(v, list):
        raise TaskError(f"{where} must be a list, not {v!r}")
    return v
