"""Configuration dataclasses: TuneConfig, RunConfig, CheckpointConfig, FailureConfig,
SyncConfig.

All fields have Ray Tune's names. Values are checked in `validate()`, called by
`Tuner` before anything runs, so a bad value fails fast and names itself.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tunefleet.trial import Trial


def _positive_int(where: str, value: Any, *, allow: tuple[Any, ...] = ()) -> None:
    if value in allow and not isinstance(value, bool):
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        extra = f" or one of {list(allow)}" if allow else ""
        raise ValueError(f"{where}={value!r} is not valid: it must be an integer >= 1{extra}")


def _positive_number(where: str, value: Any) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{where}={value!r} is not valid: it must be a number of seconds > 0")


def _mode(where: str, value: Any) -> None:
    if value is not None and value not in ("min", "max"):
        raise ValueError(f"{where}={value!r} is not valid: it must be 'min', 'max' or None")


@dataclass
class CheckpointConfig:
    """Which checkpoints to keep, and when class trainables save them.

    Args:
        num_to_keep: keep at most this many per trial (the latest is always kept,
            so a trial can resume); None keeps all.
        checkpoint_score_attribute: rank checkpoints by this metric (default: by age).
        checkpoint_score_order: "max" or "min" for that metric.
        checkpoint_frequency: class trainables save every N iterations (0: never).
        checkpoint_at_end: class trainables save when they finish or are stopped.
    """

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool | None = None

    def validate(self) -> None:
        if self.num_to_keep is not None:
            _positive_int("CheckpointConfig.num_to_keep", self.num_to_keep)
        _mode("CheckpointConfig.checkpoint_score_order", self.checkpoint_score_order)
        freq = self.checkpoint_frequency
        if isinstance(freq, bool) or not isinstance(freq, int) or freq < 0:
            raise ValueError(
                f"CheckpointConfig.checkpoint_frequency={freq!r} is not valid: "
                "it must be an integer >= 0"
            )


@dataclass
class FailureConfig:
    """What to do when a trial fails.

    Args:
        max_failures: retry a failed trial this many times, from its latest
            checkpoint (from scratch if none); -1 retries forever.
        fail_fast: True stops the experiment at the first trial that fails for
            good (the other trials keep their true states); "raise" also raises.
        trial_timeout_s: an attempt running longer than this (wall clock) is killed
            and fails as TIMEOUT; None: no limit.
        heartbeat_timeout_s: an attempt that reports nothing for this long is killed
            and fails as TIMEOUT; None: no limit.
        worker_start_timeout_s: a worker process (local backend) that has not loaded
            the trainable this long after it started, because importing the trainable's
            module hangs, is killed, and its trial fails as TIMEOUT ("hung while loading
            the trainable", naming the module); None: $TUNEFLEET_WORKER_START_TIMEOUT_S,
            else 300 s.
        nan_policy: what a NaN or infinite value of the metric does: "worst" (the
            default, as in Ray Tune the result is recorded and the trial goes on;
            searchers and schedulers see the worst finite value seen instead, it never
            ranks best, and the progress table, summary, ``tunefleet show`` and the
            dashboard flag it) or "error" (the trial fails as NAN_METRIC, naming the
            key and iteration).
        memory_usage_threshold: the node memory watcher kills the newest trial when
            the machine's memory in use goes above this fraction (Ray's default 0.95).
        node_loss_counts: whether a trial that failed because its node was lost
            (NODE_LOST, Ray backend) uses up one of `max_failures`. False (default): it
            is retried, from its latest checkpoint, whatever `max_failures` says, so
            losing spot instances does not end trials.
    """

    max_failures: int = 0
    fail_fast: bool | str = False
    trial_timeout_s: float | None = None
    heartbeat_timeout_s: float | None = None
    worker_start_timeout_s: float | None = None
    nan_policy: str = "worst"
    memory_usage_threshold: float = 0.95
    node_loss_counts: bool = False

    def validate(self) -> None:
        value = self.max_failures
        if isinstance(value, bool) or not isinstance(value, int) or value < -1:
            raise ValueError(
                f"FailureConfig.max_failures={value!r} is not valid: "
                "it must be an integer >= 0, or -1 to retry forever"
            )
        if self.fail_fast not in (True, False, "raise"):
            raise ValueError(
                f"FailureConfig.fail_fast={self.fail_fast!r} is not valid: "
                "it must be True, False or 'raise'"
            )
        for name in ("trial_timeout_s", "heartbeat_timeout_s", "worker_start_timeout_s"):
            if getattr(self, name) is not None:
                _positive_number(f"FailureConfig.{name}", getattr(self, name))
        if self.nan_policy not in ("error", "worst"):
            raise ValueError(
                f"FailureConfig.nan_policy={self.nan_policy!r} is not valid: "
                "it must be 'error' or 'worst'"
            )
        threshold = self.memory_usage_threshold
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not 0 < threshold <= 1
        ):
            raise ValueError(
                f"FailureConfig.memory_usage_threshold={threshold!r} is not valid: "
                "it must be a fraction in (0, 1]"
            )
        if not isinstance(self.node_loss_counts, bool):
            raise TypeError(
                f"FailureConfig.node_loss_counts={self.node_loss_counts!r} must be True or False"
            )


@dataclass
class SyncConfig:
    """How an experiment in remote storage (a `storage_path` URL such as s3://) is kept there.

    Trials write their checkpoints to the storage directly. The experiment's
    database and trial files live in a local staging folder and are uploaded:

    Args:
        sync_period: upload a snapshot of the database (and the trial files that
            changed) at most this often, in seconds; also when the run starts and
            ends. A resume from the storage after the driver's machine was lost
            redoes at most this much. Retention deletes of remote checkpoints wait
            for the next upload.
        sync_timeout: at the end, wait this long at most for the last upload.
        sync_artifacts: also upload the files in each trial's folder (stdout.log,
            stderr.log, logger outputs); Ray Tune's default is False.
    """

    sync_period: float = 60.0
    sync_timeout: float = 1800.0
    sync_artifacts: bool = True

    def validate(self) -> None:
        for name in ("sync_period", "sync_timeout"):
            _positive_number(f"SyncConfig.{name}", getattr(self, name))
        if not isinstance(self.sync_artifacts, bool):
            raise ValueError(
                f"SyncConfig.sync_artifacts={self.sync_artifacts!r} is not valid: "
                "it must be True or False"
            )


@dataclass
class TuneConfig:
    """How to search: the metric, the algorithms, how many trials and how many at once."""

    metric: str | list[str] | None = None  # a list: several objectives (a Pareto front)
    mode: str | list[str] | None = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: float | None = None
    #: Keep a worker's trainable between trials. None: True for function trainables,
    #: False for class trainables (Ray Tune's default); a class is kept only when its
    #: `reset_config` returns True.
    reuse_actors: bool | None = None
    trial_name_creator: Callable[[Trial], str] | None = None
    trial_dirname_creator: Callable[[Trial], str] | None = None
    #: Names of reported values that must be <= 0 for a trial to be feasible (Optuna's
    #: and Syne Tune's convention); searchers that support constraints use them.
    constraints: list[str] | None = None

    def validate(self) -> None:
        if isinstance(self.metric, (list, tuple)):
            self._validate_objectives()
        else:
            if self.metric is not None and (not isinstance(self.metric, str) or not self.metric):
                raise ValueError(
                    f"TuneConfig.metric={self.metric!r} is not valid: it must be a name or a "
                    "list of names (several objectives)"
                )
            if isinstance(self.mode, (list, tuple)):
                raise ValueError(
                    f"TuneConfig.mode={self.mode!r} is a list but metric={self.metric!r} is "
                    "not: give a list of metrics of the same length for several objectives"
                )
            _mode("TuneConfig.mode", self.mode)
        if (self.metric is None) != (self.mode is None):
            raise ValueError(
                f"TuneConfig: metric={self.metric!r} and mode={self.mode!r} go together: "
                "give both or neither, e.g. TuneConfig(metric='loss', mode='min') (Ray Tune "
                "accepts a metric without a mode; tunefleet needs the direction to rank trials)"
            )
        if self.constraints is not None:
            if isinstance(self.constraints, str) or not isinstance(self.constraints, list):
                raise ValueError(
                    f"TuneConfig.constraints={self.constraints!r} is not valid: it must be a "
                    "list of reported names (feasible when every value is <= 0)"
                )
            for i, name in enumerate(self.constraints):
                if not isinstance(name, str) or not name:
                    raise ValueError(
                        f"TuneConfig.constraints[{i}]={name!r} is not valid: it must be a name"
                    )
        _positive_int("TuneConfig.num_samples", self.num_samples, allow=(-1,))
        if self.max_concurrent_trials is not None:  # 0: no limit, as in Ray Tune
            _positive_int(
                "TuneConfig.max_concurrent_trials", self.max_concurrent_trials, allow=(0,)
            )
        if self.time_budget_s is not None:
            _positive_number("TuneConfig.time_budget_s", self.time_budget_s)
        for name in ("trial_name_creator", "trial_dirname_creator"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"TuneConfig.{name} must be a function of the trial, not {value!r}")

    def _validate_objectives(self) -> None:
        metrics = list(self.metric or [])
        if not metrics:
            raise ValueError("TuneConfig.metric=[] is not valid: give at least one name")
        for i, name in enumerate(metrics):
            if not isinstance(name, str) or not name:
                raise ValueError(f"TuneConfig.metric[{i}]={name!r} is not valid: it must be a name")
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"TuneConfig.metric={self.metric!r} names a metric twice")
        modes = self.mode
        if isinstance(modes, str):
            modes = [modes] * len(metrics)  # one mode for every objective
        if not isinstance(modes, (list, tuple)) or len(modes) != len(metrics):
            raise ValueError(
                f"TuneConfig.mode={self.mode!r} does not match metric={self.metric!r}: give "
                "one mode per metric, e.g. mode=['min', 'max']"
            )
        for i, mode in enumerate(modes):
            _mode(f"TuneConfig.mode[{i}]", mode)
            if mode is None:
                raise ValueError(f"TuneConfig.mode[{i}]=None is not valid: use 'min' or 'max'")
        self.metric, self.mode = list(metrics), list(modes)


BACKENDS = ("local", "ray")
LOG_FILES = ("stdout.log", "stderr.log")  # a trial's output files unless log_to_file names others


def trial_log_files(log_to_file: Any, where: str = "log_to_file") -> tuple[str, str]:
    """The (stdout, stderr) files of `log_to_file` as Ray Tune reads it: a bool gives
    `LOG_FILES`; one name gets both streams; a pair of names, one each. `where` names
    the argument in the error a bad value gets."""
    if isinstance(log_to_file, bool):
        return LOG_FILES
    if isinstance(log_to_file, (str, os.PathLike)):
        names: tuple[Any, ...] = (log_to_file, log_to_file)
    elif isinstance(log_to_file, (tuple, list)) and len(log_to_file) == 2:
        names = tuple(log_to_file)
    else:
        names = ()
    if not names or not all(isinstance(n, (str, os.PathLike)) and os.fspath(n) for n in names):
        raise ValueError(
            f"{where}={log_to_file!r} is not valid: give True or False (stdout.log and "
            "stderr.log in the trial's folder), a file name (both streams into it) or a "
            "pair of file names (stdout, stderr)"
        )
    return os.fspath(names[0]), os.fspath(names[1])


def chdir_to_trial_dir() -> bool:
    """Whether trials run in their own folder: yes unless RAY_CHDIR_TO_TRIAL_DIR=0 or
    TUNEFLEET_CHDIR_TO_TRIAL_DIR=0 (Ray Tune's switch, and ours)."""
    return all(
        os.environ.get(name, "1").strip() != "0"
        for name in ("RAY_CHDIR_TO_TRIAL_DIR", "TUNEFLEET_CHDIR_TO_TRIAL_DIR")
    )


@dataclass
class RunConfig:
    """Where results go, when trials stop, what watches them.

    Args:
        name: the experiment's name (its directory under storage_path).
        storage_path: where experiments are stored (default ``~/tunefleet_results``):
            a local or shared folder, or an fsspec URL such as ``s3://bucket/prefix``
            (docs/storage.md).
        storage_filesystem: the fsspec filesystem that reaches a remote
            `storage_path` (e.g. ``s3fs.S3FileSystem(endpoint_url=...)``); by default
            fsspec's, configured by the environment.
        sync_config: how an experiment in remote storage is uploaded (`SyncConfig`).
        stop: a dict such as ``{"training_iteration": 10}``, a function
            ``(trial_id, result) -> bool`` or a `tune.Stopper`.
        callbacks: `tune.Callback` objects.
        verbose: 0 silent; 1 a live view (a rich table on a terminal, an HTML table in
            Jupyter, a plain line every 30 s in logs) and the end-of-run summary; 2 also
            a line per trial that ends; 3 also a line per result.
        resources: totals for this machine, overriding what is detected, and any
            custom resources, e.g. ``{"cpu": 8, "accelerator_x": 2}`` (local backend).
        backend: where trials run: "local" (worker processes on this machine, the
            default) or "ray" (Ray actors on a local Ray or a cluster; docs/clusters.md).
        ray_init: with backend="ray", keyword arguments of ``ray.init`` used when Ray
            is not initialised yet, e.g. ``{"address": "auto"}`` to join a running
            cluster. ``RAY_ADDRESS`` (set by ``ray job submit``) is honoured as usual.
        progress_reporter: a `tune.CLIReporter` / `tune.JupyterNotebookReporter`
            choosing the live view's columns, rows and refresh period (Ray Tune's names).
        log_to_file: where each trial's stdout and stderr go, relative to its folder
            (absolute paths too): True or False, ``stdout.log`` and ``stderr.log``; a
            file name, both streams into it; a pair of names, (stdout, stderr).
    """

    name: str | None = None
    storage_path: str | os.PathLike[str] | None = None
    stop: Any = None
    callbacks: list[Any] | None = None
    verbose: int = 1
    checkpoint_config: CheckpointConfig = field(default_factory=CheckpointConfig)
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    resources: dict[str, Any] | None = None
    log_to_file: bool | str | os.PathLike[str] | tuple[Any, Any] | list[Any] = True
    backend: str = "local"
    ray_init: dict[str, Any] | None = None
    storage_filesystem: Any = None
    sync_config: SyncConfig = field(default_factory=SyncConfig)
    progress_reporter: Any = None

    def validate(self) -> None:
        if self.name is not None:
            if not isinstance(self.name, str) or not self.name.strip():
                raise ValueError(
                    f"RunConfig.name={self.name!r} is not valid: give a non-empty name"
                )
            if "/" in self.name or self.name in (".", ".."):
                raise ValueError(
                    f"RunConfig.name={self.name!r} is not valid: it is a directory name, "
                    "without '/'; put the parent folder in storage_path"
                )
        if self.backend not in BACKENDS:
            raise ValueError(
                f"RunConfig.backend={self.backend!r} is not valid: use one of "
                f"{', '.join(map(repr, BACKENDS))}"
            )
        if self.ray_init is not None:
            if self.backend != "ray":
                raise ValueError(
                    f"RunConfig.ray_init={self.ray_init!r} is only used with backend='ray' "
                    f"(backend is {self.backend!r})"
                )
            if not isinstance(self.ray_init, dict) or not all(
                isinstance(k, str) for k in self.ray_init
            ):
                raise TypeError(
                    f"RunConfig.ray_init={self.ray_init!r} must be a dict of ray.init keyword "
                    "arguments, e.g. {'address': 'auto'}"
                )
        if self.backend == "ray" and self.resources is not None:
            raise ValueError(
                f"RunConfig.resources={self.resources!r} declares this machine's resources for "
                "the local backend; with backend='ray' they come from the Ray cluster (start "
                "a local Ray with ray_init={'num_cpus': ...} or ray.init(...))"
            )
        trial_log_files(self.log_to_file, "RunConfig.log_to_file")
        if self.verbose not in (0, 1, 2, 3):
            raise ValueError(f"RunConfig.verbose={self.verbose!r} is not valid: use 0, 1, 2 or 3")
        if self.progress_reporter is not None:
            from tunefleet.progress.reporters import ProgressReporter

            if not isinstance(self.progress_reporter, ProgressReporter):
                raise TypeError(
                    f"RunConfig.progress_reporter={self.progress_reporter!r} must be a "
                    "tune.CLIReporter or tune.JupyterNotebookReporter"
                )
        if not isinstance(self.checkpoint_config, CheckpointConfig):
            raise TypeError("RunConfig.checkpoint_config must be a tune.CheckpointConfig")
        if not isinstance(self.failure_config, FailureConfig):
            raise TypeError("RunConfig.failure_config must be a tune.FailureConfig")
        self.checkpoint_config.validate()
        self.failure_config.validate()
        if not isinstance(self.sync_config, SyncConfig):
            raise TypeError("RunConfig.sync_config must be a tune.SyncConfig")
        self.sync_config.validate()
        if self.storage_path is not None or self.storage_filesystem is not None:
            from tunefleet.storage.location import parse_storage

            parse_storage(self.storage_path, self.storage_filesystem)  # a bad URL fails here
        from tunefleet.stoppers import make_stopper

        make_stopper(self.stop)  # a bad stop condition fails here, before anything runs
        for i, callback in enumerate(self.callbacks or []):
            from tunefleet.callbacks import Callback

            if not isinstance(callback, Callback):
                raise TypeError(
                    f"RunConfig.callbacks[{i}]={callback!r} is not a tune.Callback instance"
                )


__all__ = [
    "CheckpointConfig",
    "FailureConfig",
    "RunConfig",
    "SyncConfig",
    "TuneConfig",
]
