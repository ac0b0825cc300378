"""ResourceChangingScheduler: give trials more (or fewer) CPUs/GPUs as they progress.

It wraps another scheduler. After each result the base scheduler decides first;
when it lets the trial continue, an allocation function proposes the trial's new
resources. A different proposal is a `Resize` decision: the controller pauses the
trial (it checkpoints), sets its resources, and runs it again from the checkpoint
with them. The trainable reads its share with
``tune.get_context().get_trial_resources()`` (e.g. to set its thread count).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tunefleet._metrics import MetricSpec, ModeSpec, metric_value
from tunefleet.schedulers._base import (
    Cluster,
    Decision,
    Exploit,
    Resize,
    SchedulerDecision,
    TrialScheduler,
)
from tunefleet.schedulers._candidates import Candidates
from tunefleet.schedulers._fifo import FIFOScheduler
from tunefleet.trial import Trial

#: (cluster, trial, result, base scheduler) -> the trial's new resources, or None to keep
AllocationFunction = Callable[
    [Cluster, Trial, dict[str, Any], TrialScheduler], Mapping[str, float] | None
]

_SCALED = ("cpu", "gpu")


class DistributeResources:
    """Ray Tune's default allocation: the machine's CPUs (and GPUs) shared evenly.

    Each running trial gets its base request plus an equal share of what the base
    requests of all running trials leave free, in steps of `increase_by` (default:
    the base request itself, so a 1-CPU trial gets 1, 2, 3 ... CPUs), at most
    `increase_by_times` steps (-1: no limit). `reserve_resources` are kept free.

    Args:
        add_bundles: accepted for Ray Tune compatibility (one process per trial here,
            so bundles and a bigger single request are the same).
        increase_by: the step per resource, e.g. ``{"cpu": 1}``.
        increase_by_times: the most steps a trial gets (-1: as many as fit).
        reserve_resources: resources never handed out, e.g. ``{"cpu": 1}``.
    """

    def __init__(
        self,
        add_bundles: bool = False,
        increase_by: Mapping[str, float] | None = None,
        increase_by_times: int = -1,
        reserve_resources: Mapping[str, float] | None = None,
    ) -> None:
        if isinstance(increase_by_times, bool) or not isinstance(increase_by_times, int):
            raise ValueError(f"increase_by_times={increase_by_times!r} must be an integer")
        if increase_by_times < -1:
            raise ValueError(f"increase_by_times={increase_by_times!r} must be >= -1")
        for name, given in (("increase_by", increase_by), ("reserve_resources", reserve_resources)):
            for key, value in (given or {}).items():
                if key not in _SCALED or not isinstance(value, (int, float)) or value < 0:
                    raise ValueError(
                        f"{name}[{key!r}]={value!r}: only 'cpu' and 'gpu' amounts >= 0 "
                        "can be handed out"
                    )
        self.add_bundles = add_bundles
        self.increase_by = dict(increase_by or {})
        self.increase_by_times = increase_by_times
        self.reserve = dict(reserve_resources or {})

    def __call__(
        self, cluster: Cluster, trial: Trial, result: dict[str, Any], scheduler: TrialScheduler
    ) -> dict[str, float] | None:
        running = max(1, len(cluster.running))

        def spare(name: str, base: float) -> float:  # an equal part of what is left
            return (self._share(cluster, name) - base * running) / running

        return self._grow(cluster, trial, spare)

    def _grow(
        self, cluster: Cluster, trial: Trial, spare: Callable[[str, float], float]
    ) -> dict[str, float]:
        """The trial's base request plus, per scaled resource, as many `increase_by`
        steps as fit in ``spare(name, base amount)`` (at most `increase_by_times`)."""
        new = dict(trial.resources)
        for name in _SCALED:
            base = cluster.base_resources.get(name, 0.0)
            step = self.increase_by.get(name, base)
            if step <= 0:
                continue
            steps = max(0, math.floor(spare(name, base) / step + 1e-9))
            if self.increase_by_times >= 0:
                steps = min(steps, self.increase_by_times)
            new[name] = base + steps * step
        return new

    def _share(self, cluster: Cluster, name: str) -> float:
        return cluster.capacity.get(name, 0.0) - self.reserve.get(name, 0.0)


class DistributeResourcesToTopJob(DistributeResources):
    """Everything spare goes to the best running trial (by `metric`); others get their base.

    Args:
        metric, mode: how to rank the running trials (default: the scheduler's).
        Other arguments: as `DistributeResources`.
    """

    def __init__(
        self,
        add_bundles: bool = False,
        increase_by: Mapping[str, float] | None = None,
        increase_by_times: int = -1,
        reserve_resources: Mapping[str, float] | None = None,
        metric: str | None = None,
        mode: str | None = None,
    ) -> None:
        super().__init__(add_bundles, increase_by, increase_by_times, reserve_resources)
        if mode not in (None, "min", "max"):
            raise ValueError(f"mode={mode!r} is not valid: it must be 'min' or 'max'")
        self.metric, self.mode = metric, mode

    def __call__(
        self, cluster: Cluster, trial: Trial, result: dict[str, Any], scheduler: TrialScheduler
    ) -> dict[str, float] | None:
        metric = self.metric or scheduler.metric
        mode = self.mode or scheduler.mode
        if metric is None or mode is None:
            raise ValueError(
                "DistributeResourcesToTopJob needs metric and mode (give them to it or to "
                "TuneConfig)"
            )
        sign = 1.0 if mode == "max" else -1.0

        def score(t: Trial) -> float:
            value = metric_value(t.last_result or {}, metric)
            return -math.inf if value is None else sign * value

        top = max(cluster.running.values(), key=score, default=trial)
        others = len(cluster.running) - 1

        def spare(name: str, base: float) -> float:  # all that is left, to the top trial
            if top.trial_id != trial.trial_id:
                return 0.0
            return self._share(cluster, name) - base * others - base

        return self._grow(cluster, trial, spare)


class ResourceChangingScheduler(TrialScheduler):
    """Wraps a scheduler and changes running trials' resources (Ray Tune's names).

    Args:
        base_scheduler: decides continue/pause/stop (default: FIFO).
        resources_allocation_function: ``(cluster, trial, result, base_scheduler) ->
            new resources or None`` (default: `DistributeResources()`); `cluster` has
            `capacity`, `running` (trial id -> Trial), `base_resources` and `free()`.
        reallocate_to_running: accepted for Ray Tune compatibility; a trial's
            resources change at its next result, which is when Ray changes them too.

    Example:
        >>> scheduler = ResourceChangingScheduler(
        ...     ASHAScheduler(max_t=30), resources_allocation_function=DistributeResources())
    """

    def __init__(
        self,
        base_scheduler: TrialScheduler | None = None,
        resources_allocation_function: AllocationFunction | None = None,
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
        function = resources_allocation_function or DistributeResources()
        if not callable(function):
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
        self.base.set_search_properties(metric, mode, **spec)
        return super().set_search_properties(metric, mode, **spec)

    def set_cluster(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self.base.set_cluster(cluster)

    def on_trial_add(self, trial: Trial) -> None:
        self.base.on_trial_add(trial)

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> SchedulerDecision:
        decision = self.base.on_trial_result(trial, result)
        if decision is not Decision.CONTINUE or self._cluster is None:
            return decision
        proposed = self.allocate(self._cluster, trial, result, self.base)
        if proposed is None:
            return decision
        new = {**trial.resources, **{k: float(v) for k, v in proposed.items()}}
        if all(math.isclose(new[k], trial.resources.get(k, 0.0)) for k in new):
            return decision
        self._resized[trial.trial_id] = None
        return Resize(new)

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
