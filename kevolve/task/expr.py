"""The arithmetic a task is written in: integer expressions of its sizes (`4 * (B * N + N)`, `cdiv(N, 256)`),
conditions on them, and the geometric mean that fitness is built from.

Guaranteed: `eval_expr` and `eval_condition` run nothing but integer arithmetic, comparisons and max/min/cdiv on
the names given; anything else raises `TaskError` naming the expression. `geomean` ignores values that are not
positive and finite (NaN when none is).
"""
from __future__ import annotations

import ast
import functools
import math
import operator

class TaskError(ValueError):
    """A task name that does not exist or a task folder that is malformed."""


# ---------------------------------------------------------------- size expressions
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_FUNCS = {"max": max, "min": min, "cdiv": lambda a, b: -(-a // b)}


def eval_expr(expr: str | int, names: dict[str, int]) -> int:
    """Evaluates an integer expression of size names (`4 * (B * N + N)`, `cdiv(N, 256)`); nothing else runs."""
    if isinstance(expr, int):
        return expr

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise TaskError(f"expression {expr!r}: unknown size {node.id!r} (known: {sorted(names)})")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise TaskError(f"expression {expr!r}: only integers, sizes, + - * // % ** and max/min/cdiv are allowed")

    return int(ev(_parsed(str(expr))))


@functools.lru_cache(maxsize=4096)
def _parsed(expr: str) -> ast.Expression:
    """An expression's tree, parsed once (drawing configurations evaluates the same few many times)."""
    try:
        return ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise TaskError(f"expression {expr!r} does not parse: {e.msg}") from None


_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}


def eval_condition(text: str, sizes: dict[str, int]) -> bool:
    """`text` (comparisons of size expressions joined by and/or/not) on `sizes`; nothing else runs."""
    def ev(node: ast.AST) -> bool:
        if isinstance(node, ast.BoolOp):
            values = [ev(v) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not ev(node.operand)
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            terms = [eval_expr(ast.unparse(t), sizes) for t in [node.left, *node.comparators]]
            return all(_COMPARE[type(op)](a, b) for op, a, b in zip(node.ops, terms, terms[1:]))
        raise TaskError(f"condition {text!r}: only comparisons of size expressions joined by and/or/not")
    try:
        return ev(ast.parse(text, mode="eval").body)
    except SyntaxError as e:
        raise TaskError(f"condition {text!r} does not parse: {e.msg}") from None



def geomean(values: list[float]) -> float:
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")
