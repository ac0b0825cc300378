"""`Searcher.add_evaluated_trials`: trials run elsewhere, told to a searcher's model.

Ray Tune's rules: a trial whose last result lacks the metric is skipped; one that
ended with an error is told as failed; one TERMINATED without ``done`` in its last
result (stopped early by a scheduler or stopper) as pruned. A warning says when no
finished trial reported the metric (a misspelt name, most often).
"""

from __future__ import annotations

import warnings
from typing import Any, Protocol

from tunefleet.trial import TrialStatus


class TakesPoints(Protocol):
    """What this module needs of a searcher (not `Searcher` itself: its module calls
    this one)."""

    def add_evaluated_point(
        self,
        parameters: dict[str, Any],
        value: float,
        error: bool = False,
        pruned: bool = False,
        intermediate_values: list[float] | None = None,
    ) -> None: ...


def add_evaluated_trials(searcher: TakesPoints, trials_or_analysis: Any, metric: str) -> None:
    """Tell `searcher` each finished trial's last `metric` (the caller has checked that it
    takes evaluated points)."""
    owner = type(searcher).__name__
    if not isinstance(metric, str) or not metric:
        raise TypeError(f"{owner}.add_evaluated_trials: metric={metric!r} must be a metric name")
    trials = _trials_of(owner, trials_or_analysis)
    any_finished_with_metric = False
    for i, trial in enumerate(trials):
        last = getattr(trial, "last_result", None) or {}
        status = TrialStatus(getattr(trial, "status", TrialStatus.PENDING))
        done = bool(last.get("done", False))
        if metric not in last:
            continue
        any_finished_with_metric |= status is TrialStatus.TERMINATED and done
        config = getattr(trial, "config", None)
        if not isinstance(config, dict):
            raise TypeError(
                f"{owner}.add_evaluated_trials: trials[{i}].config={config!r} is not a dict"
            )
        searcher.add_evaluated_point(
            config,
            last[metric],
            error=status is TrialStatus.ERROR,
            pruned=status is TrialStatus.TERMINATED and not done,
            intermediate_values=None,
        )
    if not any_finished_with_metric:
        warnings.warn(
            f"{owner}.add_evaluated_trials: no finished trial reported the metric "
            f"{metric!r}; check its name",
            stacklevel=3,
        )


def _trials_of(owner: str, given: Any) -> list[Any]:
    """The trials of a Trial, a list of them, an ExperimentAnalysis or a ResultGrid."""
    if isinstance(given, (list, tuple)):
        trials = list(given)
    elif _is_trial(given):
        trials = [given]
    elif isinstance(getattr(given, "trials", None), list):  # an ExperimentAnalysis
        trials = list(given.trials)
    elif isinstance(getattr(getattr(given, "_analysis", None), "trials", None), list):
        trials = list(given._analysis.trials)  # a ResultGrid: its analysis' trials
    else:
        raise TypeError(
            f"{owner}.add_evaluated_trials: trials_or_analysis={given!r} must be a Trial, "
            "a list of Trials, an ExperimentAnalysis or a ResultGrid"
        )
    for i, trial in enumerate(trials):
        if not _is_trial(trial):
            raise TypeError(
                f"{owner}.add_evaluated_trials: trials_or_analysis[{i}]={trial!r} is not a "
                "Trial (it needs config, status and last_result)"
            )
    return trials


def _is_trial(obj: Any) -> bool:
    return all(hasattr(obj, name) for name in ("config", "status", "last_result"))
