"""Three clocks side by side, for any task and C-ABI kernel file: what launch overhead does to the numbers.

    python experiments/bench_clock.py --task layernorm_fwd layernorm_bwd \
        --kernel tasks/{task}/seeds/cuda_split.cu --shapes bench --out bench_clock.txt

For every configuration of the shape set (first initialisation, first seed) it times the kernel, torch
eager and torch.compile (default mode) on three clocks, µs per call, with kevolve's own code
(`kevolve.judge.worker.timing`, the clock the harness uses):
- synced: synchronise the device, events around one call, synchronise again (the old headline);
- queued: L2 flush enqueued before the start event, no synchronisation between (`do_bench` style);
- graph:  a CUDA graph of N × (flush, call) on N input sets, replayed, less a graph of N flushes, over N
          (the harness's headline: device time, launch overhead removed).
Each sample is max(stream time, device time − sync cost), as in the harness. Then the geometric mean of
compile/kernel and eager/kernel per clock, and, if triton imports, a second opinion on the same calls:
`triton.testing.do_bench` (median, its own L2 flush) and `do_bench_cudagraph` (graph replay, no flush).
Each kernel's output is checked against the float64 reference first; a wrong kernel is not timed.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", nargs="+", required=True)
    ap.add_argument("--kernel", required=True, help="C-ABI .cu file; {task} is replaced by the task name")
    ap.add_argument("--shapes", default="bench")
    ap.add_argument("--calls", type=int, default=10, help="calls per CUDA graph")
    ap.add_argument("--samples", type=int, default=30, help="samples per contender and clock")
    ap.add_argument("--out", default="bench_clock.txt")
    args = ap.parse_args()
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)
    say(f"# {' '.join(sys.argv)}\n# {torch.cuda.get_device_name()}, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M')}")
    try:
        for name in args.task:
            bench_task(name, args.kernel.replace("{task}", name), args, say)
    finally:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


def bench_task(name: str, kernel_path: str, args, say) -> None:
    from kevolve.judge import build as builder
    from kevolve.judge.worker import timing
    from kevolve.judge.evaluator.checks import Checker
    from kevolve.judge.options import Options
    from kevolve.task import load_task
    from kevolve.task.abi import CKernel
    task = load_task(name)
    built = builder.build(Path(kernel_path).read_text(), "cuda")
    if not built.ok:
        say(f"{name}: {kernel_path} does not build: {built.error[:500]}")
        return
    kern = CKernel(built.lib_path, task, "cuda")
    clock, checker = timing.CudaClock(), Checker(task, Options(target="cuda"))
    seen, rows = set(), []
    say(f"\n## {name}, kernel {kernel_path}, shapes={args.shapes}; us per call "
        f"(graph: {args.calls} calls per replay; median of {args.samples} samples)")
    header = ["config"] + [f"{c} {k}" for k in ("synced", "queued", "graph") for c in ("eager", "compile", "kernel")]
    header += ["do_bench k", "do_bench c", "dbcg k", "dbcg c", "graph clocks"]
    for cfg in task.configs(args.shapes):
        if cfg.shape_id in seen:
            continue
        seen.add(cfg.shape_id)
        t0 = time.perf_counter()
        row = bench_config(task, cfg, kern, clock, checker, args)
        row["seconds"] = time.perf_counter() - t0
        rows.append((cfg.shape_id, row))
        cells = [row.get(f"{c}:{k}") for k in ("synced", "queued", "graph") for c in ("eager", "compile", "kernel")]
        extra = [row.get("do_bench:kernel"), row.get("do_bench:compile"), row.get("dbcg:kernel"), row.get("dbcg:compile")]
        say(" | ".join([cfg.shape_id] + [_us(v) for v in cells + extra] + [row.get("kinds", "")])
            + f"   ({row['seconds']:.0f} s{'; ' + row['error'] if row.get('error') else ''})")
    say("columns: " + " | ".join(header) + "   (dbcg: triton do_bench_cudagraph, no L2 flush)")
    for clock_name in ("synced", "queued", "graph"):
        for base in ("compile", "eager"):
            ratios = [r[f"{base}:{clock_name}"] / r[f"kernel:{clock_name}"] for _, r in rows
                      if r.get(f"{base}:{clock_name}") and r.get(f"kernel:{clock_name}")]
            if ratios:
                g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
                say(f"{name} geomean {base}/kernel on the {clock_name} clock: {g:.2f}x over {len(ratios)} configs")


def bench_config(task, cfg, kern, clock, checker, args) -> dict:
    import torch
    from kevolve.judge.worker import timing
    from kevolve.judge.worker.serve import Worker
    sizes, n, row = cfg.size_dict, args.calls, {}
    helper = Worker()
    helper.task, helper.device = task, "cuda"
    sets = [helper._allocate(sizes) for _ in range(n)]
    for k, s in enumerate(sets):
        for nm, t in task.make_inputs(cfg, "cuda", 1000 + k).items():
            s["inputs"][nm].copy_(t)
    names = [s.name for s in task.inputs]
    args_of = lambda i: [sets[i]["inputs"][nm] for nm in names]  # noqa: E731
    scalars = task.scalar_values(cfg)
    base = lambda *ins: task.baseline(*ins, **sizes, **scalars)  # noqa: E731

    def kernel_call(i: int) -> None:
        s = sets[i]
        if kern(s["inputs"], s["outputs"], sizes, s["workspace"], torch.cuda.current_stream().cuda_stream,
                scalars=scalars) != 0:
            raise RuntimeError("kernel returned nonzero")
    calls = {"eager": lambda i: base(*args_of(i)), "kernel": kernel_call}
    try:
        # one code object compiled for every shape of two tasks passes dynamo's default recompile limit (8),
        # past which it silently runs eager: raise it, as the worker does
        torch._dynamo.config.recompile_limit = 64
        compiled = torch.compile(base, dynamic=False)
        compiled(*args_of(0))
        calls["compile"] = lambda i: compiled(*args_of(i))
    except Exception as e:  # noqa: BLE001
        row["error"] = f"torch.compile failed: {type(e).__name__}"
    kernel_call(0)
    torch.cuda.synchronize()
    expected = checker.expected(cfg, task.make_inputs(cfg, "cuda", 1000))
    for spec, (ref, _) in zip(task.outputs, expected):
        out = sets[0]["outputs"][spec.name].double()
        if not bool(((out - ref).abs() <= task.atol + task.rtol * ref.abs()).all()):
            row["error"] = f"WRONG output {spec.name}: not timed"
            return row
    S = args.samples
    nulls = {"synced": [clock.synced(lambda: None) for _ in range(S)],
             "queued": [clock.queued(lambda: None) for _ in range(S)]}
    null_graph = clock.capture(lambda i: None, n)
    graphs, kinds = {}, []
    side = torch.cuda.Stream()
    for c, call in calls.items():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):               # warm up on a side stream before capture (torch's advice)
            for i in range(n):
                call(i)
        torch.cuda.synchronize()
        try:
            graphs[c] = clock.capture(call, n)
        except Exception as e:  # noqa: BLE001
            kinds.append(f"{c}: not capturable ({type(e).__name__})")
    clock.replay(null_graph)
    for g in graphs.values():
        clock.replay(g)                              # the first replay uploads the graph
    raw = {f"{c}:{k}": [] for c in calls for k in ("synced", "queued", "graph")}
    null_g = []
    for r in range(S):                               # interleaved: every contender, every clock, each sample
        null_g.append(clock.replay(null_graph))
        for c, call in calls.items():
            raw[f"{c}:synced"].append(clock.synced(lambda: call(r % n)))
            raw[f"{c}:queued"].append(clock.queued(lambda: call(r % n)))
            if c in graphs:
                raw[f"{c}:graph"].append(clock.replay(graphs[c]))
    for key, pairs in raw.items():
        if pairs:
            k = key.split(":")[1]
            per = timing.per_call(pairs, null_g if k == "graph" else nulls[k], n if k == "graph" else 1, graph=k == "graph")
            row[key] = timing.median(per)
    row["kinds"] = "; ".join(kinds) or "all captured"
    try:
        import triton.testing as tt
        for c in ("kernel", "compile"):
            if c in calls:
                row[f"do_bench:{c}"] = tt.do_bench(lambda: calls[c](0), warmup=25, rep=100, return_mode="median")
                if hasattr(tt, "do_bench_cudagraph"):
                    row[f"dbcg:{c}"] = tt.do_bench_cudagraph(lambda: calls[c](0), rep=100, return_mode="median")
    except ImportError:
        pass
    except Exception as e:  # noqa: BLE001
        row["error"] = (row.get("error", "") + f" triton: {type(e).__name__}: {str(e)[:100]}").strip()
    del graphs, null_graph
    torch.cuda.empty_cache()
    return row


def _us(ms: float | None) -> str:
    return "-" if ms is None else f"{ms * 1e3:.1f}"


if __name__ == "__main__":
    sys.exit(main())
