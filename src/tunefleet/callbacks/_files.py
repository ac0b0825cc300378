"""Per-trial files in Ray Tune's layout, for the tools that read them.

``params.json`` (the trial's config), ``result.json`` (one JSON line per result) and
``progress.csv`` (one row per result, nested keys joined with "/") in each trial's
directory. Configs and results are redacted first: a `tune.Secret` or a key that looks
like a credential is never written. The SQLite store stays the record; these are views.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from typing import IO, Any

import cloudpickle

from tunefleet._metrics import flatten
from tunefleet._redact import redact
from tunefleet.callbacks._base import LoggerCallback
from tunefleet.trial import Trial

_FLUSH_EVERY_S = 1.0  # files are flushed at most this often while trials run


def _json(obj: Any) -> str:
    return json.dumps(obj, default=str, sort_keys=True)


# result keys that are bookkeeping, not metrics to plot (the same numbers for every trial)
_NOT_METRICS = frozenset(
    {"done", "training_iteration", "timestamp", "pid", "trial_id", "date", "hostname"}
)


def numeric_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The result's finite numbers, flattened and redacted, bookkeeping keys left out."""
    out = {}
    for key, value in flatten(redact(result)).items():
        if key in _NOT_METRICS or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


def trial_dir(trial: Trial) -> str:
    """The trial's directory; Ray's names (``local_path``, ``logdir``) serve a trial-like object."""
    for name in ("path", "local_path", "logdir"):
        value = getattr(trial, name, None)
        if isinstance(value, (str, os.PathLike)):
            return os.fspath(value)
    raise TypeError(
        f"{type(trial).__name__} {trial!r} has no directory: a logger callback needs a trial "
        "with a `path` (Ray: `local_path` or `logdir`)"
    )


class _PerTrialFiles(LoggerCallback):
    """Opens a file per trial on its first start or result, closes it when it ends."""

    filename = ""

    def __init__(self) -> None:
        self._files: dict[str, IO[str]] = {}
        self._flushed = time.monotonic()

    def _open(self, trial: Trial) -> IO[str]:
        handle = self._files.get(trial.trial_id)
        if handle is None:
            os.makedirs(trial_dir(trial), exist_ok=True)
            path = os.path.join(trial_dir(trial), self.filename)
            handle = open(path, "a", newline="", encoding="utf-8")  # noqa: SIM115
            self._files[trial.trial_id] = handle
            self._opened(trial, handle)
        return handle

    def _opened(self, trial: Trial, handle: IO[str]) -> None:
        """Called once per trial and run, after its file is opened."""

    def _close(self, trial: Trial) -> None:
        handle = self._files.pop(trial.trial_id, None)
        if handle is not None:
            handle.close()

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        self._close(trial)

    def log_trial_start(self, trial: Trial) -> None:
        self._open(trial)

    def log_trial_restore(self, trial: Trial) -> None:
        self._open(trial)

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        now = time.monotonic()
        if now - self._flushed >= _FLUSH_EVERY_S:
            self._flushed = now
            for handle in self._files.values():
                handle.flush()

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()


class JsonLoggerCallback(_PerTrialFiles):
    """``params.json`` and ``result.json`` (a JSON line per result) per trial."""

    filename = "result.json"

    def _opened(self, trial: Trial, handle: IO[str]) -> None:
        config = redact(trial.config)
        with open(os.path.join(trial_dir(trial), "params.json"), "w", encoding="utf-8") as f:
            f.write(_json(config))
        try:  # Ray writes the config pickled too, for values JSON cannot hold
            pickled = cloudpickle.dumps(config)
        except Exception:  # a config that does not pickle has only the JSON
            return
        with open(os.path.join(trial_dir(trial), "params.pkl"), "wb") as f:
            f.write(pickled)

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        self._open(trial).write(_json(redact(result)) + "\n")


class CSVLoggerCallback(_PerTrialFiles):
    """``progress.csv`` per trial: its columns are the first result's keys (flattened).

    As in Ray Tune, keys that appear only in later results are left out of the file
    (they are in ``result.json`` and the store).
    """

    filename = "progress.csv"

    def __init__(self) -> None:
        super().__init__()
        self._writers: dict[str, csv.DictWriter[str]] = {}

    def _opened(self, trial: Trial, handle: IO[str]) -> None:
        self._writers.pop(trial.trial_id, None)  # made with the first result

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        handle = self._open(trial)
        row = flatten(redact(result))
        writer = self._writers.get(trial.trial_id)
        if writer is None:
            header = _existing_header(os.path.join(trial_dir(trial), self.filename)) or list(row)
            writer = csv.DictWriter(handle, fieldnames=header, extrasaction="ignore")
            if handle.tell() == 0:
                writer.writeheader()
            self._writers[trial.trial_id] = writer
        writer.writerow(row)

    def _close(self, trial: Trial) -> None:
        self._writers.pop(trial.trial_id, None)
        super()._close(trial)


def _existing_header(path: str) -> list[str] | None:
    """The columns of a progress.csv written by an earlier run of the trial (resume)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return next(csv.reader(f), None)
    except OSError:
        return None
