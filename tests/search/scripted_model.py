"""A scripted kernel-writing model for the loopback servers of tests/llm: end-to-end searches of a real task with no
real LLM. It reads each prompt as a model would — which operator or verifier asks (llm_kit.kind), the kernel it is
shown — and answers in kind, deterministically, with the usage a model would report (prompt characters / 3.5
tokens in; the reply's, plus some reasoning, out):

- translate: the task's seed kernel (given), made distinct by a constant `KEVOLVE_LLM_<n>`;
- optimize, a meta strategy's child, crossover: the kernel shown (crossover: kernel A) with one knob turned when it
  has knobs, made distinct the same way; every `BUG_EVERY`-th such reply carries a bug, in turn a compile error
  (the last `return 0;` loses its `;`) or a wrong answer (the first output's element 0 rewritten);
- repair: the kernel shown with those bugs taken out (and distinct);
- meta: two strategies as JSON;
- the verifiers: `fail` when they see the bug of their kind, with a known share of misses and false alarms, so
  precision and recall come out between 0 and 1 (compile: every compile bug, a false alarm every 7th clean kernel;
  numerics: two of three wrong answers, no false alarm; memory: a false alarm every 6th kernel).

Run it alone for a search by hand (it prints the URL, serves until Ctrl-C):
    python tests/search/scripted_model.py layernorm_bwd cpu
    OPENAI_API_KEY=sk-any OPENAI_BASE_URL=<url>/v1 python -m kevolve llm=openai
"""
from __future__ import annotations

import json
import math
import re
import sys
import threading
from collections import Counter
from pathlib import Path
from random import Random

HERE = Path(__file__).resolve().parent
for p in (HERE, HERE.parents[1] / "tests" / "llm"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
from llm_kit import kind, prompt_of  # noqa: E402
from llm_servers import LLMServer, Ok  # noqa: E402

BUG_EVERY = 3                      # every third kernel-writing reply carries a bug
_FENCE = re.compile(r"```(?:cuda|cpp|c\+\+|c)?\n(.*?)```", re.S)
_NO_SEMI = re.compile(r"return 0[ \t]*\n\s*\}")
WRONG_MARK = "* 0.5f + 1.0f);"


def _compile_bug(src: str) -> str:
    i = src.rfind("return 0;")
    return src[:i] + "return 0" + src[i + len("return 0;"):] if i >= 0 else src + "\n#error broken\n"


def _wrong_bug(src: str, direction: str) -> str:
    """Rewrites element 0 of the entry point's first output, just before its last `return 0;`."""
    head = re.search(r'extern\s+"C"\s+int\s+' + direction + r"\s*\(([^)]*)\)", src, re.S)
    params = [p.strip() for p in head.group(1).split(",")] if head else []
    out = next((p for p in params if "*" in p and "const" not in p and "void" not in p), None)
    i = src.rfind("return 0;")
    if out is None or i < 0:
        return _compile_bug(src)
    ctype, name = out.rsplit("*", 1)[0].strip(), out.rsplit("*", 1)[1].strip()
    line = f"{name}[0] = ({ctype})({name}[0] {WRONG_MARK}\n    "
    return src[:i] + line + src[i:]


def _clean(src: str) -> str:
    src = "\n".join(ln for ln in src.splitlines() if WRONG_MARK not in ln) + "\n"
    i = src.rfind("return 0")
    if i >= 0 and not src[i:].startswith("return 0;"):
        src = src[:i] + "return 0;" + src[i + len("return 0"):]
    return re.sub(r"constexpr int KEVOLVE_LLM_\d+ = \d+;\n", "", src)


def has_compile_bug(src: str) -> bool:
    return bool(_NO_SEMI.search(src)) or "#error broken" in src


def has_wrong_bug(src: str) -> bool:
    return WRONG_MARK in src


class ScriptedModel:
    """`respond(body)` for `LLMServer(respond=...)`. `seed_source`: what translate answers; `direction`: the entry
    point's name (forward | backward). Thread-safe; counts the prompts it answered by kind (`kinds`) and keeps the
    usage it reported, (model, tokens in, tokens out) per reply (`usage`; the model is None on Gemini's API, whose
    body does not name it)."""

    def __init__(self, seed_source: str, direction: str):
        self.seed, self.direction = seed_source, direction
        self.kinds: Counter = Counter()
        self.made = 0
        self.usage: list[tuple[str | None, int, int]] = []
        self.lock = threading.Lock()

    def _distinct(self, src: str) -> str:
        self.made += 1
        return _clean(src).rstrip() + f"\nconstexpr int KEVOLVE_LLM_{self.made} = {self.made};\n"

    def _kernel(self, shown: str) -> str:
        src = self._distinct(shown)
        turned = _turn_knob(src, self.made)
        src = turned or src
        if self.made % BUG_EVERY == 0:
            src = _compile_bug(src) if (self.made // BUG_EVERY) % 2 else _wrong_bug(src, self.direction)
        return src

    def __call__(self, body: dict):
        prompt = prompt_of(body)
        with self.lock:
            k = kind(body)
            self.kinds[k] += 1
            n = self.kinds[k]
            shown = _shown(prompt) or self.seed
            if k == "translate":
                text, think = _fenced(self._distinct(self.seed)), 1500
            elif k in ("optimize", "meta_child", "crossover"):
                text, think = _fenced(self._kernel(shown)), 2000
            elif k == "repair":
                text, think = _fenced(self._distinct(shown)), 1000
            elif k == "meta":
                text, think = _strategies(), 800
            elif k.startswith("verify_"):
                text, think = _verdict(k, shown, n), 300
            else:
                text, think = "I have nothing to add.", 50
            step = Ok(text, math.ceil(len(prompt) / 3.5), math.ceil(len(text) / 3.5) + think)
            self.usage.append((body.get("model"), step.tokens_in, step.tokens_out))
        return step


def _shown(prompt: str) -> str | None:
    """The kernel a prompt shows: the first fenced block after its kernel heading."""
    for heading in ("## The current kernel", "## Kernel A", "## The kernel"):
        i = prompt.find(heading)
        if i >= 0:
            found = _FENCE.search(prompt, i)
            return found.group(1) if found else None
    return None


def _turn_knob(src: str, n: int) -> str | None:
    from kevolve.operators import knobs
    try:
        turned = knobs.mutate(src, Random(n), 1)
    except ValueError:
        return None
    return turned[0] if turned else None


def _fenced(src: str) -> str:
    return f"Here is the kernel.\n\n```cpp\n{src}```\n"


def _strategies() -> str:
    ideas = [{"name": "wider chunks", "idea": "process more columns per inner iteration"},
             {"name": "fewer passes", "idea": "fuse the reductions into one pass over each row"}]
    return f"```json\n{json.dumps(ideas)}\n```"


def _verdict(k: str, src: str, n: int) -> str:
    if k == "verify_compile":
        bad = has_compile_bug(src) or n % 7 == 0
    elif k == "verify_numerics":
        bad = has_wrong_bug(src) and n % 3 != 0
    else:
        bad = n % 6 == 0
    return f'I read the kernel.\n{{"verdict": "{"fail" if bad else "pass"}", "reason": "scripted"}}'


def serve(task: str, target: str = "cpu") -> LLMServer:
    from kevolve.task import load_task
    t = load_task(task)
    return LLMServer(respond=ScriptedModel(t.seed_path(target).read_text(), t.direction))


if __name__ == "__main__":
    server = serve(sys.argv[1] if len(sys.argv) > 1 else "layernorm_bwd", sys.argv[2] if len(sys.argv) > 2 else "cpu")
    print(f"{server.url}/v1", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()
