"""Continue an experiment from its store: after Ctrl-C, a crash, or SIGKILL of the driver.

The store holds everything a resume needs as JSON: the trials (with their status,
attempts and checkpoints), the searcher's, scheduler's and stopper's state as of
the last committed step, the experiment's run time, and the settings it was
started with. Nothing is unpickled. What cannot be stored as JSON (a custom
searcher or scheduler object, a stop function, `sample_from` functions, redacted
secrets) must be passed again, and its saved state is loaded into it.

Which trials run again:
- TERMINATED trials stay finished.
- Unfinished trials (RUNNING when the driver died, PAUSED, PENDING) continue from
  their newest valid checkpoint, with their results after it rewound
  (`resume_unfinished=True`); otherwise they end TERMINATED, "not resumed".
- ERROR trials stay failed, unless `resume_errored` (from their checkpoint) or
  `restart_errored` (from scratch); either way they get `max_failures` anew.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import difflib
import errno
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunefleet.config import CheckpointConfig, FailureConfig, RunConfig, TuneConfig
from tunefleet.storage.paths import (
    default_experiment_name,
    experiment_dirname,
    local_path,
    safe_child,
)
from tunefleet.store._check import DriverLock
from tunefleet.trainable import trainable_name
from tunefleet.trial import StopCause, Trial, TrialStatus

_DEFAULT_SEARCHER = "BasicVariantGenerator"
_DEFAULT_SCHEDULER = "FIFOScheduler"

logger = logging.getLogger("tunefleet")


@dataclass
class ResumeState:
    """What a resumed run starts from (built by `prepare_resume`)."""

    path: str
    name: str
    id_prefix: str
    trials: list[Trial]
    changed: list[tuple[Trial, str]] = field(default_factory=list)  # (trial, what was done)
    from_scratch: list[str] = field(default_factory=list)
    retry_base: dict[str, int] = field(default_factory=dict)
    searcher_state: dict[str, Any] | None = None
    scheduler_state: dict[str, Any] | None = None
    stopper_state: dict[str, Any] | None = None
    callback_states: dict[str, Any] | None = None  # given back by `restore_callback_states`
    elapsed_s: float = 0.0


@dataclass
class Restored:
    """The settings to run with, and where the resumed run starts."""

    param_space: dict[str, Any]
    tune_config: TuneConfig
    run_config: RunConfig
    state: ResumeState


# -- what a new experiment records --------------------------------------------------------
def stop_kind(stop: Any) -> str:
    return "none" if stop is None else "dict" if isinstance(stop, dict) else "custom"


def tune_config_json(config: TuneConfig) -> dict[str, Any]:
    return {
        "metric": config.metric,
        "mode": config.mode,
        "constraints": config.constraints,
        "num_samples": config.num_samples,
        "max_concurrent_trials": config.max_concurrent_trials,
        "time_budget_s": config.time_budget_s,
        "reuse_actors": config.reuse_actors,
    }


def run_config_json(config: RunConfig) -> dict[str, Any]:
    return {
        "verbose": config.verbose,
        "resources": config.resources,
        "checkpoint_config": dataclasses.asdict(config.checkpoint_config),
        "failure_config": dataclasses.asdict(config.failure_config),
    }


# -- restore ------------------------------------------------------------------------------
def can_restore(path: str) -> bool:
    """True if `path` is a tunefleet experiment directory (or its database) that started."""
    from tunefleet.store import resolve_experiment

    try:
        return was_started(resolve_experiment(path))
    except (FileNotFoundError, OSError):
        return False


def was_started(experiment: Path) -> bool:
    """False for a database left by a driver killed before the experiment was recorded."""
    import sqlite3

    from tunefleet.store import StoreReader
    from tunefleet.store._check import CorruptStoreError

    try:
        with StoreReader(experiment) as reader:
            return "name" in reader.meta()  # every recorded experiment, of any version
    except (sqlite3.DatabaseError, CorruptStoreError):
        return True  # damaged: never reused; Tuner.restore will say how


def experiment_dir(
    storage_path: Any, name: str | None, trainable: Any, storage: Any = None
) -> tuple[str, str, DriverLock]:
    """(name, path, the driver's lock on it) of a new experiment; an existing one is never
    overwritten, and two drivers started at once with the same name get one each.

    A directory is claimed by taking its driver lock: whoever holds it owns the name;
    a name whose lock is held, or whose experiment was started, moves on to the next
    ``<name>_<timestamp>[_<n>]``. With remote `storage` (`storage.remote.Storage`), the
    path is a local staging folder under the default storage path, and a name is taken
    if it is taken there or in the remote storage.
    """
    from tunefleet.store import default_storage_path

    local = storage is None and storage_path
    root = Path(os.path.expanduser(local_path(os.fspath(storage_path)))) if local else None
    root = root or Path(default_storage_path())
    _make_root(root)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    auto = default_experiment_name(trainable_name(trainable), stamp)
    chosen = experiment_dirname(name) if name else auto  # refuses unsafe names
    path = Path(safe_child(root, chosen))  # never outside the storage path
    candidate, n = chosen, 1
    while True:
        taken = storage is not None and storage.fs.exists(
            f"{storage.path}/{candidate}/experiment.db"
        )
        lock = None if taken else _claim(root / candidate)
        if lock is not None:
            break
        n += 1
        candidate = f"{chosen}_{stamp}" if n == 2 else f"{chosen}_{stamp}_{n - 1}"
    if candidate != chosen:
        where = storage.join(chosen) if storage is not None else path
        logger.warning(
            "An experiment named %r already exists at %s; this run is stored as %r",
            chosen,
            where,
            candidate,
        )
    return candidate, str((root / candidate).resolve()), lock


def _make_root(root: Path) -> None:
    """The storage path, made if missing; one line naming it and the problem if it cannot."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".tunefleet-write-check-{os.getpid()}"
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        problem = "it is a file, not a directory" if root.is_file() else _why(exc)
        raise StoragePathError(f"storage_path={str(root)!r} cannot be used: {problem}") from None


def _why(exc: OSError) -> str:
    if exc.errno == errno.EROFS:
        return "it is on a read-only file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "it is not writable by this user"
    if exc.errno == errno.ENOTDIR:
        return "a part of it is a file, not a directory"
    return exc.strerror or str(exc)


class StoragePathError(ValueError):
    """A storage_path that is a file, read-only or cannot be made: the message says which."""


def _claim(path: Path) -> DriverLock | None:
    """Hold `path`'s driver lock if the directory is free: no driver holds it and no
    experiment was recorded there (a database left by a driver killed before it recorded
    the experiment is reused). None if it is taken."""
    lock = DriverLock(path)
    try:
        lock.__enter__()  # makes the directory; the lock is ours or another driver's
    except RuntimeError:  # held by a driver running now
        return None
    database = path / "experiment.db"
    if database.exists() and was_started(path):
        lock.__exit__(None, None, None)
        return None
    for suffix in ("", "-wal", "-shm"):  # never started: reused
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    return lock


def held(lock: DriverLock) -> contextlib.ExitStack:
    """A context that releases `lock`, already taken, as it exits."""
    stack = contextlib.ExitStack()
    stack.push(lock)
    return stack


def prepare_resume(
    path: str,
    *,
    param_space: dict[str, Any] | None,
    tune_config: TuneConfig | None,
    run_config: RunConfig | None,
    resume_unfinished: bool,
    resume_errored: bool,
    restart_errored: bool,
    force: bool,
) -> Restored:
    """Read the experiment at `path` and decide how it continues; writes nothing."""
    from tunefleet.store import StoreReader, resolve_experiment
    from tunefleet.store._check import check_database

    exp = resolve_experiment(path)
    check_database(exp / "experiment.db")
    with StoreReader(exp) as reader:
        meta = reader.meta()
        trials = reader.trials()
        kinds = ("searcher", "scheduler", "stopper", "callbacks", "clock")
        states = {k: reader.state(k) for k in kinds}
    if "name" not in meta:  # check_database found tunefleet's tables, whole, but empty
        raise ValueError(
            f"{exp / 'experiment.db'} records no experiment (its driver stopped before it "
            "recorded one); there is nothing to resume"
        )
    if "id_prefix" not in meta:
        raise ValueError(f"{exp} was made by a tunefleet without resume support; it cannot resume")
    space = _param_space(meta, param_space, force)
    tune = _tune_config(meta, tune_config, force)
    run = _run_config(meta, run_config, force)
    state = ResumeState(
        path=str(exp),
        name=str(meta["name"]),
        id_prefix=str(meta["id_prefix"]),
        trials=trials,
        searcher_state=states["searcher"],
        scheduler_state=states["scheduler"],
        stopper_state=states["stopper"] if run.stop is not None else None,
        callback_states=states["callbacks"],
        elapsed_s=float((states["clock"] or {}).get("elapsed_s", 0.0)),
    )
    _decide_trials(state, resume_unfinished, resume_errored, restart_errored)
    for trial, _ in state.changed:
        if not trial.status.is_finished:
            trial.config = _unredacted(trial.config, space, f"trial {trial.trial_id}: config")
    return Restored(space, tune, run, state)


def _unredacted(config: Any, space: Any, where: str) -> Any:
    """The trial's stored config, with each value stored redacted taken from `space`.

    Only constants (and `tune.Secret`s) of the space can give a secret back; a secret
    sampled from a domain was never stored and cannot be resumed.
    """
    from tunefleet.space import Domain

    if isinstance(config, str) and "***" in config:
        if space is None or isinstance(space, (Domain, dict)):
            raise ValueError(
                f"{where} was stored redacted (a secret) and the param_space given does "
                "not hold it as a constant, so the trial cannot get it back; keep secrets "
                "in constants or tune.Secret, and pass param_space= to Tuner.restore"
            )
        return space
    if isinstance(config, dict):
        inner = space if isinstance(space, dict) else {}
        return {k: _unredacted(v, inner.get(k), f"{where}[{k!r}]") for k, v in config.items()}
    if isinstance(config, list):
        items = space if isinstance(space, list) and len(space) == len(config) else None
        return [
            _unredacted(v, items[i] if items else None, f"{where}[{i}]")
            for i, v in enumerate(config)
        ]
    return config


def _param_space(meta: dict[str, Any], given: dict[str, Any] | None, force: bool) -> Any:
    from tunefleet.space import space_from_json, space_to_json

    recorded = meta.get("param_space") or {}
    if given is None:
        _refuse_unstorable(recorded)
        return space_from_json(recorded)
    if not isinstance(given, dict):
        raise TypeError(f"param_space must be a dict, not {type(given).__name__}")
    from tunefleet._redact import redact

    _check_same("param_space", recorded, redact(space_to_json(given)), force)
    return given


def _refuse_unstorable(recorded: Any, where: str = "param_space") -> None:
    """sample_from functions and redacted values must be passed again."""
    if isinstance(recorded, dict):
        if recorded.get("__domain__") == "sample_from":
            raise ValueError(
                f"{where} is a sample_from function, which the store cannot hold; pass the "
                "search space again: Tuner.restore(path, trainable, param_space={...})"
            )
        for key, value in recorded.items():
            _refuse_unstorable(value, f"{where}[{key!r}]")
    elif isinstance(recorded, list):
        for i, value in enumerate(recorded):
            _refuse_unstorable(value, f"{where}[{i}]")
    elif isinstance(recorded, str) and "***" in recorded:
        raise ValueError(
            f"{where} was redacted as a secret when stored; pass the search space again: "
            "Tuner.restore(path, trainable, param_space={...})"
        )


def _tune_config(meta: dict[str, Any], given: TuneConfig | None, force: bool) -> TuneConfig:
    recorded = meta.get("tune_config") or {}
    searcher, scheduler = meta.get("searcher"), meta.get("scheduler")
    if given is None:
        for kind, name, default, arg in (
            ("searcher", searcher, _DEFAULT_SEARCHER, "search_alg"),
            ("scheduler", scheduler, _DEFAULT_SCHEDULER, "scheduler"),
        ):
            if name != default:
                raise ValueError(
                    f"this experiment used the {kind} {name}; pass it again with "
                    f"tune_config=TuneConfig({arg}={name}(...), ...) and its saved state "
                    "is loaded into it"
                )
        return TuneConfig(**recorded)
    given.validate()
    same = {k: getattr(given, k) for k in ("metric", "mode")}
    _check_same("tune_config", {k: recorded.get(k) for k in same}, same, force)
    for kind, name, obj in (
        ("searcher", searcher, given.search_alg),
        ("scheduler", scheduler, given.scheduler),
    ):
        now = type(obj).__name__ if obj is not None else None
        default = _DEFAULT_SEARCHER if kind == "searcher" else _DEFAULT_SCHEDULER
        if (now or default) != name and not force:
            raise ValueError(
                f"the experiment's {kind} was {name}, the tune_config given has "
                f"{now or default}; its saved state would not fit (force=True starts "
                f"the new {kind} without it)"
            )
    return given


def _run_config(meta: dict[str, Any], given: RunConfig | None, force: bool) -> RunConfig:
    recorded = meta.get("run_config") or {}
    if given is None:
        if meta.get("stop_kind") == "custom":
            raise ValueError(
                "this experiment used a stop function or Stopper, which the store cannot "
                "hold; pass it again with run_config=RunConfig(stop=...)"
            )
        return RunConfig(
            stop=meta.get("stop"),
            verbose=recorded.get("verbose", 1),
            resources=recorded.get("resources"),
            checkpoint_config=CheckpointConfig(**recorded.get("checkpoint_config", {})),
            failure_config=FailureConfig(**recorded.get("failure_config", {})),
        )
    given.validate()
    if isinstance(given.stop, dict) or meta.get("stop_kind") == "dict":
        _check_same("run_config.stop", meta.get("stop"), given.stop, force)
    return given


def _check_same(what: str, recorded: Any, given: Any, force: bool) -> None:
    """Refuse a changed setting unless forced, showing the difference."""
    given = _functions_as_recorded(recorded, json.loads(json.dumps(given, default=str)))
    old, new = _canonical(recorded), _canonical(given)
    if old == new or force:
        return
    diff = difflib.unified_diff(
        old.splitlines(), new.splitlines(), "recorded", "given", lineterm="", n=1
    )
    raise ValueError(
        f"{what} differs from the one this experiment was started with; a resumed "
        "experiment would mix results of two different setups. Pass force=True to "
        "resume anyway, or start a new experiment.\n" + "\n".join(diff)
    )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, indent=1, default=str)


def _functions_as_recorded(recorded: Any, given: Any) -> Any:
    """`given`, its sample_from functions taken as the recorded ones (they cannot be
    compared)."""
    if _is_function(recorded) and _is_function(given):
        return recorded
    if isinstance(recorded, dict) and isinstance(given, dict):
        return {k: _functions_as_recorded(recorded.get(k), v) for k, v in given.items()}
    if isinstance(recorded, list) and isinstance(given, list) and len(recorded) == len(given):
        return [_functions_as_recorded(r, g) for r, g in zip(recorded, given, strict=True)]
    return given


def _is_function(value: Any) -> bool:
    return isinstance(value, dict) and value.get("__domain__") == "sample_from"


def _decide_trials(
    state: ResumeState, resume_unfinished: bool, resume_errored: bool, restart_errored: bool
) -> None:
    for trial in state.trials:
        status = trial.status
        if status is TrialStatus.TERMINATED:
            continue
        if status is TrialStatus.ERROR:
            if not (resume_errored or restart_errored):
                continue
            if restart_errored:
                state.from_scratch.append(trial.trial_id)
            trial.attempt += 1
            state.retry_base[trial.trial_id] = trial.attempt
            trial.error = None
            trial.ended_at = None
            trial.status = TrialStatus.PAUSED if trial.epoch else TrialStatus.PENDING
            state.changed.append((trial, "restart" if restart_errored else "resume errored"))
        elif resume_unfinished:
            trial.status = TrialStatus.PAUSED if trial.epoch else TrialStatus.PENDING
            state.changed.append((trial, "resume"))
        else:
            trial.status = TrialStatus.TERMINATED
            trial.stop_reason = StopCause.NOT_RESUMED
            state.changed.append((trial, "not resumed"))
