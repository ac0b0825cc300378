"""Trainables: the class API, and the wrappers `with_resources` / `with_parameters`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from tunefleet.resources import PlacementGroupFactory, normalize_resources


class Trainable:
    """Class API for trainables (Ray Tune's names).

    Subclass it and implement `setup`, `step`, and for checkpoints `save_checkpoint`
    and `load_checkpoint`. tunefleet calls `step()` once per iteration and reports
    the dict it returns; return ``{"done": True, ...}`` to finish.

    Example:
        >>> class MyTrainable(Trainable):  # doctest: +SKIP
        ...     def setup(self, config):
        ...         self.x = config["x"]
        ...     def step(self):
        ...         self.x *= 0.9
        ...         return {"loss": self.x}
    """

    def __init__(self, config: dict[str, Any] | None = None, **params: Any) -> None:
        self.config = dict(config or {})
        self.setup(self.config, **params)

    def setup(self, config: dict[str, Any], **params: Any) -> None:
        """Build the model, data, etc. `params` come from `tune.with_parameters`."""

    def step(self) -> dict[str, Any]:
        """Run one iteration and return its metrics."""
        raise NotImplementedError(f"{type(self).__name__} must implement step()")

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any] | None:
        """Write the state into `checkpoint_dir` (may return a small dict, saved too)."""
        return None

    def load_checkpoint(self, checkpoint: dict[str, Any] | str | None) -> None:
        """Restore the state from the checkpoint directory (or the dict saved with it)."""

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Reconfigure for a new trial without rebuilding; return True if done."""
        return False

    def cleanup(self) -> None:
        """Release resources at the end of the trial."""


TrainableLike = Callable[..., Any] | type[Trainable]


class _WithResources:
    """A trainable and the resources each of its trials needs (and its bundles, if any)."""

    def __init__(
        self,
        trainable: TrainableLike,
        resources: dict[str, float],
        placement: PlacementGroupFactory | None = None,
    ) -> None:
        self.trainable = trainable
        self.resources = resources
        self.placement = placement
        functools.update_wrapper(self, trainable, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.trainable(*args, **kwargs)


class _WithParameters:
    """A trainable and large objects passed to it once per worker process."""

    def __init__(self, trainable: TrainableLike, params: dict[str, Any]) -> None:
        self.trainable = trainable
        self.params = params
        functools.update_wrapper(self, trainable, updated=())

    def __call__(self, config: dict[str, Any]) -> Any:
        return self.trainable(config, **self.params)

    def __reduce__(self) -> tuple[Any, ...]:
        # Large parameters go by reference when a backend asks (_params_ref.spill_to).
        from tunefleet._params_ref import reference

        return (_rebuild_with_parameters, (self.trainable, reference(self.params)))


def _rebuild_with_parameters(trainable: TrainableLike, params: Any) -> _WithParameters:
    """A `_WithParameters` unpickled in a worker: the parameters loaded once per process."""
    from tunefleet._params_ref import resolve

    return _WithParameters(trainable, resolve(params))


def with_resources(
    trainable: TrainableLike, resources: dict[str, Any] | PlacementGroupFactory
) -> Any:
    """Declare what each trial of `trainable` needs: cpu, gpu (fractions share one), memory,
    custom resources; or a `tune.PlacementGroupFactory` of bundles (multi-worker trials).

    Example:
        >>> tune.with_resources(train, {"cpu": 2, "gpu": 0.5, "memory": "4GB"})  # doctest: +SKIP
    """
    if isinstance(resources, PlacementGroupFactory):
        _check_trainable(trainable, "tune.with_resources")
        return _WithResources(trainable, resources.totals(), resources)
    if callable(resources) and not isinstance(resources, dict):
        raise TypeError(
            "tune.with_resources: resources as a function of the config are not supported; "
            "pass a dict such as {'cpu': 1, 'gpu': 0}"
        )
    _check_trainable(trainable, "tune.with_resources")
    return _WithResources(trainable, normalize_resources(resources, "with_resources(resources)"))


def with_parameters(trainable: TrainableLike, **params: Any) -> Any:
    """Pass large objects (datasets, ...) to the trainable once per worker, not per trial.

    The function is called as ``trainable(config, **params)``; a `Trainable` class
    receives them in ``setup(config, **params)``.
    """
    _check_trainable(trainable, "tune.with_parameters")
    return _WithParameters(trainable, params)  # none given: the same trainable, as in Ray


def _check_trainable(trainable: Any, where: str) -> None:
    if not callable(trainable):
        raise TypeError(
            f"{where}: the trainable must be a function taking config or a tune.Trainable "
            f"subclass, not {type(trainable).__name__}"
        )


def unwrap(trainable: Any) -> tuple[Any, dict[str, float] | None, dict[str, Any]]:
    """Split wrappers: (inner trainable, resources or None, params)."""
    resources: dict[str, float] | None = None
    params: dict[str, Any] = {}
    while isinstance(trainable, (_WithResources, _WithParameters)):
        if isinstance(trainable, _WithResources):
            resources = resources or trainable.resources
        else:
            params = {**trainable.params, **params}
        trainable = trainable.trainable
    return trainable, resources, params


def placement_of(trainable: Any) -> PlacementGroupFactory | None:
    """The `PlacementGroupFactory` given to `with_resources`, if any."""
    while isinstance(trainable, (_WithResources, _WithParameters)):
        if isinstance(trainable, _WithResources):
            return trainable.placement
        trainable = trainable.trainable
    return None


def trainable_name(trainable: Any) -> str:
    inner, _, _ = unwrap(trainable)
    name = getattr(inner, "__name__", None) or type(inner).__name__
    return str(name)


def validate_trainable(trainable: Any) -> None:
    """Reject what cannot be trained, before anything runs."""
    inner, _, _ = unwrap(trainable)
    if isinstance(inner, str):
        raise TypeError(
            f"trainable={inner!r}: registered trainable names are not supported; "
            "pass the function or the tune.Trainable subclass itself"
        )
    if inspect.isclass(inner):
        if not issubclass(inner, Trainable):
            raise TypeError(
                f"trainable={inner.__name__}: a class trainable must subclass tune.Trainable"
            )
        return
    if not callable(inner):
        raise TypeError(
            "the trainable must be a function taking config or a tune.Trainable subclass, "
            f"not {type(inner).__name__}"
        )


def resources_of(trainable: Any) -> dict[str, float]:
    """The resources one trial of `trainable` asks for (1 CPU unless `with_resources` said)."""
    _, resources, _ = unwrap(trainable)
    return dict(resources) if resources else {"cpu": 1.0, "gpu": 0.0}


__all__ = [
    "Trainable",
    "with_parameters",
    "with_resources",
]
