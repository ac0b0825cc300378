"""Stoppers: rules that end a trial, or the whole experiment, from its reported results.

The names and semantics follow Ray Tune's ``ray.tune.stopper`` module, so a Ray
script ports by changing its imports::

    from tunefleet.stoppers import CombinedStopper, MaximumIterationStopper, TimeoutStopper

    stop = CombinedStopper(MaximumIterationStopper(100), TimeoutStopper(3600))
    tuner = tune.Tuner(train, run_config=tune.RunConfig(stop=stop))

The controller calls ``stopper(trial_id, result)`` after each result (True stops
that trial) and ``stopper.stop_all()`` once per step (True ends the experiment).
`RunConfig(stop=...)` also takes a dict or a plain function; `make_stopper` turns
each form into a `Stopper`.

Differences from Ray Tune, on purpose:

- Non-finite metric values (NaN, inf) are ignored by the plateau stoppers instead
  of turning their standard deviation into NaN.
- `CombinedStopper` shows every result to every stopper (Ray's ``any()`` stops
  at the first True, so later stoppers miss results and count wrong).
- `ExperimentPlateauStopper(patience=n)` waits for n plateaued results after the
  first one (Ray counts the first, so its patience 0 and 1 behave the same).
- Bad constructor arguments raise at once, naming the argument and the rule.
- `TimeoutStopper` measures with `time.monotonic` (Ray: `time.time`), so a change
  of the wall clock cannot end or extend the budget.
- State (`Stopper.get_state`) is plain JSON, never a pickle.
"""

from tunefleet.stoppers._base import Stopper
from tunefleet.stoppers._combined import CombinedStopper, make_stopper
from tunefleet.stoppers._plateau import ExperimentPlateauStopper, TrialPlateauStopper
from tunefleet.stoppers._simple import (
    DictStopper,
    FunctionStopper,
    MaximumIterationStopper,
    NoopStopper,
)
from tunefleet.stoppers._timeout import TimeoutStopper

__all__ = [
    "CombinedStopper",
    "DictStopper",
    "ExperimentPlateauStopper",
    "FunctionStopper",
    "MaximumIterationStopper",
    "NoopStopper",
    "Stopper",
    "TimeoutStopper",
    "TrialPlateauStopper",
    "make_stopper",
]
