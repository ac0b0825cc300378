from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
from hypothesis import settings

# The CI gate (`make test` sets TUNEFLEET_HYPOTHESIS=ci) runs the same examples every
# time, so a pass or a failure is reproducible; plain `pytest` explores new ones.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("TUNEFLEET_HYPOTHESIS") == "ci":
    settings.load_profile("ci")


@pytest.fixture
def storage(tmp_path: Path) -> str:
    path = tmp_path / "results"
    path.mkdir()
    return str(path)


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> object:
    """Every test must leave no worker process behind."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    leftovers = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE
    ]
    for p in leftovers:
        p.kill()
    assert not leftovers, f"processes left behind: {[p.cmdline() for p in leftovers]}"
