"""A KernelBench problem file, run at any values of its module constants: what an imported task calls.

A KernelBench problem is one Python file: `class Model(nn.Module)` with `forward`, `get_inputs()` (the forward's
tensors), `get_init_inputs()` (the constructor's arguments) and module-level constants they read
(`batch_size = 16`). `Problem(path)` parses it once. Its `constants` are the top-level assignments of a plain int
or float literal, each assigned once, in file order. `at(values)` executes the file with those literals replaced
by `values`, so constants computed from them (`bias_shape = (out_channels, 1, 1)`) follow; one module per set
of values, registered in `sys.modules` (torch.compile imports a function's module by name).

- `draw(seed, device, values)`: `get_inputs()`, then `Model(*get_init_inputs())`, under `torch.manual_seed(seed)`
  on the CPU with the caller's generator state restored, moved to `device`: the forward's inputs, then the
  model's parameters; a pure function of (seed, values), drawn the way torch draws them.
- `forward(tensors, values, dtype)`: `Model.forward(*inputs)` with the given parameters, by
  `torch.func.functional_call` on a module kept per (values, device, dtype) on the meta device (it holds no
  parameter memory). Buffers (BatchNorm's running statistics) are the module's own, made once per key; a training
  mode forward updates them in place, which does not change its output. In float64 the tensors the forward
  creates are float64 too. No autograd.
Not guaranteed: anything about the file's code, which runs in this process as `import` would run it; that the
forward is deterministic or leaves its inputs alone (`kevolve.task.kernelbench` refuses such files at import).
"""
from __future__ import annotations

import ast
import contextlib
import copy
import itertools
import re
import sys
import types
from pathlib import Path

_counter = itertools.count()


class ProblemError(ValueError):
    """A file that is not a KernelBench problem kevolve can run; the message says what to change."""


class Problem:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.source = self.path.read_text()
        try:
            self.tree = ast.parse(self.source, filename=str(self.path))
        except SyntaxError as e:
            raise ProblemError(f"{self.path}: does not parse ({e.msg}, line {e.lineno})") from None
        self.constants: dict[str, int | float] = _constants(self.tree)
        self._modules: dict[tuple, types.ModuleType] = {}
        self._models: dict[tuple, tuple] = {}
        self._tag = f"kevolve_problem_{safe_name(self.path.stem)}_{next(_counter)}"

    # ---- the file at given constants
    def key(self, values: dict) -> tuple:
        """The file's constants at `values` (other names, such as derived sizes, are ignored)."""
        return tuple(type(v)(values.get(n, v)) for n, v in self.constants.items())

    def at(self, values: dict) -> types.ModuleType:
        key = self.key(values)
        if key not in self._modules:
            tree = _substituted(self.tree, dict(zip(self.constants, key)))
            name = f"{self._tag}_{len(self._modules)}"
            mod = types.ModuleType(name)
            mod.__file__ = str(self.path)
            sys.modules[name] = mod
            exec(compile(tree, str(self.path), "exec"), mod.__dict__)
            for needed in ("Model", "get_inputs", "get_init_inputs"):
                if not hasattr(mod, needed):
                    raise ProblemError(f"{self.path}: defines no `{needed}` (a KernelBench problem defines "
                                       "class Model(nn.Module), get_inputs() and get_init_inputs())")
            self._modules[key] = mod
        return self._modules[key]

    # ---- inputs and parameters, drawn the way torch draws them
    def draw(self, seed: int, device, values: dict) -> list:
        """get_inputs(), then the Model's parameters in `named_parameters()` order, drawn under `seed`."""
        import torch
        mod = self.at(values)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            inputs = list(mod.get_inputs())
            model = mod.Model(*mod.get_init_inputs())
        tensors = inputs + [p.detach() for p in model.parameters()]
        return [t.to(device) if isinstance(t, torch.Tensor) else t for t in tensors]

    # ---- the forward
    def forward(self, tensors, values: dict, dtype):
        """Model.forward on `tensors` = inputs then parameters, in `dtype` (float32: the baseline; float64: the
        reference)."""
        import torch
        model, names, buffers = self._model(values, tensors[0].device if len(tensors) else "cpu", dtype)
        n = len(tensors) - len(names)
        state = dict(zip(names, tensors[n:]))
        state.update(buffers)
        with torch.no_grad(), _default_dtype(dtype):
            return torch.func.functional_call(model, state, tuple(tensors[:n]))

    def _model(self, values: dict, device, dtype):
        key = (self.key(values), str(device), dtype)
        if key not in self._models:
            import torch
            mod = self.at(values)
            with torch.random.fork_rng(devices=[]):
                model = mod.Model(*mod.get_init_inputs()).to(device=device, dtype=dtype)
            buffers = {n: b.clone() for n, b in model.named_buffers()}
            names = [n for n, _ in model.named_parameters()]
            self._models[key] = (model.to("meta"), names, buffers)
        return self._models[key]


def safe_name(name: str) -> str:
    """A parameter's name as a C identifier: `gemm.weight` -> `gemm_weight`."""
    return re.sub(r"\W", "_", name)


@contextlib.contextmanager
def _default_dtype(dtype):
    import torch
    if dtype == torch.get_default_dtype():
        yield
        return
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _literal(node: ast.AST):
    """The int or float a node writes literally (`16`, `-1`, `1e-5`), else None; bools are not numbers here."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    return None


def _slots(node: ast.stmt) -> list[tuple[str, ast.expr | None, int | None]]:
    """The names a top-level statement binds: (name, the value node, its index in a tuple value or None)."""
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [(node.target.id, node.value, None)]
    if not isinstance(node, ast.Assign):
        return []
    out = []
    for t in node.targets:
        if isinstance(t, ast.Name):
            out.append((t.id, node.value if len(node.targets) == 1 else None, None))
        elif isinstance(t, (ast.Tuple, ast.List)):        # height, width = 32, 32
            elts = node.value.elts if isinstance(node.value, (ast.Tuple, ast.List)) else None
            for i, e in enumerate(t.elts):
                for name in ast.walk(e):
                    if isinstance(name, ast.Name):
                        same = elts is not None and len(elts) == len(t.elts) and e is name and len(node.targets) == 1
                        out.append((name.id, elts[i] if same else None, i if same else None))
    return out


def _constants(tree: ast.Module) -> dict[str, int | float]:
    """Top-level names bound once, to a plain int or float literal (`n = 16`, `h, w = 32, 32`), in file order."""
    bound: dict[str, list] = {}
    for node in tree.body:
        for name, value, _ in _slots(node):
            bound.setdefault(name, []).append(value)
    return {n: _literal(vs[0]) for n, vs in bound.items()
            if len(vs) == 1 and vs[0] is not None and _literal(vs[0]) is not None}


def _substituted(tree: ast.Module, values: dict) -> ast.Module:
    tree = copy.deepcopy(tree)
    for node in tree.body:
        for name, value, index in _slots(node):
            if name not in values:
                continue
            new = ast.copy_location(ast.Constant(values[name]), value)
            if index is None:
                node.value = new
            else:
                node.value.elts[index] = new
    return ast.fix_missing_locations(tree)
