"""The search: `plan` (defaults resolved once), `population` (islands, archive, complete proposals), `sources`
(where candidates come from), `pipeline` (verify, build, evaluate) over the evaluator `pool`, `contest` (the
champion's comparisons, profiles), `finish` (confirmation, summary), `driver` (the loop), `actors` (thin Ray
wrappers)."""
from kevolve.search.driver import run  # noqa: F401
