"""Ray Tune's `tune.Experiment` (one experiment's specification) and
`tune.run_experiments` (run several, return all their trials); each experiment runs
through `tune.run`."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import difflib
import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tunefleet._error import TuneError
from tunefleet._registry import RunSpec, register_trainable, resolve_trainable
from tunefleet._run_args import REFUSED_RUN_ARGS, legacy_checkpoint_config
from tunefleet.config import (
    CheckpointConfig,
    FailureConfig,
    RunConfig,
    SyncConfig,
    TuneConfig,
    trial_log_files,
)
from tunefleet.trainable import trainable_name, unwrap, validate_trainable, with_resources
from tunefleet.trial import TrialStatus

if TYPE_CHECKING:
    from tunefleet.trial import Trial

# tune.run's older checkpoint arguments, also taken in an experiment's spec (Ray Tune
# 1.x specs hold them; they fill in checkpoint_config).
_LEGACY_CHECKPOINT_KEYS = (
    "checkpoint_freq",
    "checkpoint_at_end",
    "keep_checkpoints_num",
    "checkpoint_score_attr",
)


class Experiment(RunSpec):
    """One experiment's specification (Ray Tune's `tune.Experiment`), run by
    `tune.run_experiments`. The arguments mean what `tune.run`'s do.

    Args:
        name: the experiment's name (its directory under `storage_path`); empty: the
            trainable's name.
        run: the trainable: a function taking config, a `tune.Trainable` subclass, or a
            name given to `tune.register_trainable`.
        stop, time_budget_s, config, resources_per_trial, num_samples, storage_path,
        storage_filesystem, sync_config, checkpoint_config, trial_name_creator,
        trial_dirname_creator, log_to_file, max_failures: as in `tune.run`;
            `sync_config` and `checkpoint_config` may be dicts of their fields.
        local_dir: `storage_path`'s deprecated name.
        checkpoint_freq, checkpoint_at_end, keep_checkpoints_num, checkpoint_score_attr:
            tune.run's older checkpoint arguments, folded into `checkpoint_config`.
        export_formats, restore: refused (non-empty), as in `tune.run`, with what to
            write instead.

    Raises:
        TuneError: `run` is a name nothing was registered under.
        TypeError, ValueError: an argument is not valid (the message names it).

    Example:
        >>> exp = tune.Experiment(  # doctest: +SKIP
        ...     "my_exp", train, config={"lr": tune.uniform(0, 1)}, num_samples=4
        ... )
        >>> trials = tune.run_experiments(exp)  # doctest: +SKIP
    """

    # The keys `public_spec` holds, as in Ray Tune.
    PUBLIC_KEYS = frozenset({"stop", "num_samples", "time_budget_s"})

    def __init__(
        self,
        name: str | None,
        run: Any,
        *,
        stop: Any = None,
        time_budget_s: float | datetime.timedelta | None = None,
        config: dict[str, Any] | None = None,
        resources_per_trial: Any = None,
        num_samples: int = 1,
        storage_path: str | None = None,
        storage_filesystem: Any = None,
        sync_config: SyncConfig | dict[str, Any] | None = None,
        checkpoint_config: CheckpointConfig | dict[str, Any] | None = None,
        trial_name_creator: Any = None,
        trial_dirname_creator: Any = None,
        log_to_file: Any = False,
        export_formats: Sequence[str] | None = None,
        max_failures: int = 0,
        restore: str | None = None,
        local_dir: str | None = None,
        checkpoint_freq: int = 0,
        checkpoint_at_end: bool = False,
        keep_checkpoints_num: int | None = None,
        checkpoint_score_attr: str | None = None,
    ) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"tune.Experiment(name={name!r}): the name must be a string")
        if export_formats:
            raise ValueError(
                f"tune.Experiment(export_formats={export_formats!r}): "
                + REFUSED_RUN_ARGS["export_formats"]
            )
        if restore is not None:
            raise ValueError(
                f"tune.Experiment(restore={restore!r}): " + REFUSED_RUN_ARGS["restore"]
            )
        if config is not None and not isinstance(config, dict):
            raise TypeError(
                f"tune.Experiment(config=...) takes a dict of names to values or search-space "
                f"domains, not {type(config).__name__}"
            )
        if local_dir is not None and storage_path is not None and local_dir != storage_path:
            raise ValueError(
                f"tune.Experiment(): local_dir={local_dir!r} and storage_path={storage_path!r} "
                "disagree; give storage_path only (local_dir is its deprecated name)"
            )
        self._trainable = resolve_trainable(run, "tune.Experiment(run=...)")
        validate_trainable(self._trainable)
        self._run_identifier = run if isinstance(run, str) else trainable_name(run)
        self.name = name or self._run_identifier
        self._explicit_name = bool(name) or isinstance(run, str)
        if isinstance(time_budget_s, datetime.timedelta):
            time_budget_s = time_budget_s.total_seconds()
        checkpoints = legacy_checkpoint_config(
            _config_of(CheckpointConfig, checkpoint_config, "checkpoint_config"),
            checkpoint_freq=checkpoint_freq,
            checkpoint_at_end=checkpoint_at_end,
            keep_checkpoints_num=keep_checkpoints_num,
            checkpoint_score_attr=checkpoint_score_attr,
        )
        sync = _config_of(SyncConfig, sync_config, "sync_config") or SyncConfig()
        trial_log_files(log_to_file, "tune.Experiment(log_to_file)")
        if resources_per_trial is not None:
            with_resources(unwrap(self._trainable)[0], resources_per_trial)  # checks them
        _check_configs(
            self._trainable,
            num_samples,
            time_budget_s,
            stop,
            checkpoints,
            max_failures,
            trial_name_creator,
            trial_dirname_creator,
        )
        self.spec: dict[str, Any] = {
            "run": self._run_identifier,
            "stop": stop,
            "time_budget_s": time_budget_s,
            "config": config if config is not None else {},
            "resources_per_trial": resources_per_trial,
            "num_samples": num_samples,
            "storage_path": storage_path or local_dir,
            "storage_filesystem": storage_filesystem,
            "sync_config": sync,
            "checkpoint_config": checkpoints,
            "trial_name_creator": trial_name_creator,
            "trial_dirname_creator": trial_dirname_creator,
            "log_to_file": log_to_file,
            "export_formats": [],
            "max_failures": max_failures,
            "restore": None,
        }

    @classmethod
    def from_json(cls, name: str, spec: Mapping[str, Any]) -> Experiment:
        """An `Experiment` from a spec dict such as ``{"run": train, "stop": {...}}`` (the
        values of `run_experiments`' dict form); the dict is not changed. An ``"env"`` key
        is moved into the config, as Ray Tune does for RLlib.

        Raises:
            TuneError: the spec has no ``"run"``, or a key `Experiment` does not take.
        """
        if not isinstance(spec, Mapping):
            raise TuneError(
                f"experiment {name!r}: its spec must be a dict such as {{'run': train, "
                f"'config': {{...}}}}, not {type(spec).__name__}"
            )
        if "run" not in spec:
            raise TuneError(
                f"experiment {name!r}: no trainable specified; its spec needs a 'run' key "
                f"(a function, a tune.Trainable subclass or a registered name); keys: "
                f"{sorted(spec)}"
            )
        given = dict(spec)
        if "env" in given:
            given["config"] = {**(given.get("config") or {}), "env": given.pop("env")}
        known = [p for p in inspect.signature(cls).parameters if p not in ("name", "run")]
        unknown = sorted(set(given) - set(known) - {"run"})
        if unknown:
            close = difflib.get_close_matches(unknown[0], known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TuneError(
                f"experiment {name!r}: unknown spec key {unknown[0]!r}{hint} "
                f"(known: run, {', '.join(known)})"
            )
        run = given.pop("run")
        return cls(name, run, **given)

    @classmethod
    def get_trainable_name(cls, run_object: Any) -> str:
        """The name a trainable's trials take: a registered name as it is, else the
        function's or class's name."""
        if isinstance(run_object, str):
            return run_object
        validate_trainable(run_object)
        return trainable_name(run_object)

    @classmethod
    def register_if_needed(cls, run_object: Any) -> str:
        """Register `run_object` under its name unless it is a name already; return the name."""
        if isinstance(run_object, str):
            return run_object
        name = cls.get_trainable_name(run_object)
        register_trainable(name, run_object)
        return name

    @property
    def run_identifier(self) -> str:
        """The trainable's name (the registered name, or the function's or class's)."""
        return self._run_identifier

    @property
    def public_spec(self) -> dict[str, Any]:
        """The spec's `PUBLIC_KEYS` (stop, num_samples, time_budget_s)."""
        return {key: self.spec[key] for key in sorted(self.PUBLIC_KEYS)}

    @property
    def checkpoint_config(self) -> CheckpointConfig:
        return self.spec["checkpoint_config"]  # type: ignore[no-any-return]

    @property
    def stopper(self) -> Any:
        """The `stop` given (a dict, a `Stopper`, a function, a list of stoppers, or None)."""
        return self.spec["stop"]

    @property
    def storage_path(self) -> str | None:
        return self.spec["storage_path"]  # type: ignore[no-any-return]

    @property
    def local_dir(self) -> str | None:
        """`storage_path`'s deprecated name."""
        return self.storage_path

    def run_kwargs(self) -> dict[str, Any]:
        """`tune.run`'s keyword arguments for this experiment (its trainable apart)."""
        spec = self.spec
        return {
            "name": self.name if self._explicit_name else None,
            **{
                key: spec[key]
                for key in (
                    "config",
                    "num_samples",
                    "resources_per_trial",
                    "stop",
                    "time_budget_s",
                    "storage_path",
                    "storage_filesystem",
                    "checkpoint_config",
                    "sync_config",
                    "trial_name_creator",
                    "trial_dirname_creator",
                    "log_to_file",
                    "max_failures",
                )
            },
        }

    def __repr__(self) -> str:
        return f"Experiment(name={self.name!r}, run={self._run_identifier!r})"


def _config_of(kind: type[Any], value: Any, argument: str) -> Any:
    """`value` as a `kind` (a dict of its fields becomes one), or None."""
    if value is None or isinstance(value, kind):
        return value
    if isinstance(value, dict):
        fields = {f.name for f in dataclasses.fields(kind)}
        unknown = sorted(set(value) - fields)
        if unknown:
            raise TypeError(
                f"tune.Experiment({argument}={value!r}): unknown field {unknown[0]!r} "
                f"(known: {', '.join(sorted(fields))})"
            )
        return kind(**value)
    raise TypeError(
        f"tune.Experiment({argument}=...) takes a tune.{kind.__name__} or a dict of its "
        f"fields, not {type(value).__name__}"
    )


def _check_configs(
    trainable: Any,
    num_samples: Any,
    time_budget_s: Any,
    stop: Any,
    checkpoints: CheckpointConfig,
    max_failures: Any,
    name_creator: Any,
    dirname_creator: Any,
) -> None:
    """What tune.run would refuse, refused when the experiment is made."""
    from tunefleet.tuner import _check_checkpoint_config

    TuneConfig(
        num_samples=num_samples,
        time_budget_s=time_budget_s,
        trial_name_creator=name_creator,
        trial_dirname_creator=dirname_creator,
    ).validate()
    RunConfig(
        stop=stop,
        checkpoint_config=checkpoints,
        failure_config=FailureConfig(max_failures=max_failures),
    ).validate()
    _check_checkpoint_config(trainable, checkpoints)


def experiment_list(experiments: Any) -> list[Experiment]:
    """`run_experiments`' argument as a list: an `Experiment`, a list of them, or a dict
    of names to spec dicts (or to `Experiment`s)."""
    if isinstance(experiments, Experiment):
        return [experiments]
    if isinstance(experiments, Mapping):
        return [
            spec if isinstance(spec, Experiment) else Experiment.from_json(name, spec)
            for name, spec in experiments.items()
        ]
    if isinstance(experiments, (list, tuple)):
        out = []
        for i, item in enumerate(experiments):
            if not isinstance(item, Experiment):
                raise TuneError(
                    f"run_experiments(experiments[{i}]={item!r}): a list holds "
                    f"tune.Experiment objects, not {type(item).__name__}; give a dict of "
                    "names to spec dicts instead"
                )
            out.append(item)
        return out
    raise TuneError(
        f"run_experiments(experiments={experiments!r}): give a tune.Experiment, a list of "
        f"them, or a dict of names to spec dicts, not {type(experiments).__name__}"
    )


def run_experiments(
    experiments: Any,
    scheduler: Any = None,
    verbose: int | None = None,
    progress_reporter: Any = None,
    resume: bool | str | None = False,
    reuse_actors: bool | None = None,
    raise_on_failed_trial: bool = True,
    concurrent: bool = True,
    callbacks: list[Any] | None = None,
    **unknown: Any,
) -> list[Trial]:
    """Run experiments and return all their trials (Ray Tune's `tune.run_experiments`).

    `experiments`: a `tune.Experiment`, a list of them, or a dict of names to spec dicts
    (``{"exp": {"run": train, "config": {...}, "stop": {...}}}``). Each experiment runs
    through `tune.run` with its spec and the arguments here, one after another (Ray Tune
    runs them side by side unless ``concurrent=False``); the trials come back in that
    order. `scheduler` is copied for each experiment after the first, so none starts
    with another's state.

    Raises:
        TuneError: trials failed and `raise_on_failed_trial` is True (after every
            experiment ran), or `experiments` is not one of the forms above.

    Example:
        >>> tune.register_trainable("f1", train)  # doctest: +SKIP
        >>> specs = {"foo": {"run": "f1"}, "bar": {"run": "f1", "config": {"lr": 0.1}}}
        >>> trials = tune.run_experiments(specs)  # doctest: +SKIP
    """
    from tunefleet.tuner import run

    if unknown:
        key = sorted(unknown)[0]
        if key == "resume_config":
            raise ValueError(f"run_experiments(): {REFUSED_RUN_ARGS['resume_config']}")
        raise TypeError(
            f"run_experiments() got an unknown keyword argument {key!r} (known: experiments, "
            "scheduler, verbose, progress_reporter, resume, reuse_actors, "
            "raise_on_failed_trial, concurrent, callbacks)"
        )
    if not isinstance(concurrent, bool):
        raise TypeError(f"run_experiments(concurrent={concurrent!r}): give True or False")
    trials: list[Trial] = []
    failed: list[str] = []
    for index, experiment in enumerate(experiment_list(experiments)):
        analysis = run(
            experiment._trainable,
            **experiment.run_kwargs(),
            scheduler=scheduler if index == 0 or scheduler is None else copy.deepcopy(scheduler),
            verbose=verbose,
            progress_reporter=progress_reporter,
            resume=resume,
            reuse_actors=reuse_actors,
            raise_on_failed_trial=False,
            callbacks=callbacks,
        )
        trials.extend(analysis.trials)
        failed.extend(
            f"{t.trial_id} of {experiment.name!r}"
            for t in analysis.trials
            if t.status == TrialStatus.ERROR
        )
        del analysis
    if raise_on_failed_trial and failed:
        raise TuneError(
            f"{len(failed)} trial(s) failed: {', '.join(failed[:5])}; pass "
            "raise_on_failed_trial=False to get the trials"
        )
    return trials


__all__ = ["Experiment", "experiment_list", "run_experiments"]
