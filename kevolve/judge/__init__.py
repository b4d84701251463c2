"""Source in, verdict out. A candidate passes `rules` (static, no compile), `build` (nvcc or g++, cached by
content), then `harness.judge`: a fresh `worker` process runs it while this process `checks` its outputs
against float64 references, and `timing` clocks it against torch. `process` speaks to the worker, `reuse`
is what an evaluator keeps between judgements, `exchange` moves outputs, `results` holds the verdict.
"""
