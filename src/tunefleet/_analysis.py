"""`ExperimentAnalysis`, Ray Tune's analysis object (what `tune.run` returns).

Re-exported by `tunefleet.results`, where `ResultGrid` wraps one. Everything is keyed
by trial id and shaped as in Ray Tune 2.x; the data comes from the experiment's
database (`tunefleet.progress.snapshot`).
"""

from __future__ import annotations

import difflib
import logging
import math
import os
from typing import TYPE_CHECKING, Any

from tunefleet import _collector
from tunefleet._metrics import MISSING, flatten, lookup, metric_value
from tunefleet._redact import Secret, is_secret_key, redact
from tunefleet.progress.snapshot import (
    MODES,
    SCOPES,
    _dataframe,
    _ordered_columns,
    _Snapshot,
    exploits_by_trial,
    history_rows,
)
from tunefleet.storage.checkpoint import Checkpoint
from tunefleet.trial import Trial

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pandas as pd

logger = logging.getLogger("tunefleet")

# what a trial read from the store takes from its equal run record (`_of_run`)
_SHARED = ("trial_id", "name", "path", "resources", "created_at", "started_at", "ended_at")
_ANONYMOUS_METRIC = "_metric"  # Ray's DEFAULT_METRIC: a mode without a metric ranks by it
_NO_DEFAULTS = (
    "ExperimentAnalysis.{name}: no metric given, and no default metric and mode. Pass "
    "metric= and mode= to tune.run() (or TuneConfig(metric=..., mode=...)), or call "
    "{instead} with them"
)


class ExperimentAnalysis:
    """The results of an experiment, as Ray Tune's `ExperimentAnalysis`.

    Args:
        experiment_checkpoint_path: the experiment directory (or its database, a file
            in it such as Ray's ``experiment_state.json``, or its name under the
            default storage path).
        storage_filesystem: the fsspec filesystem of the experiment's storage (kept as
            `filesystem`; the database is read locally).
        trials: the trials to analyse (default: every trial of the experiment).
        default_metric: metric of the ``best_*`` properties (default: the experiment's).
        default_mode: ``"min"`` or ``"max"`` (default: the experiment's).

    Example:
        >>> analysis = tune.ExperimentAnalysis("~/tunefleet_results/exp")  # doctest: +SKIP
        >>> analysis.get_best_config(metric="loss", mode="min")  # doctest: +SKIP
    """

    @_collector.paused()  # every trial of the experiment read back
    def __init__(
        self,
        experiment_checkpoint_path: str | os.PathLike[str],
        *,
        storage_filesystem: Any = None,
        trials: Iterable[Trial] | None = None,
        default_metric: str | None = None,
        default_mode: str | None = None,
    ) -> None:
        path = os.fspath(experiment_checkpoint_path)
        if path.endswith(".json") and os.path.isfile(path):
            path = os.path.dirname(path)  # Ray's experiment_state.json names its directory
        if default_mode is not None and default_mode not in MODES:
            raise ValueError(
                f"ExperimentAnalysis: default_mode={default_mode!r} is not valid; "
                "choose 'min' or 'max' (or None)"
            )
        self._experiment = _Snapshot(path, *((self._take_own, self._whole) if self._own else ()))
        if trials is not None:
            self._experiment.trials = list(trials)
            for trial in self._experiment.trials:  # Ray's last results hold the config
                trial.last_result = last_result_with_config(trial)
        else:  # read from the store just now: nobody else holds them, so no copy
            for trial in self._experiment.trials:
                if trial.last_result and trial.last_result.get("config") is not trial.config:
                    trial.last_result["config"] = trial.config
        self.filesystem = storage_filesystem
        self.default_metric: str | None = default_metric or self._experiment.meta.get("metric")
        self.default_mode: str | None = default_mode or self._experiment.meta.get("mode")
        if self.default_metric is None and self.default_mode is not None:
            self.default_metric = _ANONYMOUS_METRIC

    _own: dict[str, Trial] = {}  # never changed here: `_of_run` sets its own

    @classmethod
    def _of_run(cls, path: str, live: Iterable[Trial], **kwargs: Any) -> ExperimentAnalysis:
        """The analysis of the experiment at `path` with the run's own trial records
        (`live`, what `Tuner.fit()` ran here) instead of their JSON copies in the store, as
        Ray Tune's in-process results hold the trial's objects (a tuple stays a tuple, a
        `tune.Secret` a Secret). What the store hides stays hidden: a record is taken
        whole where it hides nothing of it (`_whole`), else its stored trial takes its
        values as it is read. One record per trial at any time."""
        self = cls.__new__(cls)
        self._own = {t.trial_id: t for t in live}
        self.__init__(path, **kwargs)  # type: ignore[misc]
        self._own = {}
        return self

    def _whole(self, trial_id: str) -> Trial | None:
        """The run's own record of the trial, taken as it is (its stored row is not even
        decoded), unless the store hides something of its config or last result, or it
        has a failure record (whose text the store may hide more of)."""
        found = self._own.get(trial_id)
        if found is None or found.error is not None or shown(found.config) is not found.config:
            return None
        if shown(found.last_result) is not found.last_result:
            return None
        found.last_result = last_result_with_config(found)
        return found

    def _take_own(self, trial: Trial) -> Trial:
        found = self._own.get(trial.trial_id)
        if found is not None:
            trial.config = shown(found.config)
            trial.last_result = shown(found.last_result)
            trial.last_result = last_result_with_config(trial)
            for key in _SHARED:  # one object, not two equal ones
                if getattr(trial, key) == getattr(found, key):
                    setattr(trial, key, getattr(found, key))
        return trial

    @property
    def experiment_path(self) -> str:
        """The experiment directory."""
        return str(self._experiment.path)

    @property
    def trials(self) -> list[Trial]:
        """Every trial, in the order they were created."""
        return self._experiment.trials

    # -- every trial ---------------------------------------------------------------------------
    @property
    def results(self) -> dict[str, dict[str, Any]]:
        """Trial id -> its last result with its ``config`` in it, as in Ray Tune (``{}``
        if it reported nothing)."""
        return {t.trial_id: last_result_with_config(t) for t in self.trials}

    @property
    def results_df(self) -> pd.DataFrame:
        """The last result of every trial, one row each (nested keys joined with "/", the
        config as ``config/<key>`` columns), indexed by trial_id."""
        rows = [
            {**flatten(last_result_with_config(t)), "trial_id": t.trial_id} for t in self.trials
        ]
        frame = _dataframe("ExperimentAnalysis.results_df", rows, _ordered_columns(rows))
        return frame.set_index("trial_id")

    @property
    def trial_dataframes(self) -> dict[str, pd.DataFrame]:
        """Trial id -> every result it reported, one row each (empty if none), with the
        config in effect for it as ``config/<key>`` columns, as Ray Tune's."""
        name = "ExperimentAnalysis.trial_dataframes"
        history = self._experiment.history()
        exploits = exploits_by_trial(self._experiment)
        return {
            t.trial_id: _dataframe(
                name, history_rows(t, history.get(t.trial_id, []), exploits.get(t.trial_id, []))
            )
            for t in self.trials
        }

    def fetch_trial_dataframes(self) -> dict[str, pd.DataFrame]:
        """`trial_dataframes`, read again from the experiment's database."""
        self._experiment.forget_history()
        return self.trial_dataframes

    def get_all_configs(self, prefix: bool = False) -> dict[str, dict[str, Any]]:
        """Trial id -> configuration (flattened with ``config/`` keys if `prefix`)."""
        return {
            t.trial_id: flatten(t.config, prefix="config/") if prefix else t.config
            for t in self.trials
        }

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> pd.DataFrame:
        """One row per trial: its last result, or with `metric` and `mode` the result
        where `metric` was best; with ``config/...`` columns, trial_id and logdir."""
        if mode is not None and metric is None:
            raise ValueError(
                f"ExperimentAnalysis.dataframe(): mode={mode!r} was given without a metric"
            )
        return self._experiment.table(metric, mode, "ExperimentAnalysis.dataframe()")

    # -- the best trial ------------------------------------------------------------------------
    def get_best_trial(
        self,
        metric: str | None = None,
        mode: str | None = None,
        scope: str = "last",
        filter_nan_and_inf: bool = True,
    ) -> Trial | None:
        """The best trial, or None (with a warning saying why) if no trial qualifies.

        Args:
            metric: the metric to rank by (default: `default_metric`).
            mode: ``"min"`` or ``"max"`` (default: `default_mode`).
            scope: ``"last"``, ``"avg"``, ``"last-5-avg"``, ``"last-10-avg"`` or ``"all"``
                (each trial's best value), as in `ResultGrid.get_best_result`.
            filter_nan_and_inf: skip NaN and infinite values.

        As in Ray Tune, an experiment of one trial returns that trial.

        Raises:
            ValueError: no metric or mode given and no default, or a bad mode or scope.
        """
        where = "ExperimentAnalysis.get_best_trial()"
        if scope not in SCOPES:
            raise ValueError(
                f"{where}: scope={scope!r} is not valid; "
                f"choose one of {', '.join(map(repr, SCOPES))}"
            )
        if len(self.trials) == 1:
            return self.trials[0]
        found, why = self._experiment.find_best(
            metric or self.default_metric,
            mode or self.default_mode,
            scope,
            filter_nan_and_inf,
            where,
        )
        if found is None:
            logger.warning("%s", no_best(metric or self.default_metric, why))
        return found

    def get_best_config(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> dict[str, Any] | None:
        """The configuration of the best trial, or None if no trial qualifies."""
        best = self.get_best_trial(metric, mode, scope)
        return best.config if best is not None else None

    def get_best_logdir(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> str | None:
        """The directory of the best trial, or None if no trial qualifies."""
        best = self.get_best_trial(metric, mode, scope)
        return best.path if best is not None else None

    @property
    def best_trial(self) -> Trial | None:
        """The best trial by the default metric and mode, scope ``"last"``."""
        self._need_defaults("best_trial", "get_best_trial()")
        return self.get_best_trial()

    @property
    def best_config(self) -> dict[str, Any] | None:
        """The configuration of `best_trial`."""
        self._need_defaults("best_config", "get_best_config()")
        return self.get_best_config()

    @property
    def best_result(self) -> dict[str, Any]:
        """The last result of `best_trial`."""
        return last_result_with_config(self._best("best_result", "get_best_trial().last_result"))

    @property
    def best_checkpoint(self) -> Checkpoint | None:
        """The best checkpoint of `best_trial` by the default metric and mode."""
        best = self._best("best_checkpoint", "get_best_checkpoint(trial, metric, mode)")
        return self.get_best_checkpoint(best, self.default_metric, self.default_mode)

    @property
    def best_logdir(self) -> str:
        """The directory of `best_trial`."""
        return self._best("best_logdir", "get_best_logdir()").path

    @property
    def best_dataframe(self) -> pd.DataFrame:
        """Every result of `best_trial`, one row each."""
        best = self._best("best_dataframe", "get_best_trial() and trial_dataframes")
        return self.trial_dataframes[best.trial_id]

    @property
    def best_result_df(self) -> pd.DataFrame:
        """The last result of `best_trial` as a one-row DataFrame indexed by trial_id."""
        best = self._best("best_result_df", "get_best_trial() and results_df")
        return self.results_df.loc[[best.trial_id]]

    def _need_defaults(self, name: str, instead: str) -> None:
        if not self.default_metric or not self.default_mode:
            raise ValueError(_NO_DEFAULTS.format(name=name, instead=instead))

    def _best(self, name: str, instead: str) -> Trial:
        """`best_trial`, which must exist: Ray fails later with an AttributeError."""
        self._need_defaults(name, instead)
        best = self.get_best_trial()
        if best is None:
            _, why = self._experiment.find_best(
                self.default_metric, self.default_mode, "last", True, f"ExperimentAnalysis.{name}"
            )
            raise ValueError(no_best(self.default_metric, why))
        return best

    # -- checkpoints ---------------------------------------------------------------------------
    def get_trial_checkpoints_paths(
        self, trial: Trial | str, metric: str | None = None
    ) -> list[tuple[str, Any]]:
        """``(path, value of metric)`` of each checkpoint of `trial` still on disk, oldest
        first (metric default: `default_metric`, else ``training_iteration``)."""
        found = self._find(trial)
        name = metric or self.default_metric or "training_iteration"
        return [
            (path, metric_value(metrics, name))
            for _, path, metrics in self._experiment.checkpoints_of(found.trial_id)
        ]

    def get_best_checkpoint(
        self, trial: Trial | str, metric: str | None = None, mode: str | None = None
    ) -> Checkpoint | None:
        """The trial's best checkpoint still on disk, ranked by the metrics it was saved with.

        Args:
            trial: a `Trial`, a trial id, or a trial directory.
            metric: default: `default_metric`, else ``training_iteration`` (the latest).
            mode: default: `default_mode`, else ``"max"``.

        Returns:
            The checkpoint, or None (logged) if the trial has none with a value of the
            metric that is not NaN. On a tie the newer checkpoint wins.
        """
        found = self._find(trial)
        name = metric or self.default_metric or "training_iteration"
        order = mode or self.default_mode or "max"
        if order not in MODES:
            raise ValueError(
                f"ExperimentAnalysis.get_best_checkpoint(): mode={order!r} is not valid; "
                "choose 'min' or 'max'"
            )
        sign = 1.0 if order == "min" else -1.0
        best: tuple[float, str] | None = None
        for _, path, metrics in self._experiment.checkpoints_of(found.trial_id):
            value = metric_value(metrics, name)
            if value is None or math.isnan(value):
                continue
            if best is None or sign * value <= best[0]:
                best = (sign * value, path)
        if best is None:
            logger.error(
                "No checkpoint of trial %s with a value of %r (that is not NaN) is on disk",
                found,
                name,
            )
            return None
        return Checkpoint(best[1])

    def get_last_checkpoint(
        self,
        trial: Trial | str | None = None,
        metric: str = "training_iteration",
        mode: str = "max",
    ) -> Checkpoint | None:
        """The latest checkpoint on disk of `trial` (default: the best trial by `metric`
        and `mode`, that is the one that ran longest)."""
        chosen = trial if trial is not None else self.get_best_trial(metric, mode)
        if chosen is None:
            return None
        return self.get_best_checkpoint(chosen, "training_iteration", "max")

    def _find(self, trial: Trial | str) -> Trial:
        key = trial.trial_id if isinstance(trial, Trial) else os.fspath(trial)
        for t in self.trials:
            if key in (t.trial_id, t.path, t.name):
                return t
        ids = ", ".join(t.trial_id for t in self.trials[:5])
        raise KeyError(f"No trial {key!r} in {self.experiment_path} (trials: {ids or 'none'})")

    def __repr__(self) -> str:
        return f"ExperimentAnalysis({self.experiment_path!r}, {len(self.trials)} trials)"


def no_best(metric: str | None, why: str) -> str:
    """Ray Tune's first words when no trial qualifies as best, then our details (`why`)."""
    return f"No best trial found for the given metric: {metric}. {why}"


def shown(value: Any, depth: int = 0) -> Any:
    """`value` (a live config or result) with what the store hides hidden, the rest kept
    as it is (types, objects, `Secret`s); parts with nothing hidden are not copied."""
    if isinstance(value, str):
        hidden = redact(value)  # URL passwords and the like
        return value if hidden == value else hidden
    if depth > 64 or not isinstance(value, dict | list | tuple):
        return value
    if isinstance(value, dict):
        if redact(value) is value:  # nothing in it hidden (one walk): keep it whole
            return value
        out: dict[Any, Any] | None = None
        for key, item in value.items():
            if item is None or isinstance(item, bool | int | float | Secret):
                continue
            if isinstance(item, str) or (isinstance(key, str) and is_secret_key(key)):
                new = redact({key: item})[key]  # the store's rules for this key
            else:
                new = shown(item, depth + 1)
            if new is not item and not (isinstance(item, str) and new == item):
                out = dict(value) if out is None else out
                out[key] = new
        return value if out is None else out
    items = [shown(item, depth + 1) for item in value]
    if all(new is old for new, old in zip(items, value, strict=True)):
        return value
    if isinstance(value, list):
        return items
    return type(value)(*items) if hasattr(value, "_fields") else tuple(items)


# -- each result with the config it was reported under ---------------------------------------------
def last_result_with_config(trial: Trial) -> dict[str, Any]:
    """The trial's last result with ``"config"`` in it, as Ray Tune's (``{}`` if none)."""
    if not trial.last_result:
        return {}
    if trial.last_result.get("config") is trial.config:
        return trial.last_result
    return {**trial.last_result, "config": trial.config}


# -- Result.get_best_checkpoint ---------------------------------------------------------------
def best_checkpoint_of(
    trial_id: str, saved: list[tuple[Checkpoint, dict[str, Any]]], metric: str, mode: str
) -> Checkpoint:
    """The checkpoint in `saved` (oldest first) whose `metric` is best: Ray's rules (a
    checkpoint without the metric is left out, the older wins a tie), NaN ranking last."""
    where = "Result.get_best_checkpoint()"
    if not isinstance(metric, str) or not metric:
        raise ValueError(
            f"{where}: metric={metric!r} is not valid; give the name of a metric the "
            "checkpoints were saved with (a non-empty string)"
        )
    if mode not in MODES:
        raise ValueError(f"{where}: mode={mode!r} is not valid; choose 'min' or 'max'")
    if not saved:
        raise RuntimeError(f"{where}: trial {trial_id} has no checkpoint on disk")
    sign = 1.0 if mode == "min" else -1.0
    best: tuple[tuple[bool, float], Checkpoint] | None = None
    for checkpoint, metrics in saved:
        raw = lookup(metrics, metric)
        if raw is MISSING:
            continue
        value = metric_value(metrics, metric)
        if value is None:
            raise ValueError(
                f"{where}: the value of {metric!r} saved with {checkpoint.path} is {raw!r}, "
                "not a number; checkpoints are ranked by a numeric metric"
            )
        score = (True, 0.0) if math.isnan(value) else (False, sign * value)
        if best is None or score < best[0]:
            best = (score, checkpoint)
    if best is None:
        names = sorted({str(k) for _, metrics in saved for k in flatten(metrics)})
        close = difflib.get_close_matches(metric, names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise RuntimeError(
            f"{where}: no checkpoint of trial {trial_id} was saved with {metric!r}.{hint} "
            f"Metrics saved with its checkpoints: {', '.join(names) or 'none'}"
        )
    return best[1]
