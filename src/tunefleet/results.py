"""Ray Tune's result API: `ResultGrid`, `Result`, `ExperimentAnalysis`, `TrialError`.

Everything here is read from the experiment's database (`tunefleet.store`), so it
works on a finished experiment, on one that is still running (a snapshot of what
was flushed), and on one copied or moved elsewhere.

Differences from Ray Tune, on purpose:

- When no trial qualifies as best, `get_best_result` / `get_best_trial` raise an
  error naming the metric and the metrics that exist (Ray's ExperimentAnalysis
  returns None, which fails later and far from the cause).
- With ``filter_nan_and_inf=False``, NaN ranks last instead of depending on trial
  order. ``scope="all"`` takes each trial's best value that is not NaN (and, when
  filtering, not infinite), so one bad iteration does not disqualify a trial.

pandas is optional: only the methods that return DataFrames import it. The
reading, ranking and table building shared by these classes is in
`tunefleet.progress.snapshot`; `Result` and `ResultGrid` stay defined here so pickles name
this module.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunefleet._metrics import (
    MetricSpec,
    ModeSpec,
    flatten,
    is_feasible,
    metric_value,
    objective_point,
    pareto_front,
)
from tunefleet.progress.snapshot import MODES as MODES
from tunefleet.progress.snapshot import SCOPES as SCOPES
from tunefleet.progress.snapshot import (
    _dataframe,
    _metric_and_mode,
    _ordered_columns,
    _Snapshot,
)
from tunefleet.storage.checkpoint import Checkpoint
from tunefleet.trial import FailureKind, FailureRecord, Trial, TrialStatus

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger("tunefleet")


class TrialError(Exception):
    """Why a trial ended in ERROR; ``str()`` is the cause in one line.

    Attributes:
        failure: the full `FailureRecord` (kind, message, traceback, stderr tail...).
        trial_id: the failed trial.
    """

    def __init__(self, failure: FailureRecord, trial_id: str) -> None:
        super().__init__(failure.one_line())
        self.failure = failure
        self.trial_id = trial_id

    @property
    def kind(self) -> FailureKind:
        """EXCEPTION, CRASH, OOM, TIMEOUT..."""
        return self.failure.kind

    @property
    def traceback(self) -> str | None:
        """The trainable's traceback if it raised (`stderr_tail` has a crash's last words)."""
        return self.failure.traceback

    @property
    def stderr_tail(self) -> str | None:
        return self.failure.stderr_tail

    def __str__(self) -> str:
        return self.failure.one_line()

    def __reduce__(self) -> tuple[Any, ...]:
        return (TrialError, (self.failure, self.trial_id))


@dataclass
class Result:
    """The outcome of one trial, as Ray Tune's `Result`.

    Attributes:
        metrics: the last reported result (None if it reported nothing).
        config: the trial's configuration.
        checkpoint: its latest checkpoint, or None.
        error: a `TrialError` if the trial ended in ERROR, else None.
        path: the trial's directory.
        best_checkpoints: ``(Checkpoint, metrics)`` of its checkpoints still on disk,
            oldest first.
        status: ``"TERMINATED"``, ``"ERROR"``, ``"RUNNING"``...
        trial_id: the trial's id.
    """

    metrics: dict[str, Any] | None
    config: dict[str, Any]
    checkpoint: Checkpoint | None
    error: TrialError | None
    path: str
    best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]]
    status: str
    trial_id: str
    _experiment: _Snapshot | None = field(default=None, repr=False, compare=False)

    @property
    def feasible(self) -> bool | None:
        """Whether the last result meets the experiment's `TuneConfig.constraints`
        (every named value reported and <= 0); None when there are none."""
        names = self._experiment.constraints if self._experiment else []
        if not names:
            return None
        return is_feasible(self.metrics or {}, names)

    @property
    def metrics_dataframe(self) -> pd.DataFrame:
        """Every result the trial reported, one row each (nested keys joined with "/")."""
        history = self._experiment.history().get(self.trial_id, []) if self._experiment else []
        return _dataframe("Result.metrics_dataframe", [flatten(r) for r in history])


def _result(experiment: _Snapshot, trial: Trial) -> Result:
    """The `Result` of `trial`, reading its checkpoints from `experiment`."""
    error = None
    if trial.status is TrialStatus.ERROR and trial.error is not None:
        error = TrialError(trial.error, trial.trial_id)
    return Result(
        metrics=dict(trial.last_result) if trial.last_result is not None else None,
        config=trial.config,
        checkpoint=Checkpoint(trial.latest_checkpoint) if trial.latest_checkpoint else None,
        error=error,
        path=trial.path,
        best_checkpoints=[
            (Checkpoint(path), metrics)
            for _, path, metrics in experiment.checkpoints.get(trial.trial_id, [])
        ],
        status=trial.status.value,
        trial_id=trial.trial_id,
        _experiment=experiment,
    )


class ResultGrid:
    """The results of every trial of an experiment, as Ray Tune's `ResultGrid`.

    Args:
        experiment_path: the experiment directory (or its database, or its name
            under the default storage path).
        metric: default metric for `get_best_result` (default: the experiment's).
        mode: ``"min"`` or ``"max"`` (default: the experiment's).

    Example:
        >>> grid = ResultGrid("~/tunefleet_results/lstm")  # doctest: +SKIP
        >>> best = grid.get_best_result(metric="val_loss", mode="min")  # doctest: +SKIP
        >>> best.config, best.checkpoint  # doctest: +SKIP
    """

    def __init__(
        self,
        experiment_path: str | os.PathLike[str],
        *,
        metric: MetricSpec = None,
        mode: ModeSpec = None,
    ) -> None:
        self._experiment = _Snapshot(experiment_path)
        self._metric: MetricSpec = metric or self._experiment.meta.get("metric")
        self._mode: ModeSpec = mode or self._experiment.meta.get("mode")
        self._results = [_result(self._experiment, t) for t in self._experiment.trials]

    @property
    def experiment_path(self) -> str:
        """The experiment directory."""
        return str(self._experiment.path)

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, i: int) -> Result:
        return self._results[i]

    def __iter__(self) -> Iterator[Result]:
        return iter(self._results)

    @property
    def errors(self) -> list[TrialError]:
        """The errors of the trials that ended in ERROR."""
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        """How many trials ended in ERROR."""
        return len(self.errors)

    @property
    def num_terminated(self) -> int:
        """How many trials ended in TERMINATED (finished or stopped on purpose)."""
        return sum(r.status == TrialStatus.TERMINATED.value for r in self._results)

    def get_best_result(
        self,
        metric: str | None = None,
        mode: str | None = None,
        scope: str = "last",
        filter_nan_and_inf: bool = True,
    ) -> Result:
        """The result of the best trial.

        Args:
            metric: the metric to rank by (default: the grid's / experiment's).
            mode: ``"min"`` or ``"max"`` (default: the grid's / experiment's).
            scope: which values of each trial count: ``"last"`` (its last value),
                ``"avg"`` (mean of all), ``"last-5-avg"``, ``"last-10-avg"``, or
                ``"all"`` (its best value at any iteration).
            filter_nan_and_inf: skip NaN and infinite values.

        Raises:
            ValueError: no metric or mode anywhere, or a bad mode or scope.
            RuntimeError: no trial has a usable value of the metric.
        """
        where = "ResultGrid.get_best_result()"
        metric_, mode_ = metric or self._metric, mode or self._mode
        if isinstance(metric_, list) or isinstance(mode_, list):
            raise ValueError(
                f"{where}: the experiment has several objectives (metric={metric_!r}); "
                "there is no single best trial. Use get_pareto_front(), or pass metric= and "
                "mode= to rank by one of them"
            )
        trial = self._experiment.best_trial(metric_, mode_, scope, filter_nan_and_inf, where)
        return next(r for r in self._results if r.trial_id == trial.trial_id)

    def get_pareto_front(
        self, metric: list[str] | None = None, mode: list[str] | str | None = None
    ) -> list[Result]:
        """The trials no other trial beats in every objective (their last results).

        Args:
            metric: the objectives (default: the experiment's, `TuneConfig.metric`).
            mode: one mode per objective, or one for all (default: the experiment's).

        Trials that did not report every objective as a finite number, and with
        `TuneConfig.constraints` the infeasible ones, are left out. Order: the
        trials' order.
        """
        where = "ResultGrid.get_pareto_front()"
        metric_ = metric if metric is not None else self._metric
        mode_ = mode if mode is not None else self._mode
        if isinstance(metric_, str):
            metric_ = [metric_]
        if not metric_:
            raise ValueError(
                f"{where}: no objectives given. Pass metric=[...] and mode=[...], or set "
                "TuneConfig(metric=[...], mode=[...]) when running the experiment"
            )
        if isinstance(mode_, str) or mode_ is None:
            mode_ = [mode_] * len(metric_)  # type: ignore[list-item]
        if len(mode_) != len(metric_) or any(m not in MODES for m in mode_):
            raise ValueError(
                f"{where}: mode={mode_!r} does not fit metric={metric_!r}: give 'min' or "
                "'max' per objective"
            )
        pairs = list(zip(metric_, mode_, strict=True))
        candidates: list[tuple[Result, list[float]]] = []
        for result in self._results:
            if result.feasible is False:
                continue
            point = objective_point(result.metrics or {}, pairs)
            if point is not None:
                candidates.append((result, point))
        return [candidates[i][0] for i in pareto_front([p for _, p in candidates])]

    def get_dataframe(
        self, filter_metric: str | None = None, filter_mode: str | None = None
    ) -> pd.DataFrame:
        """One row per trial: flattened metrics, ``config/...`` columns, trial_id, logdir.

        Args:
            filter_metric: with `filter_mode`, take each trial's best row by this
                metric instead of its last one.
            filter_mode: ``"min"`` or ``"max"``.
        """
        if (filter_metric is None) != (filter_mode is None):
            raise ValueError(
                "ResultGrid.get_dataframe(): give both filter_metric and filter_mode, or neither "
                f"(got filter_metric={filter_metric!r}, filter_mode={filter_mode!r})"
            )
        return self._experiment.table(filter_metric, filter_mode, "ResultGrid.get_dataframe()")

    def __repr__(self) -> str:
        return f"ResultGrid({self.experiment_path!r}, {len(self)} trials, {self.num_errors} errors)"


class ExperimentAnalysis:
    """Ray Tune's legacy analysis object (what `tune.run` returns).

    Args:
        experiment_path: the experiment directory (or its database, or its name).
        default_metric: metric of the ``best_*`` properties (default: the experiment's).
        default_mode: ``"min"`` or ``"max"`` (default: the experiment's).
    """

    def __init__(
        self,
        experiment_path: str | os.PathLike[str],
        *,
        default_metric: str | None = None,
        default_mode: str | None = None,
    ) -> None:
        self._experiment = _Snapshot(experiment_path)
        self.default_metric: str | None = default_metric or self._experiment.meta.get("metric")
        self.default_mode: str | None = default_mode or self._experiment.meta.get("mode")

    @property
    def experiment_path(self) -> str:
        """The experiment directory."""
        return str(self._experiment.path)

    @property
    def trials(self) -> list[Trial]:
        """Every trial, by index."""
        return list(self._experiment.trials)

    @property
    def results(self) -> dict[str, dict[str, Any] | None]:
        """Trial id -> its last result."""
        return {t.trial_id: t.last_result for t in self._experiment.trials}

    @property
    def best_trial(self) -> Trial:
        """The best trial by the default metric and mode, scope ``"last"``."""
        return self.get_best_trial(scope="last")

    @property
    def best_config(self) -> dict[str, Any]:
        """The configuration of `best_trial`."""
        return self.best_trial.config

    @property
    def best_result(self) -> dict[str, Any]:
        """The last result of `best_trial`."""
        return self.best_trial.last_result or {}

    @property
    def best_checkpoint(self) -> Checkpoint | None:
        """The best checkpoint of `best_trial` (by the default metric and mode)."""
        return self.get_best_checkpoint(self.best_trial)

    @property
    def best_logdir(self) -> str:
        """The directory of `best_trial`."""
        return self.best_trial.path

    @property
    def best_dataframe(self) -> pd.DataFrame:
        """Every result of `best_trial`."""
        history = self._experiment.history().get(self.best_trial.trial_id, [])
        return _dataframe("ExperimentAnalysis.best_dataframe", [flatten(r) for r in history])

    @property
    def best_result_df(self) -> pd.DataFrame:
        """The last result of `best_trial` as a one-row DataFrame indexed by trial_id."""
        return self.results_df.loc[[self.best_trial.trial_id]]

    @property
    def results_df(self) -> pd.DataFrame:
        """The last result of every trial, one row each, indexed by trial_id."""
        rows = [
            {**flatten(t.last_result or {}), "trial_id": t.trial_id}
            for t in self._experiment.trials
        ]
        frame = _dataframe("ExperimentAnalysis.results_df", rows, _ordered_columns(rows))
        return frame.set_index("trial_id")

    @property
    def trial_dataframes(self) -> dict[str, pd.DataFrame]:
        """Trial directory -> DataFrame of all its results."""
        name = "ExperimentAnalysis.trial_dataframes"
        history = self._experiment.history()
        return {
            t.path: _dataframe(name, [flatten(r) for r in history.get(t.trial_id, [])])
            for t in self._experiment.trials
        }

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> pd.DataFrame:
        """One row per trial: its last result, or its best by `metric` and `mode` if given."""
        if mode is not None and metric is None:
            raise ValueError(
                f"ExperimentAnalysis.dataframe(): mode={mode!r} was given without a metric"
            )
        return self._experiment.table(metric, mode, "ExperimentAnalysis.dataframe()")

    def get_best_trial(
        self,
        metric: str | None = None,
        mode: str | None = None,
        scope: str = "last",
        filter_nan_and_inf: bool = True,
    ) -> Trial:
        """The best trial; same rules and errors as `ResultGrid.get_best_result`."""
        return self._experiment.best_trial(
            metric or self.default_metric,
            mode or self.default_mode,
            scope,
            filter_nan_and_inf,
            "ExperimentAnalysis.get_best_trial()",
        )

    def get_best_config(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> dict[str, Any]:
        """The configuration of the best trial."""
        return self.get_best_trial(metric, mode, scope).config

    def get_best_logdir(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> str:
        """The directory of the best trial."""
        return self.get_best_trial(metric, mode, scope).path

    def get_best_checkpoint(
        self, trial: Trial | str, metric: str | None = None, mode: str | None = None
    ) -> Checkpoint | None:
        """The trial's best checkpoint still on disk, ranked by the metrics it was saved with.

        Args:
            trial: a `Trial`, a trial id, or a trial directory.
            metric: default: the analysis' metric, else ``training_iteration`` (the latest).
            mode: default: the analysis' mode (``"max"`` for ``training_iteration``).

        Returns:
            The checkpoint, or None if the trial has none with a finite value of the metric.
        """
        found = self._find(trial)
        if metric is None and self.default_metric is None:
            metric, mode = "training_iteration", mode or "max"
        metric, mode = _metric_and_mode(
            metric or self.default_metric, mode or self.default_mode, "get_best_checkpoint()"
        )
        sign = 1.0 if mode == "min" else -1.0
        best: tuple[float, str] | None = None
        for _, path, metrics in self._experiment.checkpoints.get(found.trial_id, []):
            value = metric_value(metrics, metric)
            if (
                value is not None
                and math.isfinite(value)
                and (best is None or sign * value <= best[0])
            ):
                best = (sign * value, path)  # `<=`: on ties the newer checkpoint wins
        if best is None:
            logger.warning(
                "Trial %s has no checkpoint with a finite %r on disk", found.trial_id, metric
            )
            return None
        return Checkpoint(best[1])

    def get_last_checkpoint(
        self,
        trial: Trial | str | None = None,
        metric: str = "training_iteration",
        mode: str = "max",
    ) -> Checkpoint | None:
        """The latest checkpoint still on disk of `trial` (default: `best_trial`)."""
        return self.get_best_checkpoint(self.best_trial if trial is None else trial, metric, mode)

    def get_all_configs(self, prefix: bool = False) -> dict[str, dict[str, Any]]:
        """Trial directory -> configuration (flattened with ``config/`` keys if `prefix`)."""
        return {
            t.path: flatten(t.config, prefix="config/") if prefix else t.config
            for t in self._experiment.trials
        }

    def _find(self, trial: Trial | str) -> Trial:
        key = trial.trial_id if isinstance(trial, Trial) else os.fspath(trial)
        for t in self._experiment.trials:
            if key in (t.trial_id, t.path):
                return t
        ids = ", ".join(t.trial_id for t in self._experiment.trials[:5])
        raise KeyError(f"No trial {key!r} in {self.experiment_path} (trials: {ids or 'none'})")

    def __repr__(self) -> str:
        return (
            f"ExperimentAnalysis({self.experiment_path!r}, {len(self._experiment.trials)} trials)"
        )


__all__ = [
    "ExperimentAnalysis",
    "Result",
    "ResultGrid",
    "TrialError",
]
