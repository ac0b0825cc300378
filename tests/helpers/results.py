"""Reading results in tests."""

from __future__ import annotations

from typing import Any

from tunefleet.results import Result


def metrics_of(result: Result) -> dict[str, Any]:
    """The last metrics the result's trial reported; it must have reported some."""
    assert result.metrics, f"the trial at {result.path} reported nothing"
    return result.metrics
