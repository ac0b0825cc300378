"""`Tuner` and the legacy `run()`: check everything, build the parts, run the controller."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunefleet._error import TuneError
from tunefleet._registry import resolve_trainable
from tunefleet._run_args import (
    chdir_argument,
    env_set,
    legacy_checkpoint_config,
    refuse_unknown,
    resume_flags,
)
from tunefleet.config import (
    CheckpointConfig,
    FailureConfig,
    RunConfig,
    SyncConfig,
    TuneConfig,
    trial_log_files,
)
from tunefleet.storage.paths import is_url
from tunefleet.trainable import Trainable, unwrap, validate_trainable, with_resources
from tunefleet.trial import Trial

if TYPE_CHECKING:  # loaded when used: `import tunefleet` stays light (no pandas)
    from tunefleet.engine.resume import ResumeState
    from tunefleet.results import ExperimentAnalysis, ResultGrid

logger = logging.getLogger("tunefleet")


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
        trainable = resolve_trainable(trainable, "Tuner(trainable=...)")
        validate_trainable(trainable)
        _check_picklable(trainable)
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
        _check_checkpoint_config(trainable, self.run_config.checkpoint_config)
        self.run_config = _checkpoint_at_end_default(trainable, self.run_config)
        from tunefleet.space import validate_space
        from tunefleet.space._sendable import check_sendable

        validate_space(self.param_space)
        check_sendable(self.param_space)  # before any trial starts
        self._resume: ResumeState | None = None  # set by Tuner.restore
        self._resume_url: str | None = None  # Tuner.restore of an experiment in remote storage
        self._experiment_path: str | None = None  # what get_results() reads
        self._live_trials: list[Trial] = []  # fit()'s own trial records (Tuner.restore: none)

    def fit(self) -> ResultGrid:
        """Run the experiment to its end (or continue a restored one); return a `ResultGrid`."""
        from tunefleet.engine.controller_util import counting_presses
        from tunefleet.engine.experiment import run_experiment

        resume, self._resume = self._resume, None  # a second fit() starts a new experiment
        url, self._resume_url = self._resume_url, None
        live: list[Trial] = []
        # Ctrl-C is counted, not raised, until the results are returned (see CtrlC)
        with counting_presses():
            path = run_experiment(
                self.trainable,
                self.param_space,
                self.tune_config,
                self.run_config,
                resume,
                url,
                trials_out=live,
            )
            self._experiment_path, self._live_trials = path, live
            return self.get_results()

    def get_results(self) -> ResultGrid:
        """The `ResultGrid` of this tuner's experiment: the one `fit()` ran, or the one
        `Tuner.restore` opened (read as it is now, without running anything).

        After `fit()` each result holds the trial's own config and last result (the
        objects, as in Ray Tune); read from disk (`Tuner.restore`) they are the store's
        JSON (a tuple reads back as a list, an object as its ``str()``).

        Raises:
            RuntimeError: the tuner was neither fitted nor restored.
        """
        if self._experiment_path is None:
            raise RuntimeError(
                "Tuner.get_results(): this Tuner has no results yet; call fit() first, or "
                "open a finished experiment with tune.Tuner.restore(path, trainable)"
            )
        from tunefleet.results import ExperimentAnalysis, ResultGrid

        analysis = ExperimentAnalysis._of_run(self._experiment_path, self._live_trials)
        if self._live_trials:  # keep what was adopted, not the run's whole trial records
            self._live_trials = analysis.trials
        return ResultGrid(analysis, metric=self.tune_config.metric, mode=self.tune_config.mode)

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

        trainable = resolve_trainable(trainable, "Tuner.restore(trainable=...)")
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
        tuner._experiment_path = restored.state.path
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


def _check_picklable(trainable: Any) -> None:
    """As in Ray Tune, a trainable that cannot reach the workers is a TypeError when the
    Tuner is made, not when it runs (`with_parameters` objects are checked as they go)."""
    from tunefleet.backends.simulated import is_simulated

    if is_simulated(trainable):
        return
    import cloudpickle

    inner = unwrap(trainable)[0]
    try:
        cloudpickle.dumps(inner)
    except Exception as exc:
        name = getattr(inner, "__qualname__", type(inner).__name__)
        raise TypeError(
            f"Tuner(trainable={name}): the trainable cannot be sent to worker processes "
            f"(pickling failed: {exc}); objects it uses must be picklable: pass large or "
            "special objects with tune.with_parameters, or create them inside the trainable"
        ) from exc


def _check_checkpoint_config(trainable: Any, config: CheckpointConfig) -> None:
    """As in Ray Tune: a function trainable saves the checkpoints it reports, so a
    frequency or a checkpoint at the end (which only a class trainable can take) is an
    error rather than silently never taken."""
    from tunefleet.backends.simulated import is_simulated

    if inspect.isclass(unwrap(trainable)[0]) or is_simulated(trainable):
        return
    for name in ("checkpoint_frequency", "checkpoint_at_end"):
        if getattr(config, name):
            raise ValueError(
                f"CheckpointConfig({name}={getattr(config, name)!r}) cannot be used with a "
                "function trainable: it saves the checkpoints it reports; call "
                "tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(path)) "
                "when one is due (e.g. every N iterations, and after the last)"
            )


def _checkpoint_at_end_default(trainable: Any, run_config: RunConfig) -> RunConfig:
    """`run_config` with Ray Tune's default for `CheckpointConfig.checkpoint_at_end` (None)
    made explicit: a class trainable that saves (it overrides `save_checkpoint`) saves
    after its last step, as a Ray `Tuner` does, so its result has a final checkpoint. One
    that does not save is not asked to (Ray's trial would fail on `NotImplementedError`).
    A copy: the caller's configs are left as they were."""
    config = run_config.checkpoint_config
    inner = unwrap(trainable)[0]
    if config.checkpoint_at_end is not None or not inspect.isclass(inner):
        return run_config
    saves = issubclass(inner, Trainable) and inner.save_checkpoint is not Trainable.save_checkpoint
    checkpoints = dataclasses.replace(config, checkpoint_at_end=saves)
    return dataclasses.replace(run_config, checkpoint_config=checkpoints)


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


def run(
    run_or_experiment: Any,
    *,
    config: dict[str, Any] | None = None,
    num_samples: int = 1,
    resources_per_trial: Any = None,
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
    reuse_actors: bool | None = None,
    checkpoint_config: CheckpointConfig | None = None,
    checkpoint_freq: int = 0,
    checkpoint_at_end: bool = False,
    keep_checkpoints_num: int | None = None,
    checkpoint_score_attr: str | None = None,
    time_budget_s: float | datetime.timedelta | None = None,
    verbose: int | None = 1,
    progress_reporter: Any = None,
    callbacks: list[Any] | None = None,
    raise_on_failed_trial: bool = True,
    trial_name_creator: Any = None,
    trial_dirname_creator: Any = None,
    sync_config: SyncConfig | None = None,
    log_to_file: Any = True,
    resume: bool | str | None = False,
    chdir_to_trial_dir: bool | None = None,
    **unknown: Any,
) -> ExperimentAnalysis:
    """Ray Tune's legacy entry point; returns an `ExperimentAnalysis`.

    Takes Ray Tune's keyword arguments with their meaning (docs/from_ray_tune.md):
    the checkpoint ones (`checkpoint_freq`, `checkpoint_at_end`, `keep_checkpoints_num`,
    `checkpoint_score_attr` with a "min-" prefix for the lowest) fill in
    `checkpoint_config`; `local_dir` is `storage_path`'s old name; `log_to_file` as in
    `RunConfig`; `chdir_to_trial_dir=False` (deprecated, as in Ray Tune: it warns) runs
    this experiment's trials in the worker's working directory, as
    RAY_CHDIR_TO_TRIAL_DIR=0 does. Ray's `restore`, `resume_config` and
    `export_formats` are refused with what to write instead, and unknown keyword
    arguments are an error (Ray Tune silently ignores some). `resume` (needs `name`):
    False; True or "LOCAL" (continue the experiment); "AUTO" (continue it if it exists,
    else start it); "ERRORED_ONLY" (only rerun failed trials); a suffix "+ERRORED" also
    reruns failed trials from their checkpoints, "+RESTART_ERRORED" from scratch.

    Raises:
        TuneError: trials failed and `raise_on_failed_trial` is True.

    Example:
        >>> analysis = tune.run(train, config={"lr": tune.uniform(0, 1)},  # doctest: +SKIP
        ...     metric="loss", mode="min", num_samples=4, checkpoint_freq=2)
        >>> analysis.best_config  # doctest: +SKIP
    """
    refuse_unknown(unknown)
    if local_dir is not None and storage_path is not None and local_dir != storage_path:
        raise ValueError(
            f"tune.run(): local_dir={local_dir!r} and storage_path={storage_path!r} disagree; "
            "give storage_path only (local_dir is its deprecated name)"
        )
    if isinstance(search_alg, str) or isinstance(scheduler, str):
        what = "search_alg" if isinstance(search_alg, str) else "scheduler"
        raise ValueError(
            f"tune.run({what}={search_alg if what == 'search_alg' else scheduler!r}): names "
            f"are not supported; pass the object, e.g. {what}="
            + ("OptunaSearch() from tunefleet.search" if what == "search_alg" else "")
            + ("ASHAScheduler() from tunefleet.schedulers" if what == "scheduler" else "")
        )
    trial_log_files(log_to_file, "tune.run(log_to_file)")  # a bad value fails here
    stay_in_cwd = chdir_argument(chdir_to_trial_dir)
    if isinstance(time_budget_s, datetime.timedelta):
        time_budget_s = time_budget_s.total_seconds()
    checkpoints = legacy_checkpoint_config(
        checkpoint_config,
        checkpoint_freq=checkpoint_freq,
        checkpoint_at_end=checkpoint_at_end,
        keep_checkpoints_num=keep_checkpoints_num,
        checkpoint_score_attr=checkpoint_score_attr,
    )
    trainable = resolve_trainable(run_or_experiment, "tune.run(run_or_experiment=...)")
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
            verbose=1 if verbose is None else verbose,
            progress_reporter=progress_reporter,
            checkpoint_config=checkpoints,
            failure_config=FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
            sync_config=sync_config or SyncConfig(),
            log_to_file=log_to_file,
        ),
    )
    runner = _resumed(tuner, resume, storage_path or local_dir, name)
    from tunefleet.engine.controller_util import counting_presses

    chdir = "0" if stay_in_cwd else None
    # Ctrl-C is counted, not raised, until the results are read
    with counting_presses(), env_set("TUNEFLEET_CHDIR_TO_TRIAL_DIR", chdir):
        grid = runner.fit()
    analysis = grid._analysis  # read once, with the trials' own configs and last results
    analysis.default_metric = metric or analysis.default_metric
    analysis.default_mode = mode or analysis.default_mode
    if raise_on_failed_trial and grid.num_errors:
        failed = ", ".join(f"{e.trial_id} ({e})" for e in grid.errors[:5])
        raise TuneError(
            f"{grid.num_errors} trial(s) failed: {failed}. Results are kept at "
            f"{grid.experiment_path}; pass raise_on_failed_trial=False to get them as an "
            "ExperimentAnalysis"
        )
    return analysis


def _resumed(
    tuner: Tuner, resume: bool | str | None, storage: str | None, name: str | None
) -> Tuner:
    """The tuner that `tune.run(resume=...)` runs: the restored one, or `tuner` itself."""
    flags = resume_flags(resume)
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


__all__ = [
    "TuneError",
    "Tuner",
    "run",
]
