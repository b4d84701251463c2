"""What a reply cost, from the token counts the service reported and a price table.

The table is kevolve/llm/prices.yaml (USD per million tokens) with the run's `llm.prices` laid over it. Guarantees:
a priced model's cost is tokens_in × input + tokens_out × output, per million, at the long-context rates when the
prompt passes the model's `above_tokens`; a dated snapshot (gpt-5-2025-08-07) or a resource path
(models/gemini-2.5-pro) is priced as its base name; a model with no price costs 0 and is warned about once per
process (a local server's models cost 0 without a warning). Not guaranteed: the provider's own bill, which may
discount cached prompt tokens or batch calls; our cost is then an upper bound.
"""
from __future__ import annotations

import logging
import re
import threading
from dataclasses import fields
from pathlib import Path
from typing import Mapping, Optional

import yaml

from kevolve.llm.config import Price

log = logging.getLogger(__name__)
PRICES_FILE = Path(__file__).resolve().with_name("prices.yaml")
_DATED = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{4})$")     # -2025-08-07 or -0125
_warned: set[str] = set()
_warned_lock = threading.Lock()


def load_table(path: Path = PRICES_FILE) -> dict[str, Price]:
    """The price table in a prices.yaml (a mapping under `prices:`)."""
    raw = (yaml.safe_load(Path(path).read_text()) or {}).get("prices") or {}
    known = {f.name for f in fields(Price)}
    return {str(name): Price(**{k: v for k, v in row.items() if k in known}) for name, row in raw.items()}


def base_name(model: str) -> str:
    """gpt-5-2025-08-07 -> gpt-5; models/gemini-2.5-pro -> gemini-2.5-pro."""
    return _DATED.sub("", model.rsplit("/models/", 1)[-1].removeprefix("models/"))


class Pricer:
    """Prices replies from a table; thread-safe (read-only after construction)."""

    def __init__(self, overrides: Optional[Mapping[str, Price]] = None, table: Optional[Mapping[str, Price]] = None):
        self.table = dict(load_table() if table is None else table)
        self.table.update(overrides or {})

    def price(self, model: str) -> Optional[Price]:
        return self.table.get(model) or self.table.get(base_name(model))

    def cost(self, model: str, tokens_in: int, tokens_out: int, *, provider: str = "") -> float:
        p = self.price(model)
        if p is None:
            if provider != "local":
                _warn_once(model)
            return 0.0
        long = p.above_tokens is not None and tokens_in > p.above_tokens
        rate_in = p.input_above if long and p.input_above is not None else p.input
        rate_out = p.output_above if long and p.output_above is not None else p.output
        return (tokens_in * rate_in + tokens_out * rate_out) / 1e6


def _warn_once(model: str) -> None:
    with _warned_lock:
        if model in _warned:
            return
        _warned.add(model)
    log.warning("no price for model %r in kevolve/llm/prices.yaml or llm.prices: its calls are counted as $0 "
                "(price it: '++llm.prices={%s: {input: USD_PER_M, output: USD_PER_M}}')", model, model)
