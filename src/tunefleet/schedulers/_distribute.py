"""Ray Tune's resource allocation functions for `ResourceChangingScheduler`.

Both count in steps of `increase_by` above the trial's base request (the one given
to `tune.with_resources`) and answer a new `PlacementGroupFactory`:

- `DistributeResources`: every running trial may grow to an equal share of what the
  base requests leave; a trial grows into the free resources up to that share, and
  shrinks (never below its base) when more is held than there is.
- `DistributeResourcesToTopJob`: the free resources go to the best running trial by
  `metric`; the others keep what they hold unless more is held than there is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tunefleet._metrics import metric_value
from tunefleet.resources import PlacementGroupFactory
from tunefleet.schedulers._base import Cluster, TrialScheduler
from tunefleet.trial import Trial

_SCALED = ("cpu", "gpu")
_EPS = 1e-9


def _amounts(name: str, given: Mapping[str, float] | None) -> dict[str, float]:
    """`increase_by` / `reserve_resources` in our names; CPU/GPU as Ray spells them too."""
    out: dict[str, float] = {}
    for key, value in (given or {}).items():
        ours = key.lower() if isinstance(key, str) else key
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ours not in _SCALED or not ok or not value >= 0:
            raise ValueError(
                f"{name}[{key!r}]={value!r}: only 'CPU' and 'GPU' amounts >= 0 can be handed out"
            )
        out[str(ours)] = float(value)
    return out


class DistributeResources:
    """Ray Tune's default allocation: spare CPUs and GPUs shared evenly over running trials.

    Args:
        add_bundles: grow by adding `increase_by` bundles (True) or by enlarging the
            first bundle (False, the default).
        increase_by: one step, e.g. ``{"CPU": 2}`` (default: 1 GPU if the base request
            has GPUs, else 1 CPU; with `add_bundles`, the last base bundle).
        increase_by_times: the most steps a trial gets (< 1: as many as fit).
        reserve_resources: resources never handed out, e.g. ``{"CPU": 1}``.

    Called as ``(cluster, trial, result, scheduler)``; returns the trial's new
    `PlacementGroupFactory` (the same one when nothing changes), or None before its
    first iteration.
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
        self.add_bundles = add_bundles
        self.increase_by = _amounts("increase_by", increase_by)
        if increase_by is not None and not any(self.increase_by.values()):
            raise ValueError(f"increase_by={increase_by!r} must add some CPU or GPU")
        self.increase_by_times = increase_by_times
        self.reserve_resources = _amounts("reserve_resources", reserve_resources)

    def __call__(
        self, cluster: Cluster, trial: Trial, result: dict[str, Any], scheduler: TrialScheduler
    ) -> PlacementGroupFactory | None:
        if result.get("training_iteration", 1) < 1:
            return None
        base = cluster.base_resources or {"cpu": 1.0, "gpu": 0.0}
        step = self._step(base)
        live = {t.trial_id: t for t in cluster.get_live_trials()}
        live.setdefault(trial.trial_id, trial)
        total = {
            r: cluster.capacity.get(r, 0.0) - self.reserve_resources.get(r, 0.0) for r in _SCALED
        }
        used = {r: sum(t.resources.get(r, 0.0) for t in live.values()) for r in _SCALED}
        change = _fits({r: total[r] - used[r] for r in _SCALED}, step)
        steps = self._new_steps(trial, list(live.values()), base, step, total, change)
        if self.increase_by_times > 0:
            steps = min(steps, self.increase_by_times)
        return self._factory(base, step, max(0, steps))

    def _new_steps(
        self,
        trial: Trial,
        live: list[Trial],
        base: Mapping[str, float],
        step: Mapping[str, float],
        total: Mapping[str, float],
        change: int,
    ) -> int:
        """Steps above the base: grow into the free resources up to an equal share."""
        held = _steps_of(trial, base, step)
        if change <= 0:
            return held + change
        spare = _fits({r: total[r] - base.get(r, 0.0) * len(live) for r in _SCALED}, step)
        share = math.ceil(spare / len(live)) if spare > 0 else 0
        return min(held + change, share)

    def _step(self, base: Mapping[str, float]) -> dict[str, float]:
        if self.increase_by:
            return dict(self.increase_by)
        if self.add_bundles:
            return {r: base.get(r, 0.0) for r in _SCALED}
        return {"gpu": 1.0} if base.get("gpu", 0.0) > 0 else {"cpu": 1.0}

    def _factory(
        self, base: Mapping[str, float], step: Mapping[str, float], steps: int
    ) -> PlacementGroupFactory:
        head = PlacementGroupFactory.of(base).bundles[0]
        step_bundle = {r.upper(): v for r, v in step.items() if v}
        if self.add_bundles:
            return PlacementGroupFactory([head] + [dict(step_bundle)] * steps)
        grown = dict(head)
        for name, amount in step_bundle.items():
            grown[name] = grown.get(name, 0.0) + amount * steps
        return PlacementGroupFactory([grown])


class DistributeResourcesToTopJob(DistributeResources):
    """Everything free goes to the best running trial (by `metric`); the others keep
    what they hold (Ray Tune's class).

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
        self._scheduler: TrialScheduler | None = None

    def __call__(
        self, cluster: Cluster, trial: Trial, result: dict[str, Any], scheduler: TrialScheduler
    ) -> PlacementGroupFactory | None:
        self._scheduler = scheduler
        return super().__call__(cluster, trial, result, scheduler)

    def _new_steps(
        self,
        trial: Trial,
        live: list[Trial],
        base: Mapping[str, float],
        step: Mapping[str, float],
        total: Mapping[str, float],
        change: int,
    ) -> int:
        held = _steps_of(trial, base, step)
        ranked = sorted(live, key=self._ranking(), reverse=True)
        if self.increase_by_times > 0:  # the best one that may still grow
            room = [t for t in ranked if _steps_of(t, base, step) < self.increase_by_times]
            ranked = room or ranked
        if ranked[0].trial_id != trial.trial_id and change >= 0:
            return held  # not the top job: keeps what it has
        return held + change

    def _ranking(self) -> Any:
        scheduler = self._scheduler
        metric = self.metric or (scheduler.metric if scheduler else None)
        mode = self.mode or (scheduler.mode if scheduler else None)
        if not isinstance(metric, str) or mode not in ("min", "max"):
            raise ValueError(
                "DistributeResourcesToTopJob needs metric and mode: give them to it, to the "
                "base scheduler or to TuneConfig"
            )
        sign = 1.0 if mode == "max" else -1.0

        def score(t: Trial) -> float:
            value = metric_value(t.last_result or {}, metric)
            return -math.inf if value is None else sign * value

        return score


def _fits(amounts: Mapping[str, float], step: Mapping[str, float]) -> int:
    """How many whole steps `amounts` hold (negative when amounts are short)."""
    counts = [math.floor(amounts[r] / step[r] + _EPS) for r in _SCALED if step.get(r, 0.0) > 0]
    return min(counts) if counts else 0


def _steps_of(trial: Trial, base: Mapping[str, float], step: Mapping[str, float]) -> int:
    """How many steps above its base the trial holds now."""
    extra = {r: trial.resources.get(r, 0.0) - base.get(r, 0.0) for r in _SCALED}
    return max(0, _fits(extra, step))
