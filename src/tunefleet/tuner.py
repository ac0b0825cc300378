"""`Tuner` and the legacy `run()`: check everything, build the parts, run the controller."""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunefleet.config import CheckpointConfig, FailureConfig, RunConfig, TuneConfig
from tunefleet.storage.paths import is_url
from tunefleet.trainable import validate_trainable, with_resources
from tunefleet.trial import Trial

if TYPE_CHECKING:  # loaded when used: `import tunefleet` stays light (no pandas)
    from tunefleet.engine.resume import ResumeState
    from tunefleet.results import ExperimentAnalysis, ResultGrid

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
        self._resume: ResumeState | None = None  # set by Tuner.restore
        self._resume_url: str | None = None  # Tuner.restore of an experiment in remote storage

    def fit(self) -> ResultGrid:
        """Run the experiment to its end (or continue a restored one); return a `ResultGrid`."""
        from tunefleet.engine.experiment import run_experiment

        resume, self._resume = self._resume, None  # a second fit() starts a new experiment
        url, self._resume_url = self._resume_url, None
        path = run_experiment(
            self.trainable, self.param_space, self.tune_config, self.run_config, resume, url
        )
        from tunefleet.results import ResultGrid

        return ResultGrid(path, metric=self.tune_config.metric, mode=self.tune_config.mode)

    @classmethod
    def restore(
        cls,
        path: str | os.PathLike[str],
        trainable: Any,
        *,
        resume_unfinished: bool = True,
        resume_errored: bool = False,
        restart_errored: bool = False,
        param_space: dict[str, Any] | None = None,
        tune_config: TuneConfig | None = None,
        run_config: RunConfig | None = None,
        force: bool = False,
        storage_filesystem: Any = None,
    ) -> Tuner:
        """Continue an experiment that was interrupted, crashed, or whose driver was killed.

        Finished trials stay finished; unfinished ones continue from their newest valid
        checkpoint; the searcher, scheduler and stopper continue from their saved state,
        so no configuration is suggested twice and each result is recorded once.

        Args:
            path: the experiment directory (or its name under the default storage), or
                its URL in remote storage (``s3://bucket/prefix/name``): its database
                is downloaded into a local staging folder and the run continues there,
                on this machine or another (docs/storage.md).
            trainable: the same trainable (with the same wrappers) as the first run.
            resume_unfinished: continue trials that had not finished (else they end
                TERMINATED, "not resumed").
            resume_errored: run failed trials again from their newest checkpoint.
            restart_errored: run failed trials again from scratch.
            param_space, tune_config, run_config: needed only for what the store cannot
                hold (sample_from functions, a custom searcher or scheduler, a stop
                function); budget settings (num_samples, max_concurrent_trials,
                max_failures, time_budget_s) may change, the search space, metric,
                mode and stop conditions may not unless `force=True`.
            storage_filesystem: the fsspec filesystem reaching a remote `path` (default:
                ``run_config.storage_filesystem``, else fsspec's for the URL).

        Example:
            >>> if tune.Tuner.can_restore(path):  # doctest: +SKIP
            ...     results = tune.Tuner.restore(path, train).fit()
        """
        from tunefleet.engine.resume import prepare_resume

        validate_trainable(trainable)
        if storage_filesystem is None and run_config is not None and is_url(os.fspath(path)):
            storage_filesystem = run_config.storage_filesystem
        storage = _remote(path, storage_filesystem)
        local = os.fspath(path)
        if storage is not None:
            from tunefleet.storage.remote import register_filesystem
            from tunefleet.storage.sync import fetch_experiment
            from tunefleet.store import default_storage_path

            register_filesystem(storage.url, storage.fs)
            local = fetch_experiment(storage, default_storage_path())
        restored = prepare_resume(
            local,
            param_space=param_space,
            tune_config=tune_config,
            run_config=run_config,
            resume_unfinished=resume_unfinished,
            resume_errored=resume_errored,
            restart_errored=restart_errored,
            force=force,
        )
        run = restored.run_config
        if storage is not None:
            _relocate(restored.state.trials, local)
            run = dataclasses.replace(
                run, storage_path=_parent_url(storage.url), storage_filesystem=storage.fs
            )
        tuner = cls(
            trainable,
            param_space=restored.param_space,
            tune_config=restored.tune_config,
            run_config=run,
        )
        tuner._resume = restored.state
        tuner._resume_url = storage.url if storage is not None else None
        return tuner

    @staticmethod
    def can_restore(path: str | os.PathLike[str], storage_filesystem: Any = None) -> bool:
        """True if `path` (a directory or a URL) holds an experiment `Tuner.restore` can open."""
        from tunefleet.engine.resume import can_restore, was_started

        storage = _remote(path, storage_filesystem)
        if storage is None:
            return can_restore(os.fspath(path))
        import tempfile

        with tempfile.TemporaryDirectory(prefix="tunefleet_probe_") as tmp:
            try:
                storage.fs.get_file(f"{storage.path}/experiment.db", f"{tmp}/experiment.db")
            except FileNotFoundError:
                return False
            return was_started(Path(tmp))


def _remote(path: str | os.PathLike[str], filesystem: Any) -> Any:
    """The remote storage `path` names (a URL, or a path in `filesystem`), or None."""
    from tunefleet.storage.location import parse_storage

    if not is_url(os.fspath(path)) and filesystem is None:
        return None
    return parse_storage(
        path,
        filesystem,
        where="Tuner.restore: path",
        fs_where="Tuner.restore: storage_filesystem",
    )


def _parent_url(url: str) -> str:
    """The folder holding `url` (the URL itself for a bucket)."""
    scheme, _, rest = url.partition("://")
    head, sep, _ = rest.rstrip("/").rpartition("/")
    return f"{scheme}://{head}" if sep and head else url


def _relocate(trials: list[Trial], local: str) -> None:
    """Trial folders as recorded on the machine that ran them, moved into `local`."""
    marker = os.sep + "trials" + os.sep
    for trial in trials:
        cut = trial.path.rfind(marker)
        if cut >= 0:
            trial.path = local + trial.path[cut:]


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
    "storage_filesystem",
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
    "progress_reporter",
    "callbacks",
    "raise_on_failed_trial",
    "trial_name_creator",
    "trial_dirname_creator",
    "resume",
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
    storage_filesystem: Any = None,
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
    progress_reporter: Any = None,
    callbacks: list[Any] | None = None,
    raise_on_failed_trial: bool = True,
    trial_name_creator: Any = None,
    trial_dirname_creator: Any = None,
    resume: bool | str = False,
    **unknown: Any,
) -> ExperimentAnalysis:
    """Ray Tune's legacy entry point; returns an `ExperimentAnalysis`.

    Unknown keyword arguments are an error (Ray Tune silently ignores some).
    `resume` (needs `name`): False; True or "LOCAL" (continue the experiment);
    "AUTO" (continue it if it exists, else start it); "ERRORED_ONLY" (only rerun
    failed trials); a suffix "+ERRORED" also reruns failed trials from their
    checkpoints, "+RESTART_ERRORED" from scratch.
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
            storage_filesystem=storage_filesystem,
            stop=stop,
            callbacks=callbacks,
            verbose=verbose,
            progress_reporter=progress_reporter,
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
    grid = _resumed(tuner, resume, storage_path or local_dir, name).fit()
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


def _resumed(tuner: Tuner, resume: bool | str, storage: str | None, name: str | None) -> Tuner:
    """The tuner that `tune.run(resume=...)` runs: the restored one, or `tuner` itself."""
    flags = _resume_flags(resume)
    if flags is None:
        return tuner
    if name is None:
        raise ValueError(f"tune.run(resume={resume!r}) needs name= (the experiment to continue)")
    from tunefleet.store import default_storage_path

    path: str | Path
    if is_url(storage) or tuner.run_config.storage_filesystem is not None:
        path = f"{str(storage).rstrip('/')}/{name}"
    else:
        path = Path(os.path.expanduser(storage or default_storage_path())) / name
    auto = flags.pop("auto")
    if auto and not Tuner.can_restore(path, tuner.run_config.storage_filesystem):
        return tuner
    return Tuner.restore(
        path,
        tuner.trainable,
        param_space=tuner.param_space,
        tune_config=tuner.tune_config,
        run_config=tuner.run_config,
        **flags,
    )


def _resume_flags(resume: bool | str | None) -> dict[str, bool] | None:
    if resume is None or resume is False:
        return None
    text = "LOCAL" if resume is True else str(resume).upper()
    base, _, suffix = text.partition("+")
    if base not in ("LOCAL", "AUTO", "ERRORED_ONLY") or suffix not in (
        "",
        "ERRORED",
        "ERRORED_ONLY",
        "RESTART_ERRORED",
    ):
        raise ValueError(
            f"tune.run(resume={resume!r}) is not valid: use False, True, 'LOCAL', 'AUTO' or "
            "'ERRORED_ONLY', optionally with '+ERRORED', '+ERRORED_ONLY' or '+RESTART_ERRORED'"
        )
    only_errored = "ERRORED_ONLY" in (base, suffix)
    return {
        "auto": base == "AUTO",
        "resume_unfinished": not only_errored,
        "resume_errored": only_errored or suffix == "ERRORED",
        "restart_errored": suffix == "RESTART_ERRORED",
    }


__all__ = [
    "TuneError",
    "Tuner",
    "run",
]
