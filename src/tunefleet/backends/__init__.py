"""Backends: where trials run."""

from tunefleet.backends._base import Backend, Event, Failed, Finished, Results, TrialLaunch

__all__ = ["Backend", "Event", "Failed", "Finished", "Results", "TrialLaunch"]
