"""The search: `plan` (defaults resolved once), `population` (islands, archive, proposals), `dedupe`, `store`
(SQLite, resumable), `actors` (thin Ray wrappers), `driver` (routes work and records it)."""
from kevolve.search.driver import run  # noqa: F401
