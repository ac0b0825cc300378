"""Trial schedulers: decide whether trials continue, pause or stop."""

from tunefleet.schedulers._base import Decision, Exploit, TrialScheduler
from tunefleet.schedulers._fifo import FIFOScheduler
from tunefleet.schedulers._lineage import pbt_schedule
from tunefleet.schedulers._pbt import PopulationBasedTraining

__all__ = [
    "Decision",
    "Exploit",
    "FIFOScheduler",
    "PopulationBasedTraining",
    "TrialScheduler",
    "pbt_schedule",
]
