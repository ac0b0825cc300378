"""First in, first out: run every trial to its end."""

from __future__ import annotations

from typing import Any

from tunefleet._metrics import MetricSpec, ModeSpec
from tunefleet.schedulers._base import TrialScheduler


class FIFOScheduler(TrialScheduler):
    """Runs trials in the order they were created and never stops one early."""

    def set_search_properties(self, metric: MetricSpec, mode: ModeSpec, **spec: Any) -> bool:
        return True  # it needs no metric: any number of objectives will do
