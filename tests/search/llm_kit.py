"""What the end-to-end LLM search tests share: kernels of tests/search_task (good, slow, broken, wrong, writing out
of bounds), the kind of prompt a request carries (OpenAI or Gemini body), a `Script` that answers the loopback
servers of tests/llm by prompt kind and books the usage it reported, a config builder and the store readers.

The servers (tests/llm/llm_servers.py) speak the real REST APIs; the real `openai` and `google-genai` clients talk
to them. Nothing here replaces a part of kevolve: the tests run `kevolve.search.run` as a user would.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import sqlite3
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import ray

from kevolve.config import from_hydra
from kevolve.record.store import Store

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "tests" / "llm") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_servers import Gate, Hang, Ok  # noqa: E402

TASK = ROOT / "tests" / "search_task"
GOOD = (TASK / "seeds" / "cpu.cpp").read_text()              # O(N) per row, OpenMP over rows
SLOW = """// Scaled softmax forward, a deliberately slow seed: the row's max and sum again for every element.
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, float* out, int64_t B, int64_t N, float scale,
                       void* workspace, int64_t workspace_bytes) {
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        float* o = out + b * N;
        for (int64_t i = 0; i < N; ++i) {
            float m = -INFINITY;
            for (int64_t j = 0; j < N; ++j) m = std::fmax(m, scale * row[j]);
            double sum = 0.0;
            for (int64_t j = 0; j < N; ++j) sum += std::exp(scale * row[j] - m);
            o[i] = (float)(std::exp(scale * row[i] - m) / sum);
        }
    }
    return 0;
}
"""
BROKEN = GOOD.replace("    return 0;\n}", "    return 0\n}")                      # does not compile
WRONG = GOOD.replace("const float inv = (float)(1.0 / sum);", "const float inv = (float)(1.0 / (sum + 1.0));")
OVERRUN = GOOD.replace("    return 0;\n}", "    out[B * N] = out[0];             // one element past the end\n"
                                           "    return 0;\n}")
FAST = {"reps": 5, "budget_s": 0.02, "baselines": ["eager"], "timeout_s": 60}
assert BROKEN != GOOD and WRONG != GOOD and OVERRUN != GOOD


def fenced(source: str) -> str:
    return f"Here is the kernel.\n\n```cpp\n{source}```\n"


def verdict(ok: bool, reason: str = "checked") -> str:
    return f'I read the kernel.\n{{"verdict": "{"pass" if ok else "fail"}", "reason": "{reason}"}}'


def variant(source: str, tag: str) -> str:
    """`source` with one more constant: a distinct kernel (duplicates are dropped before building) that a
    router can recognise by `tag` in the prompts that quote it."""
    return source + f"constexpr int {tag} = 1;\n"


def prompt_of(body: dict) -> str:
    """The last user turn of a request: an OpenAI chat body or a Gemini generateContent body."""
    if "messages" in body:
        return body["messages"][-1]["content"]
    return "".join(p.get("text", "") for p in body["contents"][-1]["parts"])


_KINDS = (("## Your check: does it compile?", "verify_compile"),
          ("## Your check: is every memory access", "verify_memory"),
          ("## Your check: are the results right", "verify_numerics"), ("## The strategy to implement", "meta_child"),
          ("## What went wrong", "repair"), ("## Kernel A", "crossover"), ("You are red-teaming", "red_team"),
          ("distinct strategies", "meta"), ("## The current kernel", "optimize"),
          ("## The PyTorch reference", "translate"))


def kind(body: dict) -> str:
    """Which prompt a request carries (the operators' and verifiers' prompt files differ in their headings)."""
    user = prompt_of(body)
    return next((name for marker, name in _KINDS if marker in user), "other")


class Script:
    """Answers by prompt kind: the kind's queue in order, then `default(kind, prompt)` (a step, e.g. `Ok`).
    Books every `Ok` it hands out, gated or not (tokens in, out, thoughts), counts the kinds asked and the `Hang`s."""

    def __init__(self, queues: dict[str, list], default: Callable[[str, str], object]):
        self.queues = {k: list(v) for k, v in queues.items()}
        self.default = default
        self.usage: list[tuple[int, int, int]] = []
        self.kinds: collections.Counter = collections.Counter()
        self.hung = 0

    def __call__(self, body: dict):
        k = kind(body)
        self.kinds[k] += 1
        q = self.queues.get(k)
        step = q.pop(0) if q else self.default(k, prompt_of(body))
        sent = step.then if isinstance(step, Gate) else step
        if isinstance(sent, Ok):
            self.usage.append((sent.tokens_in, sent.tokens_out, sent.thoughts))
        self.hung += isinstance(sent, Hang)
        return step

    def cost(self, price: tuple[float, float]) -> float:
        """USD of every reply handed out at (input, output) USD per million tokens; thoughts bill as output."""
        return sum(i * price[0] + (o + t) * price[1] for i, o, t in self.usage) / 1e6


@contextmanager
def ray_with(env: dict[str, str], cache_dir: Path):
    """`env` and a build cache in the environment before a 2-CPU Ray starts (its workers inherit both)."""
    saved = {k: os.environ.get(k) for k in [*env, "KEVOLVE_CACHE"]}
    os.environ.update({**env, "KEVOLVE_CACHE": str(cache_dir)})
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
             object_store_memory=200 << 20)
    try:
        yield
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def only(weights: dict | None = None) -> dict:
    """Operator weights with every operator not named at 0: a test asks for exactly the operators it scripts
    (a null weight would be the LLM pipeline's default, kevolve/search/llm_defaults.py)."""
    from kevolve.config import OPERATORS
    return {**dict.fromkeys(OPERATORS, 0.0), **({"knob": 1.0} if weights is None else weights)}


def config_dict(task: Path, llm: dict, resume: Path | None = None, **search) -> dict:
    """A CPU search of `task` with this `llm` group, as the dict `from_hydra` takes (a driver in another process
    gets it as JSON); `search` fields over fast, single-island defaults: the operators named (knob alone when none
    is) and no LLM verifier unless `verifiers` is given."""
    population = {"islands": 1, "inspiration_rate": 0.0, **search.pop("population", {})}
    population["operators"] = only(population.get("operators"))
    search.setdefault("verifiers", {"checks": []})
    return {"task": {"name": str(task)}, "resources": {"target": "cpu"}, "progress": False,
            "resume": str(resume) if resume else None,
            "search": {**FAST, "llm_calls": 2, "in_flight": 3, **search, "population": population},
            "llm": {"max_retries": 2, "backoff_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 30,
                    "max_output_tokens": 2000, **llm}}


def config(task: Path, llm: dict, resume: Path | None = None, **search):
    return from_hydra(config_dict(task, llm, resume, **search))


def records(run_dir: Path) -> list:
    with Store.open(run_dir, readonly=True) as store:
        return store.candidates()


def by_source(run_dir: Path) -> dict:
    return {r.candidate.source: r for r in records(run_dir)}


def rows(path: Path, sql: str) -> list:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def decision(record) -> dict:
    """The LLM verifiers' decision on a candidate (`Verification.record`), {} when it had none."""
    return (record.screening or {}).get("decision", {})


def cached_prompts(run_dir: Path) -> set[str]:
    """The last user turn of every reply in a run's response cache (RUN_DIR/llm_cache.sqlite)."""
    return {json.loads(m)[-1]["content"] for (m,) in rows(run_dir / "llm_cache.sqlite", "SELECT messages FROM replies")}
