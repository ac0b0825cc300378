"""Ray Tune's result API: `ResultGrid`, `Result`, `ExperimentAnalysis`, `TrialError`.

Everything here is read from the experiment's database (`tunefleet.store`), so it
works on a finished experiment, on one that is still running (a snapshot of what
was flushed), and on one copied or moved elsewhere.

Differences from Ray Tune, on purpose:

- When no trial qualifies as best, `ResultGrid.get_best_result` raises (as Ray's does)
  with a message naming the metric and the metrics that exist;
  `ExperimentAnalysis.get_best_trial` returns None as Ray's does and logs why.
- With ``filter_nan_and_inf=False``, NaN ranks last instead of depending on trial
  order. ``scope="all"`` takes each trial's best value that is not NaN (and, when
  filtering, not infinite), so one bad iteration does not disqualify a trial.
- A trial's error is a `TrialError` that is also an instance of the exception type
  the trainable raised when that type is a built-in one (Ray: a `RayTaskError`
  made the same way).

pandas is optional: only the methods that return DataFrames import it. The
reading, ranking and table building shared by these classes is in
`tunefleet.progress.snapshot`, `ExperimentAnalysis` in `tunefleet._analysis`;
`Result` and `ResultGrid` stay defined here so pickles name this module.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunefleet import _collector
from tunefleet._analysis import (
    ExperimentAnalysis,
    best_checkpoint_of,
    last_result_with_config,
    no_best,
)
from tunefleet._metrics import (
    MetricSpec,
    ModeSpec,
    is_feasible,
    objective_point,
    pareto_front,
)
from tunefleet.progress.snapshot import MODES as MODES
from tunefleet.progress.snapshot import SCOPES as SCOPES
from tunefleet.progress.snapshot import (
    _dataframe,
    _metric_and_mode,
    _Snapshot,
    exploits_by_trial,
    history_rows,
)
from tunefleet.result import AUTO_RESULT_KEYS, RESOURCES
from tunefleet.storage.checkpoint import Checkpoint
from tunefleet.trial import FailureKind, FailureRecord, Trial, TrialStatus

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger("tunefleet")

# Left out of the metrics `repr(Result)` shows, as Ray Tune's: the automatic keys and
# those its progress output leaves out.
_NOT_SHOWN = frozenset(AUTO_RESULT_KEYS) | {
    "done",
    "trial_id",
    "experiment_tag",
    "should_checkpoint",
    "_report_on",
    RESOURCES,  # the trial's resource usage, in every result
}
_GRID_REPR_MAX = 20  # results a ResultGrid's repr lists; it says how many more there are


class TrialError(Exception):
    """Why a trial ended in ERROR; ``str()`` is the cause in one line.

    When the trainable raised a built-in exception (``ValueError``, ``KeyError``...),
    the error is also an instance of that type, so ``isinstance(result.error,
    ValueError)`` holds as with Ray's errors.

    Attributes:
        failure: the full `FailureRecord` (kind, message, traceback, stderr tail...).
        trial_id: the failed trial.
    """

    def __init__(self, failure: FailureRecord, trial_id: str) -> None:
        super().__init__(failure.one_line())
        self.failure = failure
        self.trial_id = trial_id

    @classmethod
    def of(cls, failure: FailureRecord, trial_id: str) -> TrialError:
        """The error of `failure`, an instance of the raised type when it is a built-in one."""
        return _error_class(failure.exception_type)(failure, trial_id)

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
        return (TrialError.of, (self.failure, self.trial_id))


@functools.cache
def _error_class(exception_type: str | None) -> type[TrialError]:
    """`TrialError` mixed with the built-in exception type named, if there is one."""
    cause = getattr(builtins, exception_type or "", None)
    if not isinstance(cause, type) or not issubclass(cause, Exception) or cause is Exception:
        return TrialError
    try:
        return type(f"TrialError({cause.__name__})", (TrialError, cause), {"__module__": __name__})
    except TypeError:  # a built-in whose layout cannot be mixed in
        return TrialError


_Saved = list[tuple[Checkpoint, dict[str, Any]]]


class _ReadWhenAsked:
    """`Result.best_checkpoints`: the list given, or, when None was given, the trial's
    checkpoints read from its experiment the first time they are asked for (then kept).
    A field of the dataclass whose default is this descriptor: it has no default."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}"

    def __get__(self, result: Result | None, owner: type | None = None) -> _Saved:
        if result is None:
            raise AttributeError(self._slot)  # the dataclass: no default value
        saved: _Saved | None = result.__dict__[self._slot]
        if saved is None:
            experiment = result._experiment
            rows = experiment.checkpoints_of(result.trial_id) if experiment is not None else []
            saved = [(Checkpoint(path), metrics) for _, path, metrics in rows]
            result.__dict__[self._slot] = saved
        return saved

    def __set__(self, result: Result, value: _Saved | None) -> None:
        result.__dict__[self._slot] = value


@dataclass
class Result:
    """The outcome of one trial, as Ray Tune's `Result`.

    Attributes:
        metrics: the last reported result, with the trial's ``config`` in it as in Ray
            Tune (``{}`` if it reported nothing).
        config: the trial's configuration.
        checkpoint: its latest checkpoint, or None.
        error: a `TrialError` if the trial ended in ERROR, else None.
        path: the trial's directory.
        best_checkpoints: ``(Checkpoint, metrics)`` of its checkpoints still on disk,
            oldest first (read from the experiment when first asked for; None given to
            the constructor means that).
        status: ``"TERMINATED"``, ``"ERROR"``, ``"RUNNING"``...
        trial_id: the trial's id.
    """

    metrics: dict[str, Any]
    config: dict[str, Any]
    checkpoint: Checkpoint | None
    error: TrialError | None
    path: str
    best_checkpoints: _ReadWhenAsked = _ReadWhenAsked()  # required: it has no default
    # mypy takes a descriptor for a default; the dataclass asks it and finds none
    status: str  # type: ignore[misc]
    trial_id: str  # type: ignore[misc]
    _experiment: _Snapshot | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        return self._repr(0)

    def _repr(self, indent: int) -> str:
        """Ray Tune's form: error type, metrics without the automatic keys, path,
        filesystem, checkpoint; one per line."""
        shown: dict[str, Any] = {}
        if self.error is not None:
            shown["error"] = type(self.error).__name__
        shown["metrics"] = {k: v for k, v in self.metrics.items() if k not in _NOT_SHOWN}
        shown["path"] = self.path
        shown["filesystem"] = "local"
        shown["checkpoint"] = self.checkpoint
        outer, inner = " " * indent, " " * (indent + 2)
        lines = ",\n".join(f"{inner}{key}={value!r}" for key, value in shown.items())
        return f"{outer}Result(\n{lines}\n{outer})"

    @property
    def feasible(self) -> bool | None:
        """Whether the last result meets the experiment's `TuneConfig.constraints`
        (every named value reported and <= 0); None when there are none."""
        names = self._experiment.constraints if self._experiment else []
        if not names:
            return None
        return is_feasible(self.metrics, names)

    @property
    def metrics_dataframe(self) -> pd.DataFrame:
        """Every result the trial reported, one row each (nested keys joined with "/"),
        with the config it was reported under as ``config/<key>`` columns, as Ray Tune's."""
        name = "Result.metrics_dataframe"
        experiment = self._experiment
        trials = experiment.trials if experiment is not None else []
        trial = next((t for t in trials if t.trial_id == self.trial_id), None)
        if experiment is None or trial is None:
            return _dataframe(name, [])
        history = experiment.history().get(self.trial_id, [])
        exploits = exploits_by_trial(experiment).get(self.trial_id, []) if history else []
        return _dataframe(name, history_rows(trial, history, exploits))

    @property
    def filesystem(self) -> Any:
        """The fsspec filesystem that reaches `path` (None when fsspec is not installed)."""
        return _local_filesystem()

    def get_best_checkpoint(self, metric: str, mode: str) -> Checkpoint | None:
        """The checkpoint of `best_checkpoints` whose saved `metric` is best, as Ray Tune's.

        Args:
            metric: a key of the metrics the checkpoints were saved with (``"a/b"``
                reaches a nested one).
            mode: ``"min"`` or ``"max"``.

        Checkpoints saved without `metric` are left out; on a tie the older one wins
        (as in Ray) and NaN ranks last (Ray: depends on the order).

        Raises:
            ValueError: `metric` is not a non-empty string, `mode` is not "min" or
                "max", or a checkpoint's value of `metric` is not a number.
            RuntimeError: the trial has no checkpoint on disk, or none saved with `metric`.
        """
        return best_checkpoint_of(self.trial_id, self.best_checkpoints, metric, mode)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> Result:
        """The `Result` of the trial whose directory is `path` (its experiment is the
        directory that holds the database, above it)."""
        target = os.path.realpath(os.fspath(path))
        where = os.path.dirname(target)
        while True:
            try:
                experiment = _Snapshot(where)
                break
            except FileNotFoundError:
                parent = os.path.dirname(where)
                if parent == where:
                    raise FileNotFoundError(
                        f"Result.from_path({os.fspath(path)!r}): no experiment database in "
                        "any folder above it; give a trial directory inside an experiment"
                    ) from None
                where = parent
        for trial in experiment.trials:
            if os.path.realpath(trial.path) == target:
                return _result(experiment, trial)
        raise FileNotFoundError(
            f"Result.from_path({os.fspath(path)!r}): the experiment at {experiment.path} has "
            f"no trial in that directory (trials: "
            f"{', '.join(os.path.basename(t.path) for t in experiment.trials[:5]) or 'none'})"
        )


def _local_filesystem() -> Any:
    try:
        fsspec = importlib.import_module("fsspec")  # optional (tunefleet[remote])
    except ImportError:
        return None
    return fsspec.filesystem("file")


def _result(experiment: _Snapshot, trial: Trial) -> Result:
    """The `Result` of `trial`, reading its checkpoints from `experiment`."""
    error = None
    if trial.status is TrialStatus.ERROR and trial.error is not None:
        error = TrialError.of(trial.error, trial.trial_id)
    metrics = last_result_with_config(trial)  # the trial's own dict: one copy per trial
    return Result(
        metrics=metrics,
        config=trial.config,
        checkpoint=trial.checkpoint,
        error=error,
        path=trial.path,
        best_checkpoints=None,  # read from `experiment` when asked for
        status=trial.status.value,
        trial_id=trial.trial_id,
        _experiment=experiment,
    )


class ResultGrid:
    """The results of every trial of an experiment, as Ray Tune's `ResultGrid`.

    Args:
        experiment_analysis: an `ExperimentAnalysis` (Ray's form), or the experiment
            directory (or its database, or its name under the default storage path).
        metric: default metric for `get_best_result` (default: the analysis' or the
            experiment's).
        mode: ``"min"`` or ``"max"`` (default: the analysis' or the experiment's).

    Example:
        >>> grid = ResultGrid("~/tunefleet_results/lstm")  # doctest: +SKIP
        >>> best = grid.get_best_result(metric="val_loss", mode="min")  # doctest: +SKIP
        >>> best.config, best.checkpoint  # doctest: +SKIP
    """

    @_collector.paused()  # a result per trial
    def __init__(
        self,
        experiment_analysis: ExperimentAnalysis | str | os.PathLike[str],
        *,
        metric: MetricSpec = None,
        mode: ModeSpec = None,
    ) -> None:
        if isinstance(experiment_analysis, ExperimentAnalysis):
            self._analysis = experiment_analysis
        else:
            self._analysis = ExperimentAnalysis(experiment_analysis)
        self._experiment = self._analysis._experiment
        meta = self._experiment.meta
        self._metric: MetricSpec = metric or self._analysis.default_metric or meta.get("metric")
        self._mode: ModeSpec = mode or self._analysis.default_mode or meta.get("mode")
        self._results = [_result(self._experiment, t) for t in self._analysis.trials]

    @property
    def experiment_path(self) -> str:
        """The experiment directory."""
        return str(self._experiment.path)

    @property
    def filesystem(self) -> Any:
        """The filesystem of `experiment_path`: the analysis' `storage_filesystem`, else
        fsspec's local one (None when fsspec is not installed)."""
        return self._analysis.filesystem or _local_filesystem()

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

        As in Ray Tune, an experiment of one trial returns its result (no metric needed).

        Raises:
            ValueError: no metric or mode anywhere, or a bad mode or scope.
            RuntimeError: no trial has a usable value of the metric (the message starts
                with Ray's "No best trial found for the given metric: ...").
        """
        where = "ResultGrid.get_best_result()"
        if scope not in SCOPES:
            raise ValueError(
                f"{where}: scope={scope!r} is not valid; "
                f"choose one of {', '.join(map(repr, SCOPES))}"
            )
        if len(self._results) == 1:  # Ray: the only trial is the best, metric or not
            if mode is not None and mode not in MODES:
                raise ValueError(f"{where}: mode={mode!r} is not valid; choose 'min' or 'max'")
            return self._results[0]
        metric_, mode_ = metric or self._metric, mode or self._mode
        if isinstance(metric_, list) or isinstance(mode_, list):
            raise ValueError(
                f"{where}: the experiment has several objectives (metric={metric_!r}); "
                "there is no single best trial. Use get_pareto_front(), or pass metric= and "
                "mode= to rank by one of them"
            )
        metric_, mode_ = _metric_and_mode(metric_, mode_, where)
        trial, why = self._experiment.find_best(metric_, mode_, scope, filter_nan_and_inf, where)
        if trial is None:
            raise RuntimeError(no_best(metric_, why))
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
            point = objective_point(result.metrics, pairs)
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
        """Ray Tune's form, ``ResultGrid<[Result(...), ...]>``, listing the first 20
        results and saying how many more there are."""
        shown = [r._repr(2) for r in self._results[:_GRID_REPR_MAX]]
        more = len(self._results) - len(shown)
        if more > 0:
            shown.append(
                f"  ... {more} more results ({len(self)} trials at {self.experiment_path})"
            )
        return "ResultGrid<[\n" + ",\n".join(shown) + "\n]>"


__all__ = [
    "ExperimentAnalysis",
    "Result",
    "ResultGrid",
    "TrialError",
]
