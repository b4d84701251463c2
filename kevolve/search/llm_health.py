"""The LLM as the search sees it: every call's outcome (an operator's or a verifier's) counted per provider/model
with the causes of its failures, and the pause of the LLM after `down_after` failed calls in a row.

While paused, the search proposes knob children only (and sends no LLM verifier call), so the evaluators stay fed
by the seeds and knob mutation; one LLM proposal goes every `probe_s` as a probe, and the first call that comes
back ends the pause. What the console says: `line()` on the progress line ("LLM: 8 calls failed: connection
refused at http://127.0.0.1:9/v1"), and the notice `called` returns when the pause begins or ends.

Guarantees: pure arithmetic over what it is told (no I/O, no Ray); a call is failed when the LLM layer gave up on
it (`LLMError`: its `cause`), any reply — a malformed one included — is a call that came back; `allows()` is False
while paused but once per `probe_s` (after `probing()` marked the probe sent); `summary()` is JSON.
Not guaranteed: that a probe reaches the endpoint (its own breaker, kevolve/llm/breaker.py, may still hold it back;
the pause then lasts one more `probe_s`).
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Callable


class LLMHealth:
    def __init__(self, down_after: int, probe_s: float, providers: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        """`providers`: each model's provider (the names counts are kept under: "local/Qwen…")."""
        self.down_after, self.probe_s, self.clock = down_after, probe_s, clock
        self.providers = dict(providers or {})
        self.calls: Counter = Counter()           # provider/model -> calls that ended (failed or not)
        self.failed: Counter = Counter()          # provider/model -> calls that failed
        self.causes: Counter = Counter()          # cause -> failed calls
        self.causes_of: dict[str, Counter] = {}   # provider/model -> its causes
        self.in_a_row = 0                         # failed calls since the last one that came back
        self.last_cause = ""
        self.paused = False
        self.pauses = 0
        self.next_probe = 0.0
        self.notices: list[str] = []              # said once each, in order: the driver prints and records them
        self.ended = False                        # the pause ended the run (LLM-only: exit status 2)

    @property
    def failures(self) -> int:
        return sum(self.failed.values())

    def called(self, model: str | None, cause: str | None) -> str | None:
        """One call of `model` ended: failed with `cause`, or came back (None). Returns the notice to print when
        this call paused the LLM or ended its pause (also queued on `notices`), else None."""
        model = f"{self.providers.get(model or '', 'llm')}/{model or 'a model'}"
        self.calls[model] += 1
        if cause is None:
            self.in_a_row = 0
            if self.paused:
                self.paused = False
                return self._say(f"LLM: back — a call to {model} came back after {self.failures} failed in all; "
                                 "LLM operators resumed")
            return None
        self.failed[model] += 1
        self.causes[cause] += 1
        self.causes_of.setdefault(model, Counter())[cause] += 1
        self.in_a_row += 1
        self.last_cause = cause
        if not self.paused and self.in_a_row >= self.down_after:
            self.paused, self.pauses = True, self.pauses + 1
            self.next_probe = self.clock() + self.probe_s
            return self._say(f"LLM: {self.in_a_row} calls in a row failed ({cause}); going on with knob mutation, "
                             f"trying the LLM again every {self.probe_s:g} s (llm.down_after={self.down_after}, "
                             "llm.probe_s)")
        return None

    def _say(self, notice: str) -> str:
        self.notices.append(notice)
        return notice

    def allows(self) -> bool:
        """Whether an LLM proposal may be sent now: not paused, or paused and a probe is due."""
        return not self.paused or self.clock() >= self.next_probe

    def probing(self) -> None:
        """An LLM proposal was sent: while paused, it is the probe (the next one in `probe_s`)."""
        if self.paused:
            self.next_probe = self.clock() + self.probe_s

    def line(self) -> str:
        """The progress line's part: "" while no call failed."""
        n = self.failures
        if not n:
            return ""
        total = sum(self.calls.values())
        causes = ", ".join(f"{c}" + (f" ({k})" if len(self.causes) > 1 else "")
                           for c, k in self.causes.most_common(2))
        more = f" and {len(self.causes) - 2} more" if len(self.causes) > 2 else ""
        pause = ""
        if self.paused:
            pause = f"; paused, knob mutation only, next try in {max(0.0, self.next_probe - self.clock()):.0f} s"
        return f"LLM: {n}{'' if n == total else f' of {total}'} calls failed: {causes}{more}{pause}"

    def stop_reason(self) -> str:
        return (f"the LLM failed {self.in_a_row} calls in a row ({self.last_cause}) and no operator that needs no LLM "
                "is weighted (search.population.operators.knob is 0): nothing else can write candidates")

    def summary(self) -> dict:
        """Per provider/model: calls, failed, and the causes of every failure (JSON)."""
        return {"calls": sum(self.calls.values()), "failed": self.failures, "paused": self.paused, "ended": self.ended,
                "pauses": self.pauses, "causes": dict(self.causes.most_common()),
                "models": {m: {"calls": self.calls[m], "failed": self.failed[m],
                               "causes": dict(self.causes_of.get(m, Counter()).most_common())}
                           for m in sorted(self.calls)}}
