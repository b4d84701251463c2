"""Does the judge's L2 flush evict lines a kernel loaded with an L2::evict_last cache policy? (issue 10)

The judge evicts the L2 before every timed call by `zero_()` of a buffer twice the L2 (kevolve/judge/worker/timing.py,
`flush_buffer`): ordinary stores. A kernel may mark its loads evict_last (`createpolicy` + `ld.global.L2::cache_hint`);
the L2 evicts such lines after ordinary ones, so they might outlast the flush, and a kernel whose inputs stay in
L2 from one timed call to the next would be timed reading the L2 instead of DRAM. This times one read of an
input of S MB (a bandwidth-bound kernel, experiments/kernels/l2_flush_probe.cu) after each kind of flush:

  warm            plain loads, no flush between the priming read and the timed one (the L2's speed)
  cold            plain loads, the judge's flush between (DRAM's speed)
  last            evict_last loads, the judge's flush between: ≈ cold means the flush holds, ≈ warm that it leaks
  last+redraw     as last, but the input is rewritten (torch's uniform_) before the flush, as a round's fresh draw does
  last+fix        evict_last loads, the flush written with evict_last stores and then discarded from the L2
  cold+fix        plain loads, the same flush: what the fix costs a kernel that does not use hints
  cold+discard    plain loads, the judge's flush followed by a discard of its lines: how much of cold is the
                  write-back of the flush's dirty lines
  plain>last      primed with plain loads, timed with evict_last loads, the judge's flush between: ≈ last means a
                  hinted read is faster for itself (nothing survived), ≈ cold that last's gain is lines that survived
  last>plain      primed with evict_last loads, timed with plain ones: < cold means primed lines survived

and what each flush costs. Run on a GPU from the repository root (builds the probe with nvcc):
    python3 experiments/l2_flush_probe.py [--sizes 8,16,32,40] [--out FILE]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def build(src: Path) -> ctypes.CDLL:
    lib = Path(tempfile.mkdtemp(prefix="l2probe-")) / "probe.so"
    cmd = ["nvcc", "-O3", "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC", str(src), "-o", str(lib)]
    subprocess.run(cmd, check=True)
    so = ctypes.CDLL(str(lib))
    so.probe_read.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    so.probe_flush_last_discard.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    so.probe_discard.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    return so


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,8,16,24,32,40", help="input sizes in MB")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch
    from kevolve.judge.worker.timing import flush_buffer

    so = build(ROOT / "experiments/kernels/l2_flush_probe.cu")
    flush = flush_buffer("cuda")
    sink = torch.zeros(1 << 16, device="cuda")
    stream = torch.cuda.current_stream()
    sp = ctypes.c_void_p(stream.cuda_stream)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def read(x, mode):
        assert so.probe_read(x.data_ptr(), x.numel(), sink.data_ptr(), mode, sp) == 0

    def judge_flush():
        flush.zero_()

    def fixed_flush():
        assert so.probe_flush_last_discard(flush.data_ptr(), flush.numel(), sp) == 0

    def discarded_flush():
        flush.zero_()
        assert so.probe_discard(flush.data_ptr(), flush.numel(), sp) == 0

    def timed(f) -> float:
        samples = []
        for _ in range(args.reps):
            start.record(stream)
            f()
            end.record(stream)
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000.0)
        return statistics.median(samples)

    def scenario(x, mode, between, prime=None) -> float:
        samples = []
        for _ in range(args.reps):
            read(x, mode if prime is None else prime)
            between()
            start.record(stream)
            read(x, mode)
            end.record(stream)
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000.0)
        return statistics.median(samples)

    props = torch.cuda.get_device_properties(0)
    lines = [f"# {props.name}, L2 {props.L2_cache_size >> 20} MB, flush buffer {flush.numel() * 4 >> 20} MB, "
             f"torch {torch.__version__}; µs per timed read (median of {args.reps}); GB/s = size / time",
             f"judge flush (zero_) {timed(judge_flush):.1f} µs, fixed flush (evict_last stores + discard) "
             f"{timed(fixed_flush):.1f} µs",
             f"{'MB':>4} {'warm':>8} {'cold':>8} {'last':>8} {'last+redraw':>12} {'last+fix':>9} {'cold+fix':>9}"
             f" {'cold+discard':>12} {'plain>last':>10} {'last>plain':>10}   {'last/cold':>9} {'last+fix/cold':>13}"]
    for mb in (int(s) for s in args.sizes.split(",")):
        x = torch.rand(mb << 18, device="cuda")
        t = {"warm": scenario(x, 0, lambda: None),
             "cold": scenario(x, 0, judge_flush),
             "last": scenario(x, 1, judge_flush),
             "last+redraw": scenario(x, 1, lambda x=x: (x.uniform_(), judge_flush())),
             "last+fix": scenario(x, 1, fixed_flush),
             "cold+fix": scenario(x, 0, fixed_flush),
             "cold+discard": scenario(x, 0, discarded_flush),
             "plain>last": scenario(x, 1, judge_flush, prime=0),
             "last>plain": scenario(x, 0, judge_flush, prime=1)}
        lines.append(f"{mb:>4} {t['warm']:>8.2f} {t['cold']:>8.2f} {t['last']:>8.2f} {t['last+redraw']:>12.2f} "
                     f"{t['last+fix']:>9.2f} {t['cold+fix']:>9.2f} {t['cold+discard']:>12.2f} {t['plain>last']:>10.2f} {t['last>plain']:>10.2f}   "
                     f"{t['last'] / t['cold']:>9.2f} "
                     f"{t['last+fix'] / t['cold']:>13.2f}")
        del x
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")
    main()
