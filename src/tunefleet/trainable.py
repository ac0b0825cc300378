"""Trainables: the class API, and the wrappers `with_resources` / `with_parameters`."""

from __future__ import annotations

import copy
import datetime
import functools
import inspect
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from tunefleet import result as keys
from tunefleet.resources import PlacementGroupFactory, normalize_resources
from tunefleet.session import host_keys
from tunefleet.storage.checkpoint import read_dict_state, write_dict_state


class Trainable:
    """Class API for trainables (Ray Tune's `tune.Trainable`).

    Subclass it and implement `setup`, `step`, and for checkpoints `save_checkpoint`
    and `load_checkpoint`. tunefleet calls `train()` once per iteration, which calls
    `step()` and reports the dict it returns with the keys every result has; return
    ``{"done": True, ...}`` to finish.

    Inside `setup` and `step`: `self.config`, `self.iteration` (iterations done,
    counting from a restored checkpoint's; also `self.training_iteration`),
    `self.trial_id`, `self.trial_name`, `self.logdir` (the trial's directory) and
    `self.trial_resources`. Made outside a trial (``MyTrainable(config)``), it runs on
    its own: `train()`, `save()`, `restore(path)` and `stop()` work as in Ray Tune, and
    the trial's names are ``"default"``.

    Example:
        >>> class MyTrainable(Trainable):  # doctest: +SKIP
        ...     def setup(self, config):
        ...         self.x = config["x"]
        ...     def step(self):
        ...         self.x *= 0.9
        ...         return {"loss": self.x}
    """

    def __init__(self, config: dict[str, Any] | None = None, **params: Any) -> None:
        self.config: dict[str, Any] = config if config is not None else {}
        self._attach()
        self._logdir: str | None = None
        self.setup(copy.deepcopy(self.config), **params)  # a copy, as in Ray Tune

    # -- what subclasses implement ----------------------------------------------------------
    def setup(self, config: dict[str, Any], **params: Any) -> None:
        """Build the model, data, etc. `params` come from `tune.with_parameters`."""

    def step(self) -> dict[str, Any]:
        """Run one iteration and return its metrics."""
        raise NotImplementedError(f"{type(self).__name__} must implement step()")

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any] | None:
        """Write the state into `checkpoint_dir`, or return it as a dict (saved for you)."""
        return None

    def load_checkpoint(self, checkpoint: dict[str, Any] | str | None) -> None:
        """Restore the state: the dict `save_checkpoint` returned, else its directory."""

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Reconfigure for a new trial without rebuilding (``reuse_actors=True``); return
        True if done (False: a new instance is made)."""
        return False

    def cleanup(self) -> None:
        """Release resources when the instance is done with (not between reused trials)."""

    def log_result(self, result: dict[str, Any]) -> None:
        """Called by `train()` with each result (its automatic keys and ``config``
        included), in the trial's process: override it to log elsewhere. Does nothing."""

    @classmethod
    def default_resource_request(
        cls, config: dict[str, Any]
    ) -> PlacementGroupFactory | dict[str, Any] | None:
        """The resources a trial needs (None: one CPU), unless `tune.with_resources` says.

        Called for each trial with its config, as in Ray Tune: trials may differ.
        """
        return None

    # -- what a trial knows about itself --------------------------------------------------------
    @property
    def iteration(self) -> int:
        """Iterations done (``train()`` calls), counting from a restored checkpoint's."""
        return self._iteration

    @property
    def training_iteration(self) -> int:
        return self._iteration

    @property
    def trial_id(self) -> str:
        return self._context.trial_id if self._context else "default"

    @property
    def trial_name(self) -> str:
        return self._context.trial_name if self._context else "default"

    @property
    def trial_resources(self) -> Any:
        """The trial's resources (a `PlacementGroupFactory`), or None outside a trial."""
        return self._context.get_trial_resources() if self._context else None

    @property
    def logdir(self) -> str:
        """The trial's directory (outside a trial: a temporary one, made on first use)."""
        if self._context is not None:
            return self._context.trial_dir
        if self._logdir is None:
            self._logdir = tempfile.mkdtemp(prefix=f"{type(self).__name__}_")
        return self._logdir

    def get_config(self) -> dict[str, Any]:
        return self.config

    # -- driving it (tunefleet's trial loop does this; also usable by hand) -------------------
    def train(self) -> dict[str, Any]:
        """Run one iteration: `step()`, and its result with the keys every result has
        (``training_iteration``, ``done``, ``time_this_iter_s``, ``time_total_s``,
        ``trial_id``, ``timestamp``, ``date``, ``pid``, ``hostname``, ...)."""
        start = time.time()
        result = self.step()
        if not isinstance(result, dict):
            raise TypeError(
                f"{type(self).__name__}.step() must return a dict of metrics, "
                f"not {type(result).__name__}"
            )
        result = dict(result)
        self._iteration += 1
        self._iterations_since_restore += 1
        given = result.get(keys.TIME_THIS_ITER_S)
        this_iter = float(given) if isinstance(given, (int, float)) else time.time() - start
        self._time_total += this_iter
        self._time_since_restore += this_iter
        now = datetime.datetime.now()
        result.setdefault(keys.DONE, False)
        result.setdefault(keys.TRAINING_ITERATION, self._iteration)
        result.update(
            {
                keys.TRIAL_ID: self.trial_id,
                **host_keys(now.timestamp()),  # date, hostname, node_ip: one code for both kinds
                keys.TIMESTAMP: result.get(keys.TIMESTAMP) or int(now.timestamp()),
                keys.TIME_THIS_ITER_S: this_iter,
                keys.TIME_TOTAL_S: self._time_total,
                keys.PID: os.getpid(),
                keys.TIME_SINCE_RESTORE: self._time_since_restore,
                keys.ITERATIONS_SINCE_RESTORE: self._iterations_since_restore,
            }
        )
        if self._context is None:
            result["config"] = self.config  # in a trial the store keeps the config once
        if type(self).log_result is not Trainable.log_result:
            self.log_result({**result, "config": self.config})  # as Ray's train() does
        return result

    def save(self, checkpoint_dir: str | None = None) -> str:
        """Save a checkpoint into `checkpoint_dir` (a new temporary one if None); return it.

        Records the iteration and the total time too: `restore` takes them back, as Ray's.
        """
        directory = checkpoint_dir or tempfile.mkdtemp(prefix="checkpoint_", dir=self.logdir)
        os.makedirs(directory, exist_ok=True)
        self._save_to(directory)
        counters = {"iteration": self._iteration, "time_total": self._time_total}
        with open(os.path.join(directory, _COUNTERS), "w") as f:
            json.dump(counters, f)
        return directory

    def restore(self, checkpoint_path: Any) -> None:
        """Load a checkpoint `save()` made (a path or a `tune.Checkpoint`)."""
        path = getattr(checkpoint_path, "path", checkpoint_path)
        if not isinstance(path, str) or not os.path.isdir(path):
            raise ValueError(
                f"{type(self).__name__}.restore({checkpoint_path!r}): not a checkpoint "
                "directory; pass what save() returned"
            )
        self._load_from(path)
        # As Ray's: the counters are the checkpoint's; "since restore" ones start again.
        counters = os.path.join(path, _COUNTERS)
        if os.path.exists(counters):
            with open(counters) as f:
                saved = json.load(f)
            self._iteration, self._time_total = int(saved["iteration"]), saved["time_total"]
        self._time_since_restore, self._iterations_since_restore = 0.0, 0

    def stop(self) -> None:
        """End the instance: calls `cleanup()`."""
        self.cleanup()

    # -- tunefleet's side ---------------------------------------------------------------------
    def _attach(self) -> None:
        """Take the running trial's identity and counters (none outside a trial)."""
        from tunefleet import session as session_mod

        running = session_mod._session
        self._context = running.context if running is not None else None
        self._iteration = running.iteration if running is not None else 0
        self._time_total = running.time_total_before if running is not None else 0.0
        self._time_since_restore = 0.0
        self._iterations_since_restore = 0

    def _reset(self, new_config: dict[str, Any]) -> bool:
        """A reused instance for a new trial, as Ray Tune's `reset`: the new config and
        identity and counters first (so `self.trial_id` inside `reset_config` is the new
        trial's), then `reset_config`; False means a new instance is made instead."""
        self.config = new_config
        self._attach()
        return bool(self.reset_config(new_config))

    def _save_to(self, directory: str) -> None:
        returned = self.save_checkpoint(directory)
        if isinstance(returned, dict):
            write_dict_state(returned, directory)
        elif returned is not None and os.path.realpath(str(returned)) != os.path.realpath(
            directory
        ):
            raise ValueError(
                f"{type(self).__name__}.save_checkpoint() returned {returned!r}: return None "
                f"or a dict, or the directory it was given ({directory})"
            )

    def _load_from(self, directory: str) -> None:
        state = read_dict_state(directory)
        self.load_checkpoint(state if state is not None else directory)


_COUNTERS = ".tunefleet_counters.json"  # what save() by hand records for restore()


TrainableLike = Callable[..., Any] | type[Trainable]


class _WithResources:
    """A trainable and the resources each of its trials needs (and its bundles, if any),
    or the function of a trial's config that says (`per_config`; `resources` is then the
    default, one CPU)."""

    def __init__(
        self,
        trainable: TrainableLike,
        resources: dict[str, float],
        placement: PlacementGroupFactory | None = None,
        per_config: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.trainable = trainable
        self.resources = resources
        self.placement = placement
        self.per_config = per_config
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
    trainable: TrainableLike,
    resources: dict[str, Any] | PlacementGroupFactory | Callable[[dict[str, Any]], Any],
) -> Any:
    """Declare what each trial of `trainable` needs: cpu, gpu (fractions share one), memory,
    custom resources; or a `tune.PlacementGroupFactory` of bundles (multi-worker trials);
    or a function of the trial's config returning either (None: one CPU).

    Example:
        >>> tune.with_resources(train, {"cpu": 2, "gpu": 0.5, "memory": "4GB"})  # doctest: +SKIP
        >>> tune.with_resources(train, lambda config: {"gpu": config["gpus"]})  # doctest: +SKIP
    """
    if isinstance(resources, PlacementGroupFactory):
        _check_trainable(trainable, "tune.with_resources")
        return _WithResources(trainable, resources.totals(), resources)
    if callable(resources) and not isinstance(resources, dict):
        _check_trainable(trainable, "tune.with_resources")
        return _WithResources(trainable, {"cpu": 1.0, "gpu": 0.0}, per_config=resources)
    _check_trainable(trainable, "tune.with_resources")
    given = normalize_resources(resources, "with_resources(resources)", gpu_auto=True)
    return _WithResources(trainable, given)


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


class _Registered(_WithParameters):
    """A trainable given by the name `tune.register_trainable` gave it: its trials and
    its experiment are named after that name, as in Ray Tune."""

    def __init__(self, trainable: TrainableLike, name: str) -> None:
        super().__init__(trainable, {})
        self.registered_name = name


def trainable_name(trainable: Any) -> str:
    layer = trainable
    while isinstance(layer, (_WithResources, _WithParameters)):
        if isinstance(layer, _Registered):
            return layer.registered_name
        layer = layer.trainable
    inner, _, _ = unwrap(trainable)
    name = getattr(inner, "__name__", None) or type(inner).__name__
    return str(name)


def validate_trainable(trainable: Any) -> None:
    """Reject what cannot be trained, before anything runs."""
    inner, _, _ = unwrap(trainable)
    if isinstance(inner, str):
        raise TypeError(
            f"trainable={inner!r}: a trainable name is resolved by tune.Tuner, tune.run "
            "and tune.Experiment only; pass the function or the tune.Trainable subclass"
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


def resource_request(trainable: Any) -> Callable[[dict[str, Any]], Any] | None:
    """The function that gives each trial's resources from its config, when they depend on
    it: the one given to `tune.with_resources`, else the class's own
    `default_resource_request` (`with_resources` wins, as in Ray Tune). None: every trial
    asks for `resources_of(trainable)`."""
    while isinstance(trainable, (_WithResources, _WithParameters)):
        if isinstance(trainable, _WithResources):
            return trainable.per_config
        trainable = trainable.trainable
    if inspect.isclass(trainable) and issubclass(trainable, Trainable):
        own = (vars(c) for c in trainable.__mro__ if c is not Trainable)
        if any("default_resource_request" in names for names in own):
            return trainable.default_resource_request
    return None


def resources_of(trainable: Any) -> dict[str, float]:
    """The resources one trial of `trainable` asks for (1 CPU unless `with_resources` said)."""
    _, resources, _ = unwrap(trainable)
    return dict(resources) if resources else {"cpu": 1.0, "gpu": 0.0}


__all__ = [
    "Trainable",
    "with_parameters",
    "with_resources",
]
