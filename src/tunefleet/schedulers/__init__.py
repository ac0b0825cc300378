"""Trial schedulers: decide whether trials continue, pause or stop."""

from tunefleet.schedulers._asha import ASHAScheduler, AsyncHyperBandScheduler
from tunefleet.schedulers._base import Cluster, Decision, Exploit, Resize, TrialScheduler
from tunefleet.schedulers._candidates import Candidates
from tunefleet.schedulers._distribute import DistributeResources, DistributeResourcesToTopJob
from tunefleet.schedulers._fifo import FIFOScheduler
from tunefleet.schedulers._hyperband import HyperBandForBOHB, HyperBandScheduler
from tunefleet.schedulers._lineage import pbt_schedule
from tunefleet.schedulers._median import MedianStoppingRule
from tunefleet.schedulers._pb2 import PB2
from tunefleet.schedulers._pbt import PopulationBasedTraining
from tunefleet.schedulers._resource_changing import ResourceChangingScheduler

__all__ = [
    "PB2",
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "Candidates",
    "Cluster",
    "Decision",
    "DistributeResources",
    "DistributeResourcesToTopJob",
    "Exploit",
    "FIFOScheduler",
    "HyperBandForBOHB",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PopulationBasedTraining",
    "Resize",
    "ResourceChangingScheduler",
    "TrialScheduler",
    "pbt_schedule",
]
