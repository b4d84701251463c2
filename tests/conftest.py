"""Fixtures shared across the test folders."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def private_build_cache(tmp_path_factory):
    """Builds go to a cache of the module's own, so no earlier (or concurrent) run's entries are reused.
    Use with `pytestmark = pytest.mark.usefixtures("private_build_cache")`."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KEVOLVE_CACHE", str(tmp_path_factory.mktemp("kevolve-cache")))
        yield
