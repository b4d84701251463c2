"""The operations the naive writer covers (kevolve/task/naive.py): each core ATen operation of a traced reference
as index arithmetic (views) or as a loop nest kept in double (`Lowering.call`).

Guarantees: an operation not in these tables raises `NaiveError` naming it; every loop reads only values written
before it (the graph's order); reductions start from the identity of their operation (max from -inf, so NaN
propagates as torch's does: `kv_max`).
"""
from __future__ import annotations

import operator

from kevolve.task.naive_ir import (Loop, Lowered, NaiveError, Sizes, Val, aligned, broadcast, contiguous, decompose,
                                   numel)

UNARY = {"neg": "(-{0})", "exp": "exp({0})", "exp2": "exp2({0})", "expm1": "expm1({0})", "log": "log({0})",
         "log2": "log2({0})", "log1p": "log1p({0})", "sqrt": "sqrt({0})", "rsqrt": "(1.0 / sqrt({0}))",
         "sigmoid": "(1.0 / (1.0 + exp(-({0}))))", "tanh": "tanh({0})", "relu": "({0} < 0.0 ? 0.0 : {0})",
         "abs": "fabs({0})", "reciprocal": "(1.0 / {0})", "erf": "erf({0})", "sin": "sin({0})", "cos": "cos({0})",
         "floor": "floor({0})", "ceil": "ceil({0})", "round": "nearbyint({0})", "trunc": "trunc({0})",
         "sign": "(double)(({0} > 0.0) - ({0} < 0.0))", "silu": "({0} / (1.0 + exp(-({0}))))",
         "logical_not": "(double)({0} == 0.0)", "clone": "{0}", "alias": "{0}", "_to_copy": "{0}",
         "lift_fresh_copy": "{0}", "detach": "{0}"}
BINARY = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
          "pow": "pow({0}, {1})", "maximum": "kv_max({0}, {1})", "minimum": "kv_min({0}, {1})",
          "eq": "(double)({0} == {1})", "ne": "(double)({0} != {1})", "lt": "(double)({0} < {1})",
          "le": "(double)({0} <= {1})", "gt": "(double)({0} > {1})", "ge": "(double)({0} >= {1})",
          "logical_and": "(double)({0} != 0.0 && {1} != 0.0)", "logical_or": "(double)({0} != 0.0 || {1} != 0.0)",
          "rsub": "({1} - {0})", "atan2": "atan2({0}, {1})", "fmod": "fmod({0}, {1})"}
REDUCE = {"sum": ("0.0", "acc + ({0})"), "amax": ("-INFINITY", "kv_max(acc, {0})"),
          "amin": ("INFINITY", "kv_min(acc, {0})"), "prod": ("1.0", "acc * ({0})")}
VIEWS = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand", "permute", "transpose", "t",
         "select", "slice", "clone", "alias", "_to_copy", "lift_fresh_copy", "detach", "contiguous"}


def const(expr: str) -> Val:
    return Val((), lambda idx: expr)


class Lowering:
    def __init__(self, read: Sizes, scalars: dict[str, float]):
        self.read, self.scalars, self.env, self.out = read, scalars, {}, Lowered()

    # ------------------------------------------------------------------ values
    def value(self, arg):
        """A node's value; anything else as it is (dims, shapes, numbers: `val` makes a number a value)."""
        import torch.fx
        return self.env[arg] if isinstance(arg, torch.fx.Node) else arg

    def val(self, arg) -> Val:
        if isinstance(arg, Val):
            return arg
        if isinstance(arg, bool):
            return const("1.0" if arg else "0.0")
        if isinstance(arg, (int, float)):
            return const(self.read.number(arg, self.scalars))
        raise NaiveError(f"{arg!r} where a tensor or a number was expected")

    def constant(self, t) -> Val:
        if t.numel() != 1:
            raise NaiveError("the reference holds a tensor constant of more than one element")
        return const(self.read.number(float(t.item()), self.scalars))

    def temp(self, shape: tuple[str, ...], body, inner: str = "1") -> Val:
        name = f"t{len(self.out.temps)}"
        self.out.temps.append((name, numel(shape)))
        self.out.loops.append(Loop(name, shape, body, inner=inner))
        return Val(shape, contiguous(name, shape, ""), flat=name)

    def write(self, name: str, v: Val) -> None:
        def body(i: str, idx: list[str]) -> str:
            return f"{name}[{i}] = (float)({v.load(idx)});"
        self.out.loops.append(Loop(name, v.shape, body, cast="float"))

    def pointwise(self, template: str, *vals) -> Val:
        vals = tuple(self.val(v) for v in vals)
        shape = broadcast([v.shape for v in vals])

        def body(i: str, idx: list[str]) -> str:
            return f"{{dest}}[{i}] = {template.format(*(aligned(v, shape, idx) for v in vals))};"
        return self._temp_body(shape, body)

    def _temp_body(self, shape, body, inner: str = "1") -> Val:
        name = f"t{len(self.out.temps)}"
        return self.temp(shape, lambda i, idx: body(i, idx).replace("{dest}", name), inner)

    def reduce(self, op: str, v: Val, dims, keepdim: bool, post: str = "{acc}") -> Val:
        """`op` over `dims` of `v` (all of them when empty or None); `post`: the result of the accumulator (mean's
        division)."""
        n = len(v.shape)
        dims = sorted({d % n for d in dims}) if dims else list(range(n))
        kept = [k for k in range(n) if k not in dims]
        out_shape = tuple("1" if k in dims else v.shape[k] for k in range(n)) if keepdim else \
            tuple(v.shape[k] for k in kept)
        red_shape = tuple(v.shape[k] for k in dims)
        start, step = REDUCE[op]

        def body(i: str, idx: list[str]) -> str:
            out_idx = [idx[k] for k in kept] if keepdim else idx       # the result's index over the kept dims
            rsplit, red_idx = decompose("r", red_shape, "j")
            full, it_o, it_r = [], iter(out_idx), iter(red_idx)
            for k in range(n):
                full.append(next(it_r) if k in dims else next(it_o))
            return (f"double acc = {start}; for (int64_t r = 0; r < {numel(red_shape)}; ++r) {{ {rsplit} "
                    f"acc = {step.format(v.load(full))}; }} {{dest}}[{i}] = {post.format(acc='acc')};")
        return self._temp_body(out_shape, body, numel(red_shape))

    def count(self, v: Val, dims) -> str:
        n = len(v.shape)
        dims = sorted({d % n for d in dims}) if dims else list(range(n))
        return f"(double)({numel(tuple(v.shape[k] for k in dims))})"

    def matmul(self, a: Val, b: Val, batch: bool = False) -> Val:
        lead = a.shape[:1] if batch else ()
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        shape = (*lead, m, n)

        def body(i: str, idx: list[str]) -> str:
            bi = idx[:1] if batch else []
            return (f"double acc = 0.0; for (int64_t k = 0; k < ({k}); ++k) acc += "
                    f"{a.load([*bi, idx[-2], 'k'])} * {b.load([*bi, 'k', idx[-1]])}; {{dest}}[{i}] = acc;")
        return self._temp_body(shape, body, f"({k})")

    # ------------------------------------------------------------------ views
    def materialized(self, v: Val) -> Val:
        return v if v.flat else self.pointwise("{0}", v)

    def reshape(self, v: Val, dims) -> Val:
        v = self.materialized(v)
        total = numel(v.shape)
        shape = [self.read.expr(d) if d != -1 else None for d in dims]
        if None in shape:
            known = numel(tuple(d for d in shape if d is not None))
            shape = [d if d is not None else f"(({total}) / ({known}))" for d in shape]
        return Val(tuple(shape), contiguous(v.flat, tuple(shape)), flat=v.flat)

    def permute(self, v: Val, perm) -> Val:
        perm = [p % len(v.shape) for p in perm]

        def load(idx):
            old = [None] * len(perm)
            for k, p in enumerate(perm):
                old[p] = idx[k]
            return v.load(old)
        return Val(tuple(v.shape[p] for p in perm), load)

    def view_op(self, name: str, v: Val, args) -> Val:
        n = len(v.shape)
        if name in ("view", "_unsafe_view", "reshape"):
            return self.reshape(v, args[0])
        if name == "unsqueeze":
            d = args[0] % (n + 1)
            return Val(v.shape[:d] + ("1",) + v.shape[d:], lambda idx: v.load(idx[:d] + idx[d + 1:]))
        if name == "squeeze":
            dims = args[0] if args else [k for k in range(n) if v.shape[k] == "1"]
            dims = [d % n for d in ([dims] if isinstance(dims, int) else dims) if v.shape[d % n] == "1"]
            keep = [k for k in range(n) if k not in dims]

            def load(idx):
                full, it = [], iter(idx)
                for k in range(n):
                    full.append("0" if k in dims else next(it))
                return v.load(full)
            return Val(tuple(v.shape[k] for k in keep), load)
        if name == "expand":
            shape = tuple(self.read.expr(d) if d != -1 else v.shape[k - (len(args[0]) - n)]
                          for k, d in enumerate(args[0]))
            return Val(shape, lambda idx: aligned(v, shape, idx))
        if name == "permute":
            return self.permute(v, args[0])
        if name in ("transpose", "t"):
            a, b = (args[0] % n, args[1] % n) if args else (0, 1)
            perm = list(range(n))
            perm[a], perm[b] = perm[b], perm[a]
            return self.permute(v, perm)
        if name == "select":
            d, at = args[0] % n, self.read.expr(args[1]) if args[1] >= 0 else f"({v.shape[args[0] % n]}) - {-args[1]}"
            return Val(v.shape[:d] + v.shape[d + 1:], lambda idx: v.load(idx[:d] + [at] + idx[d:]))
        if name == "slice":
            d = args[0] % n
            start, end, step = (list(args[1:]) + [None, None, 1])[:3]
            start = 0 if start is None else start
            if start < 0 or step != 1 or (end is not None and end < 0):
                raise NaiveError("slice with a negative bound or a step")
            size = v.shape[d] if end is None or end >= 2 ** 62 else f"min(({v.shape[d]}), {self.read.expr(end)})"
            size = f"(({size}) - {self.read.expr(start)})"
            s0 = self.read.expr(start)
            return Val(v.shape[:d] + (size,) + v.shape[d + 1:],
                       lambda idx: v.load(idx[:d] + [f"({s0}) + {idx[d]}"] + idx[d + 1:]))
        return v                                            # clone, alias, _to_copy…: the same values

    # ------------------------------------------------------------------ one operation
    def call(self, node):
        target = node.target
        if target is operator.getitem:
            return self.value(node.args[0])[node.args[1]]
        name = getattr(getattr(target, "overloadpacket", None), "__name__", None) or str(target)
        name = name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name
        args = [self.value(a) for a in node.args]
        kw = {k: self.value(v) for k, v in node.kwargs.items()}
        try:
            return self._call(name, args, kw, node)
        except (IndexError, KeyError, TypeError, AttributeError) as e:
            raise NaiveError(f"aten.{name}: {type(e).__name__}: {e}") from None

    def _call(self, name: str, args: list, kw: dict, node):
        if name in VIEWS and args and isinstance(args[0], Val):
            return self.view_op(name, args[0], args[1:])
        if name in UNARY:
            return self.pointwise(UNARY[name], args[0])
        if name in ("add", "sub") and "alpha" in kw:
            return self.pointwise(BINARY[name].replace("{1}", "({2} * {1})"), args[0], args[1], kw["alpha"])
        if name in BINARY:
            return self.pointwise(BINARY[name], args[0], args[1] if len(args) > 1 else kw["other"])
        if name == "where":
            return self.pointwise("({0} != 0.0 ? {1} : {2})", *args[:3])
        if name in ("clamp", "clamp_min", "clamp_max", "hardtanh"):
            lo = args[1] if name != "clamp_max" and len(args) > 1 else kw.get("min")
            hi = args[2] if name == "clamp" and len(args) > 2 else args[1] if name == "clamp_max" else kw.get("max")
            vals, text = [args[0]], "{0}"
            if name == "hardtanh":
                lo, hi = (args[1] if len(args) > 1 else const("-1.0")), (args[2] if len(args) > 2 else const("1.0"))
            for bound, fn in ((lo, "kv_max"), (hi, "kv_min")):
                if bound is not None:
                    vals.append(bound)
                    text = f"{fn}({text}, {{{len(vals) - 1}}})"
            return self.pointwise(text, *vals)
        if name == "gelu":
            if kw.get("approximate", "none") == "tanh":
                return self.pointwise("(0.5 * {0} * (1.0 + tanh(0.7978845608028654 * ({0} + 0.044715 * {0} * {0} "
                                      "* {0}))))", args[0])
            return self.pointwise("(0.5 * {0} * (1.0 + erf({0} * 0.7071067811865476)))", args[0])
        if name in ("leaky_relu",):
            slope = args[1] if len(args) > 1 else const("0.01")
            return self.pointwise("({0} > 0.0 ? {0} : {0} * {1})", args[0], slope)
        if name in ("scalar_tensor",):
            return self.val(args[0])
        if name in ("full",):
            return Val(tuple(self.read.expr(d) for d in args[0]), lambda idx, c=self.val(args[1]): c.load([]))
        if name in ("sum", "amax", "amin", "prod", "mean", "max", "min") and isinstance(args[0], Val):
            dims = args[1] if len(args) > 1 and not isinstance(args[1], Val) else kw.get("dim")
            dims = [dims] if isinstance(dims, int) else dims
            keep = bool(args[2] if len(args) > 2 else kw.get("keepdim", False))
            if name in ("max", "min"):
                if dims is not None and len(node.args) > 1:
                    raise NaiveError(f"aten.{name}.dim (values and indices)")
                name = "a" + name
            if name == "mean":
                return self.reduce("sum", args[0], dims, keep, post=f"{{acc}} / {self.count(args[0], dims)}")
            return self.reduce(name, args[0], dims, keep)
        if name == "var":
            dims = args[1] if len(args) > 1 else kw.get("dim")
            keep, corr = bool(kw.get("keepdim", False)), kw.get("correction", 1)
            mean = self.reduce("sum", args[0], dims, True, post=f"{{acc}} / {self.count(args[0], dims)}")
            dev = self.pointwise("(({0} - {1}) * ({0} - {1}))", args[0], mean)
            return self.reduce("sum", dev, dims, keep, post=f"{{acc}} / ({self.count(args[0], dims)} - {corr})")
        if name in ("_softmax", "_log_softmax"):
            x, d = args[0], args[1]
            m = self.reduce("amax", x, [d], True)
            shifted = self.pointwise("({0} - {1})", x, m)
            e = self.pointwise("exp({0})", shifted)
            s = self.reduce("sum", e, [d], True)
            return (self.pointwise("({0} / {1})", e, s) if name == "_softmax"
                    else self.pointwise("({0} - log({1}))", shifted, s))
        if name == "native_layer_norm":
            x, normalized, w, b, eps = args[0], args[1], args[2], args[3], args[4]
            dims = list(range(len(x.shape) - len(normalized), len(x.shape)))
            mean = self.reduce("sum", x, dims, True, post=f"{{acc}} / {self.count(x, dims)}")
            dev = self.pointwise("(({0} - {1}) * ({0} - {1}))", x, mean)
            rstd = self.reduce("sum", dev, dims, True, post=f"1.0 / sqrt({{acc}} / {self.count(x, dims)} + "
                                                              f"{self.val(eps).load([])})")
            out = self.pointwise("(({0} - {1}) * {2})", x, mean, rstd)
            if isinstance(w, Val):
                out = self.pointwise("({0} * {1})", out, w)
            if isinstance(b, Val):
                out = self.pointwise("({0} + {1})", out, b)
            return (out, mean, rstd)
        if name == "mm":
            return self.matmul(args[0], args[1])
        if name == "bmm":
            return self.matmul(args[0], args[1], batch=True)
        if name == "addmm":
            prod = self.matmul(args[1], args[2])
            return self.pointwise("({2} * {0} + {3} * {1})", args[0], prod, kw.get("beta", 1), kw.get("alpha", 1))
        raise NaiveError(f"aten.{name} is not covered by the naive writer (kevolve/task/naive_ops.py)")
