"""`Tuner` and the legacy `run()`: check everything, build the parts, run the controller."""

from __future__ import annotations

import datetime
import difflib
import logging
import os
import secrets
from pathlib import Path
from typing import Any

from tunefleet.config import CheckpointConfig, FailureConfig, RunConfig, TuneConfig
from tunefleet.trainable import trainable_name, unwrap, validate_trainable, with_resources

logger = logging.getLogger("tunefleet")


class TuneError(Exception):
    """An experiment-level failure (e.g. trials failed and raise_on_failed_trial=True)."""


class Tuner:
    """Tune a trainable over a search space (Ray Tune's `Tuner`).

    Args:
        trainable: a function ``f(config)`` that calls `tune.report`, or a
            `tune.Trainable` subclass; wrap it with `tune.with_resources` /
            `tune.with_parameters` as needed.
        param_space: the search space: a dict of constants and search-space
            domains (`tune.uniform`, `tune.choice`, `tune.grid_search`, ...).
        tune_config: metric, mode, search algorithm, scheduler, num_samples, ...
        run_config: name, storage, stop conditions, callbacks, checkpoints, failures.

    Example:
        >>> tuner = tune.Tuner(train, param_space={"lr": tune.loguniform(1e-4, 1e-1)},
        ...     tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=20))
        >>> results = tuner.fit()  # doctest: +SKIP
        >>> results.get_best_result().config  # doctest: +SKIP
    """

    def __init__(
        self,
        trainable: Any,
        *,
        param_space: dict[str, Any] | None = None,
        tune_config: TuneConfig | None = None,
        run_config: RunConfig | None = None,
    ) -> None:
        validate_trainable(trainable)
        self.trainable = trainable
        self.param_space = param_space if param_space is not None else {}
        if not isinstance(self.param_space, dict):
            raise TypeError(
                f"param_space must be a dict of names to values or search-space domains, "
                f"not {type(self.param_space).__name__}"
            )
        self.tune_config = tune_config or TuneConfig()
        self.run_config = run_config or RunConfig()
        if not isinstance(self.tune_config, TuneConfig):
            raise TypeError("tune_config must be a tune.TuneConfig")
        if not isinstance(self.run_config, RunConfig):
            raise TypeError("run_config must be a tune.RunConfig")
        self.tune_config.validate()
        self.run_config.validate()
        from tunefleet.space import validate_space

        validate_space(self.param_space)

    def fit(self) -> Any:
        """Run the experiment to its end and return a `ResultGrid`."""
        from tunefleet._experiment import run_experiment

        path = run_experiment(self.trainable, self.param_space, self.tune_config, self.run_config)
        from tunefleet.results import ResultGrid

        return ResultGrid(path, metric=self.tune_config.metric, mode=self.tune_config.mode)

    @classmethod
    def restore(cls, path: str | os.PathLike[str], trainable: Any, **kwargs: Any) -> Tuner:
        """Resume an interrupted experiment (comes with the reliability work)."""
        raise NotImplementedError(
            f"Tuner.restore({os.fspath(path)!r}): resuming is not available in this version; "
            "the experiment's results are stored there and readable with "
            "tune.ResultGrid / `tunefleet show`"
        )


_RUN_ARGS = (
    "config",
    "num_samples",
    "resources_per_trial",
    "stop",
    "metric",
    "mode",
    "search_alg",
    "scheduler",
    "local_dir",
    "storage_path",
    "name",
    "max_concurrent_trials",
    "fail_fast",
    "max_failures",
    "reuse_actors",
    "checkpoint_freq",
    "checkpoint_at_end",
    "keep_checkpoints_num",
    "checkpoint_score_attr",
    "time_budget_s",
    "verbose",
    "callbacks",
    "raise_on_failed_trial",
    "trial_name_creator",
    "trial_dirname_creator",
)


def run(
    run_or_experiment: Any,
    *,
    config: dict[str, Any] | None = None,
    num_samples: int = 1,
    resources_per_trial: dict[str, Any] | None = None,
    stop: Any = None,
    metric: str | None = None,
    mode: str | None = None,
    search_alg: Any = None,
    scheduler: Any = None,
    local_dir: str | None = None,
    storage_path: str | None = None,
    name: str | None = None,
    max_concurrent_trials: int | None = None,
    fail_fast: bool | str = False,
    max_failures: int = 0,
    reuse_actors: bool = True,
    checkpoint_freq: int = 0,
    checkpoint_at_end: bool = False,
    keep_checkpoints_num: int | None = None,
    checkpoint_score_attr: str | None = None,
    time_budget_s: float | None = None,
    verbose: int = 1,
    callbacks: list[Any] | None = None,
    raise_on_failed_trial: bool = True,
    trial_name_creator: Any = None,
    trial_dirname_creator: Any = None,
    **unknown: Any,
) -> Any:
    """Ray Tune's legacy entry point; returns an `ExperimentAnalysis`.

    Unknown keyword arguments are an error (Ray Tune silently ignores some).
    """
    if unknown:
        key = sorted(unknown)[0]
        close = difflib.get_close_matches(key, _RUN_ARGS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise TypeError(
            f"tune.run() got an unknown keyword argument {key!r}{hint} "
            f"(known: {', '.join(_RUN_ARGS)})"
        )
    if local_dir is not None and storage_path is not None and local_dir != storage_path:
        raise ValueError(
            f"tune.run(): local_dir={local_dir!r} and storage_path={storage_path!r} disagree; "
            "give one of them"
        )
    score_order = "max"
    if checkpoint_score_attr is not None and checkpoint_score_attr.startswith("min-"):
        checkpoint_score_attr, score_order = checkpoint_score_attr[4:], "min"
    trainable = run_or_experiment
    if resources_per_trial is not None:
        trainable = with_resources(trainable, resources_per_trial)
    tuner = Tuner(
        trainable,
        param_space=config or {},
        tune_config=TuneConfig(
            metric=metric,
            mode=mode,
            search_alg=search_alg,
            scheduler=scheduler,
            num_samples=num_samples,
            max_concurrent_trials=max_concurrent_trials,
            time_budget_s=time_budget_s,
            reuse_actors=reuse_actors,
            trial_name_creator=trial_name_creator,
            trial_dirname_creator=trial_dirname_creator,
        ),
        run_config=RunConfig(
            name=name,
            storage_path=storage_path or local_dir,
            stop=stop,
            callbacks=callbacks,
            verbose=verbose,
            checkpoint_config=CheckpointConfig(
                num_to_keep=keep_checkpoints_num,
                checkpoint_score_attribute=checkpoint_score_attr,
                checkpoint_score_order=score_order,
                checkpoint_frequency=checkpoint_freq,
                checkpoint_at_end=checkpoint_at_end,
            ),
            failure_config=FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
        ),
    )
    grid = tuner.fit()
    from tunefleet.results import ExperimentAnalysis

    analysis = ExperimentAnalysis(grid.experiment_path, default_metric=metric, default_mode=mode)
    if raise_on_failed_trial and grid.num_errors:
        failed = ", ".join(f"{e.trial_id} ({e})" for e in grid.errors[:5])
        raise TuneError(
            f"{grid.num_errors} trial(s) failed: {failed}. Results are kept at "
            f"{grid.experiment_path}; pass raise_on_failed_trial=False to get them as an "
            "ExperimentAnalysis"
        )
    return analysis


def experiment_dir(storage_path: Any, name: str | None, trainable: Any) -> tuple[str, str]:
    """(name, path) of a new experiment; an existing one is never overwritten."""
    from tunefleet.store import default_storage_path

    root = Path(os.path.expanduser(os.fspath(storage_path))) if storage_path else None
    root = root or Path(default_storage_path())
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    chosen = name or f"{trainable_name(trainable)}_{stamp}"
    path = root / chosen
    if (path / "experiment.db").exists():
        new = f"{chosen}_{stamp}"
        n = 1
        while (root / new).exists():
            n += 1
            new = f"{chosen}_{stamp}_{n}"
        logger.warning(
            "An experiment named %r already exists at %s; this run is stored as %r",
            chosen,
            path,
            new,
        )
        chosen, path = new, root / new
    path.mkdir(parents=True, exist_ok=True)
    return chosen, str(path.resolve())


def new_id_prefix() -> str:
    return secrets.token_hex(3)[:5]


def resources_of(trainable: Any) -> dict[str, float]:
    _, resources, _ = unwrap(trainable)
    return dict(resources) if resources else {"cpu": 1.0, "gpu": 0.0}
