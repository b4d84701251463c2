"""Does the empty graph's place in a round bias the judge's graph clock? (issue 9, launch-bound rows)

    python experiments/clock_position.py --task layernorm_fwd --kernel tasks/layernorm_fwd/seeds/cuda_rows.cu \
        --configs 3 --out clock_position.txt

The judge's graph clock subtracts the median replay time of a graph of N flushes alone (the "null") from every
contender's replay of N × (flush, call). In a judge round the null is replayed first, right after host work
(input draws, poison, the evaluator's checks in another process); bench_clock replays it between busy replays.
If the null runs slower when it comes first after idle host work, every contender's per-call time is lowered
by the same amount over N, which matters only where a call takes a few µs. This script times the same graphs,
built as the judge builds them (kevolve.judge.worker.timing, one input set and output buffers per call), in three
orders per sample, interleaved:
- busy:  null, then every contender, back to back (bench_clock's order);
- judge: 20 ms of host work and a fill of the inputs on the GPU, then null, then the contenders (the judge's
         order before this fix);
- wake:  as judge, with one untimed replay of the null before the timed one (the judge's order now).
It prints, per configuration, the null's µs per replay and each contender's µs per call under each order.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ORDERS = ("busy", "judge", "wake")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--shapes", default="bench")
    ap.add_argument("--configs", type=int, default=3, help="the first K shapes of the set")
    ap.add_argument("--calls", type=int, default=20, help="calls per graph (N)")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--gap-ms", type=float, default=20.0, help="host work before a judge-order sample")
    ap.add_argument("--out", default="clock_position.txt")
    args = ap.parse_args()
    import torch

    from kevolve.judge import build as builder
    from kevolve.judge.worker import timing
    from kevolve.task import load_task
    from kevolve.task.abi import CKernel
    task = load_task(args.task)
    built = builder.build(Path(args.kernel).read_text(), "cuda")
    if not built.ok:
        print(built.error)
        return 1
    kern = CKernel(built.lib_path, task, "cuda")
    clock = timing.CudaClock()
    lines = [f"# {' '.join(sys.argv)}",
             (f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M')}; "
              f"us; N={args.calls}, {args.samples} samples per order")]
    print(lines[-1], flush=True)
    seen = []
    for cfg in task.configs(args.shapes):
        if cfg.shape_id in seen or len(seen) >= args.configs:
            continue
        seen.append(cfg.shape_id)
        line = one_config(task, cfg, kern, clock, args)
        print(line, flush=True)
        lines.append(line)
        torch.cuda.empty_cache()
    Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


def one_config(task, cfg, kern, clock, args) -> str:
    """The graphs of one configuration timed in the three orders; one line of µs."""
    import torch

    from kevolve.judge.worker import timing
    from kevolve.judge.worker.serve import Worker
    sizes, n, scalars = cfg.size_dict, args.calls, task.scalar_values(cfg)
    helper = Worker()
    helper.task, helper.device = task, "cuda"
    sets = [helper._allocate(sizes) for _ in range(n)]

    def fill() -> None:
        for k, s in enumerate(sets):
            for nm, t in task.make_inputs(cfg, "cuda", 1000 + k).items():
                s["inputs"][nm].copy_(t)
    fill()
    names = [s.name for s in task.inputs]

    def base(*ins):
        return task.baseline(*ins, **sizes, **scalars)
    torch._dynamo.config.recompile_limit = 64
    compiled = torch.compile(base, dynamic=False)
    compiled(*[sets[0]["inputs"][nm] for nm in names])

    def kernel_call(i: int) -> None:
        s = sets[i]
        kern(s["inputs"], s["outputs"], sizes, s["workspace"], torch.cuda.current_stream().cuda_stream,
             scalars=scalars)
    calls = {"kernel": kernel_call, "eager": lambda i: base(*[sets[i]["inputs"][nm] for nm in names]),
             "compile": lambda i: compiled(*[sets[i]["inputs"][nm] for nm in names])}
    side = torch.cuda.Stream()
    for call in calls.values():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(n):
                call(i)
    torch.cuda.synchronize()
    graphs = {c: clock.capture(call, n) for c, call in calls.items()}
    null = clock.capture(lambda i: None, n)
    for g in [null, *graphs.values()]:
        clock.replay(g)                                      # upload
    raw = {o: {c: [] for c in ["_null", *calls]} for o in ORDERS}
    order_c = list(calls)
    for r in range(args.samples):
        for order in ORDERS:
            if order != "busy":                              # the judge's host work: a pause, fresh inputs
                time.sleep(args.gap_ms / 1e3)
                fill()
                torch.cuda.synchronize()
            if order == "wake":
                clock.replay(null)
            raw[order]["_null"].append(clock.replay(null))
            k = r % len(order_c)
            for c in order_c[k:] + order_c[:k]:
                raw[order][c].append(clock.replay(graphs[c]))
    row = [cfg.shape_id]
    for order in ORDERS:
        nulls = raw[order]["_null"]
        cells = [f"null {timing.median([s for s, _ in nulls]) * 1e3 / n:.2f}/flush"]
        for c in calls:
            cells.append(f"{c} {timing.median(timing.per_call(raw[order][c], nulls, n, graph=True)) * 1e3:.2f}")
        row.append(f"{order}: " + ", ".join(cells))
    return " | ".join(row)


if __name__ == "__main__":
    sys.exit(main())
