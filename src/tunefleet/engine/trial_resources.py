"""Each trial's resources, when they follow from its config.

`tune.with_resources(trainable, lambda config: ...)` and a class's own
`default_resource_request(config)` are asked once per trial, with its config, as in
Ray Tune. What they return is checked as the static form of `with_resources` is, and a
trial that no machine could ever hold is refused before it is recorded, with an error
naming it (it would wait forever otherwise). Trials whose resources are the same for
all (the common case) never come here: the experiment's `resources` are copied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tunefleet.resources import PlacementGroupFactory, normalize_resources
from tunefleet.trainable import Trainable, resource_request, resources_of, unwrap


def per_trial_resources(
    trainable: Any, unfit_reason: Callable[[dict[str, float]], str | None]
) -> TrialResources | None:
    """Each trial's resources from its config, if `with_resources` was given a function
    or the class asks (`default_resource_request`); None: all trials' are the same.

    `unfit_reason`: the backend's (why resources can never fit, or None).
    """
    request = resource_request(trainable)
    if request is None:
        return None
    inner = unwrap(trainable)[0]
    where = "the resources function given to tune.with_resources"
    own = isinstance(inner, type) and issubclass(inner, Trainable)
    if own and request == inner.default_resource_request:  # not with_resources'
        where = f"{inner.__name__}.default_resource_request(config)"
    return TrialResources(request, resources_of(trainable), unfit_reason, where)


class TrialResources:
    """The resources (and bundles, if a `PlacementGroupFactory` says) of each new trial.

    Args:
        request: the function of a trial's config (`trainable.resource_request`).
        default: what a trial gets when `request` returns None (one CPU).
        unfit_reason: the backend's: why resources can never fit, or None.
        where: how the user wrote `request`, for errors.
    """

    def __init__(
        self,
        request: Callable[[dict[str, Any]], Any],
        default: dict[str, float],
        unfit_reason: Callable[[dict[str, float]], str | None],
        where: str,
    ) -> None:
        self._request = request
        self._default = default
        self._unfit_reason = unfit_reason
        self._where = where
        self._placements: dict[str, PlacementGroupFactory] = {}

    def of(self, trial_id: str, config: dict[str, Any]) -> dict[str, float]:
        """The resources of the new trial `trial_id` with `config`; an error if they are
        not valid or can never fit."""
        resources, placement = self._ask(trial_id, config)
        unfit = self._unfit_reason(resources)
        if unfit is not None:
            raise ValueError(
                f"Trial {trial_id} (config {config!r}) can never run on this machine: "
                f"{self._where} gave it {_shown(resources, placement)}, and it {unfit}. "
                "Ask for less, or declare the machine's resources with "
                "RunConfig(resources={...})"
            )
        if placement is not None:
            self._placements[trial_id] = placement
        return resources

    def placement(self, trial_id: str, config: dict[str, Any]) -> PlacementGroupFactory | None:
        """The bundles the trial was given, if a `PlacementGroupFactory` (asked again for
        a trial of an earlier driver, resumed)."""
        if trial_id not in self._placements:
            placement = self._ask(trial_id, config)[1]
            if placement is None:
                return None
            self._placements[trial_id] = placement
        return self._placements[trial_id]

    def _ask(
        self, trial_id: str, config: dict[str, Any]
    ) -> tuple[dict[str, float], PlacementGroupFactory | None]:
        who = f"{self._where} for trial {trial_id} (config {config!r})"
        try:
            given = self._request(config)
        except Exception as exc:
            raise ValueError(f"{who} raised {exc!r}") from exc
        if given is None:
            return dict(self._default), None
        if isinstance(given, PlacementGroupFactory):
            return given.totals(), given
        if isinstance(given, dict):
            try:
                return normalize_resources(given, "resources", gpu_auto=True), None
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{who} returned {given!r}: {exc}") from exc
        raise TypeError(
            f"{who} returned {given!r}: return a dict such as {{'cpu': 1, 'gpu': 0}} "
            "(Ray's names {'CPU': 1, 'GPU': 0} too), a tune.PlacementGroupFactory, or None"
        )


def _shown(resources: dict[str, float], placement: PlacementGroupFactory | None) -> str:
    return repr(placement) if placement is not None else repr(resources)
