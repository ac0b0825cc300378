"""First in, first out: run every trial to its end."""

from __future__ import annotations

from tunefleet.schedulers._base import TrialScheduler


class FIFOScheduler(TrialScheduler):
    """Runs trials in the order they were created and never stops one early."""
