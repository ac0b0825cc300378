"""Trainables by name: Ray Tune's `tune.register_trainable`, and the names resolved
wherever a trainable is given (`Tuner`, `tune.run`, `tune.Experiment`)."""

from __future__ import annotations

import inspect
import logging
from typing import Any

from tunefleet._error import TuneError
from tunefleet.trainable import Trainable, _Registered, unwrap

logger = logging.getLogger("tunefleet")

_TRAINABLES: dict[str, Any] = {}  # name -> the function or Trainable subclass (this process)


class RunSpec:
    """The base of `tune.Experiment`: a whole experiment, which `tune.run` refuses as a
    trainable (it points to `tune.run_experiments`)."""


def register_trainable(name: str, trainable: Any, warn: bool = True) -> None:
    """Give `trainable` (a function taking config, or a `tune.Trainable` subclass, possibly
    wrapped by `tune.with_resources` / `tune.with_parameters`) a name that stands for it
    wherever a trainable is given: ``tune.Tuner("name")``, ``tune.run("name")``,
    ``tune.Experiment(..., run="name")``. Registering a name again replaces it, as in Ray
    Tune. Its trials are named after the name (``name_<trial id>``).

    `warn` is accepted for Ray Tune's signature (Ray warns there about function
    signatures; tunefleet checks them when the trial starts).

    Raises:
        TypeError: `name` is not a non-empty string, or `trainable` is neither a function
            nor a `tune.Trainable` subclass.

    Example:
        >>> tune.register_trainable("my_trainable", train)  # doctest: +SKIP
        >>> tune.Tuner("my_trainable", param_space={"lr": 0.1}).fit()  # doctest: +SKIP
    """
    if not isinstance(name, str) or not name.strip():
        raise TypeError(
            f"tune.register_trainable(name={name!r}): the name must be a non-empty string"
        )
    if not isinstance(warn, bool):
        raise TypeError(f"tune.register_trainable(warn={warn!r}): give True or False")
    inner = unwrap(trainable)[0]
    if isinstance(inner, str) or not callable(inner):
        raise TypeError(
            f"tune.register_trainable({name!r}, trainable={trainable!r}): the trainable must "
            f"be a function taking config or a tune.Trainable subclass, not "
            f"{type(inner).__name__}"
        )
    if inspect.isclass(inner) and not issubclass(inner, Trainable):
        raise TypeError(
            f"tune.register_trainable({name!r}, trainable={inner.__name__}): a class "
            "trainable must subclass tune.Trainable"
        )
    if name in _TRAINABLES and _TRAINABLES[name] is not trainable:
        logger.debug("tune.register_trainable: %r now names %r", name, trainable)
    _TRAINABLES[name] = trainable


def registered_names() -> list[str]:
    """The names registered in this process, sorted."""
    return sorted(_TRAINABLES)


def resolve_trainable(trainable: Any, where: str) -> Any:
    """`trainable` itself, or for a registered name what it names (trials take the name).

    Raises:
        TuneError: `trainable` is a name nothing was registered under (`where` names the
            argument in the message, which lists the registered names).
    """
    if not isinstance(trainable, str):
        if isinstance(trainable, RunSpec) or (
            isinstance(trainable, list) and any(isinstance(e, RunSpec) for e in trainable)
        ):
            raise TypeError(
                f"{where}: got {trainable!r}; run tune.Experiment objects with "
                "tune.run_experiments(experiments), which returns their trials"
            )
        return trainable
    found = _TRAINABLES.get(trainable)
    if found is None:
        known = ", ".join(repr(n) for n in registered_names()) or "none"
        raise TuneError(
            f"{where}: unknown trainable name {trainable!r}; register it first with "
            f"tune.register_trainable({trainable!r}, trainable), or pass the function or "
            f"tune.Trainable subclass itself (registered names: {known})"
        )
    return _Registered(found, trainable)
