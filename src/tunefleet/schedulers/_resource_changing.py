"""ResourceChangingScheduler: give trials more (or fewer) CPUs/GPUs as they progress.

It wraps another scheduler. After each result the base scheduler decides first;
when it lets the trial continue, an allocation function proposes the trial's new
resources. A different proposal is a `Resize` decision: the controller pauses the
trial (it checkpoints), sets its resources, and runs it again from the checkpoint
with them. The trainable reads its share with
``tune.get_context().get_trial_resources()`` (e.g. to set its thread count).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tunefleet._metrics import MetricSpec, ModeSpec
from tunefleet.resources import PlacementGroupFactory, normalize_resources
from tunefleet.schedulers._base import (
    Cluster,
    Decision,
    Exploit,
    Resize,
    SchedulerDecision,
    TrialScheduler,
)
from tunefleet.schedulers._candidates import Candidates
from tunefleet.schedulers._distribute import DistributeResources
from tunefleet.schedulers._fifo import FIFOScheduler
from tunefleet.trial import Trial

logger = logging.getLogger("tunefleet")

#: (cluster, trial, result, the ResourceChangingScheduler) -> new resources or None
AllocationFunction = Callable[
    [Cluster, Trial, dict[str, Any], "ResourceChangingScheduler"],
    Mapping[str, Any] | PlacementGroupFactory | None,
]


class ResourceChangingScheduler(TrialScheduler):
    """Wraps a scheduler and changes running trials' resources (Ray Tune's names).

    Args:
        base_scheduler: decides continue/pause/stop (default: FIFO).
        resources_allocation_function: ``(cluster, trial, result, scheduler) -> new
            resources`` (Ray's signature; `scheduler` is this scheduler): a
            `PlacementGroupFactory`, a dict such as ``{"CPU": 2, "GPU": 0}``, or None to
            keep them. Default: `DistributeResources()`; None: resources never change.
            `cluster` stands where Ray passes its controller: `get_live_trials()`, `get_num_cpus()`,
            `get_num_gpus()`, plus `capacity`, `running`, `base_resources`, `free()`.
        reallocate_to_running: accepted for Ray Tune compatibility; a trial's
            resources change at its next result, which is when Ray changes them too.

    Example:
        >>> scheduler = ResourceChangingScheduler(
        ...     ASHAScheduler(max_t=30), resources_allocation_function=DistributeResources())
    """

    def __init__(
        self,
        base_scheduler: TrialScheduler | None = None,
        resources_allocation_function: AllocationFunction | None = DistributeResources(),  # noqa: B008
        reallocate_to_running: bool = False,
        *,
        metric: str | None = None,
        mode: str | None = None,
    ) -> None:
        if base_scheduler is not None and not isinstance(base_scheduler, TrialScheduler):
            raise TypeError(
                f"ResourceChangingScheduler: base_scheduler={base_scheduler!r} must be a "
                "tunefleet TrialScheduler"
            )
        if isinstance(base_scheduler, ResourceChangingScheduler):
            raise ValueError("ResourceChangingScheduler cannot wrap another one")
        function = resources_allocation_function
        if function is None:
            logger.warning(
                "ResourceChangingScheduler(resources_allocation_function=None): no trial's "
                "resources will ever change; pass an allocation function such as "
                "DistributeResources()"
            )
        elif not callable(function):
            raise TypeError(
                f"ResourceChangingScheduler: resources_allocation_function={function!r} "
                "must be callable"
            )
        self.base = base_scheduler or FIFOScheduler()
        super().__init__(metric=metric or self.base.metric, mode=mode or self.base.mode)
        self.allocate = function
        self.reallocate_to_running = reallocate_to_running
        self.needs_sync_decisions = True  # a resize pauses the trial right after its result
        self._cluster: Cluster | None = None
        self._resized: dict[str, None] = {}  # paused to change resources: resumed first

    def set_search_properties(self, metric: MetricSpec, mode: ModeSpec, **spec: Any) -> bool:
        if not self.base.set_search_properties(metric, mode, **spec):
            return False
        self.metric, self.mode = self.base.metric, self.base.mode
        return True

    def set_cluster(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self.base.set_cluster(cluster)

    def complete_config(self, config: dict[str, Any]) -> dict[str, Any]:
        return self.base.complete_config(config)

    def on_trial_add(self, trial: Trial) -> None:
        self.base.on_trial_add(trial)

    @property
    def base_trial_resources(self) -> PlacementGroupFactory | None:
        """What each trial asked for (`tune.with_resources`); None before the run."""
        if self._cluster is None:
            return None
        return PlacementGroupFactory.of(self._cluster.base_resources)

    @property
    def _base_trial_resources(self) -> PlacementGroupFactory | None:
        # Ray's own allocation example (xgboost_dynamic_resources_example.py) reads
        # the private spelling; the same answer as base_trial_resources.
        return self.base_trial_resources

    def reallocate_trial_resources_if_needed(
        self, cluster: Cluster, trial: Trial, result: dict[str, Any]
    ) -> PlacementGroupFactory | None:
        """The allocation function's answer when it differs from what the trial holds."""
        if self.allocate is None:
            return None
        proposed = self.allocate(cluster, trial, result, self)
        if proposed is None:
            return None
        if isinstance(proposed, PlacementGroupFactory):
            new = proposed.totals()
        elif isinstance(proposed, Mapping):
            new = normalize_resources(dict(proposed), "resources_allocation_function(...)")
        else:
            raise TypeError(
                f"resources_allocation_function returned {proposed!r}: return a "
                "PlacementGroupFactory, a dict such as {'CPU': 2, 'GPU': 0}, or None"
            )
        held = {"cpu": 0.0, "gpu": 0.0, **trial.resources}
        if set(new) == set(held) and all(math.isclose(new[k], held[k]) for k in new):
            return None
        return PlacementGroupFactory.of(new)

    def stop_note(self, trial: Trial) -> str | None:
        return self.base.stop_note(trial)

    def stopped_early(self, trial: Trial) -> bool:
        return self.base.stopped_early(trial)

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> SchedulerDecision:
        decision = self.base.on_trial_result(trial, result)
        if decision is not Decision.CONTINUE or self._cluster is None:
            return decision
        new = self.reallocate_trial_resources_if_needed(self._cluster, trial, result)
        if new is None:
            return decision
        self._resized[trial.trial_id] = None
        return Resize(new.totals())

    def on_trial_complete(self, trial: Trial, result: dict[str, Any] | None) -> None:
        self._resized.pop(trial.trial_id, None)
        self.base.on_trial_complete(trial, result)

    def on_trial_error(self, trial: Trial) -> None:
        self._resized.pop(trial.trial_id, None)
        self.base.on_trial_error(trial)

    def on_trial_remove(self, trial: Trial) -> None:
        self._resized.pop(trial.trial_id, None)
        self.base.on_trial_remove(trial)

    def choose_trial_to_run(self, candidates: Candidates | Sequence[Trial]) -> Trial | None:
        """A trial paused only to change its resources runs first; else the base decides."""
        pool = Candidates.of(candidates)
        for trial_id in self._resized:
            trial = pool.get(trial_id)
            if trial is not None:
                del self._resized[trial_id]
                return trial
        return self.base.choose_trial_to_run(pool)

    def exploit_on_resume(self, trial: Trial) -> Exploit | None:
        return self.base.exploit_on_resume(trial)

    def get_state(self) -> dict[str, Any]:
        return {"base": self.base.get_state(), "resized": list(self._resized)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.base.set_state(state["base"])
        self._resized = dict.fromkeys(state.get("resized", []))
