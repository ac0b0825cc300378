"""Trial schedulers: decide whether trials continue, pause or stop."""

from tunefleet.schedulers._base import Decision, TrialScheduler
from tunefleet.schedulers._fifo import FIFOScheduler

__all__ = ["Decision", "FIFOScheduler", "TrialScheduler"]
