"""The experiment snapshot behind `tunefleet.results`: ranking and tables.

`_Snapshot` reads an experiment's meta, trials and checkpoints from its database
(results on demand), picks the best trial under Ray Tune's scope rules, and builds
the per-trial table. The helpers below (metric/mode checks, scoring, DataFrames)
are shared with `tunefleet.results`; pandas is imported only when a DataFrame is
built.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
from typing import TYPE_CHECKING, Any

from tunefleet._metrics import as_number, flatten, is_feasible, metric_value
from tunefleet.store import StoreReader, resolve_experiment
from tunefleet.store._schema import decode
from tunefleet.trial import Trial

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd

logger = logging.getLogger("tunefleet")

SCOPES = ("last", "avg", "last-5-avg", "last-10-avg", "all")
MODES = ("min", "max")


class _Snapshot:
    """What the result classes read: meta, trials and checkpoints; results on demand."""

    def __init__(
        self,
        experiment_path: str | os.PathLike[str],
        each: Callable[[Trial], Trial] | None = None,
        instead: Callable[[str], Trial | None] | None = None,
    ) -> None:
        self.path = resolve_experiment(os.fspath(experiment_path))
        with StoreReader(self.path) as reader:
            self.meta = reader.meta()
            self.trials = reader.trials(each, instead)
        self.constraints: list[str] = list(self.meta.get("constraints") or [])
        self._history: dict[str, list[dict[str, Any]]] | None = None
        self._checkpoints: dict[str, list[tuple[int, str, str]]] | None = None

    def checkpoints_of(self, trial_id: str) -> list[tuple[int, str, dict[str, Any]]]:
        """The trial's checkpoints on disk as ``(iteration, path, metrics)``, oldest first.

        Read, like `history`, when first asked for: every trial's rows at once, their
        metrics kept as text and decoded for the trial asked about, so results that
        nobody asks for checkpoints cost nothing (1.4 KB a trial decoded, HyperBand's
        two checkpoints a trial, at 100,000 trials)."""
        if self._checkpoints is None:
            try:
                with StoreReader(self.path) as reader:
                    self._checkpoints = reader.all_checkpoint_rows()
            except FileNotFoundError:  # the experiment was deleted: its checkpoints too
                logger.warning(
                    "the experiment %s is gone (deleted or moved since it was read): its "
                    "trials' checkpoints are no longer on disk, best_checkpoints is []",
                    self.path,
                )
                self._checkpoints = {}
        rows = self._checkpoints.get(trial_id, [])
        return [(it, path, decode(metrics)) for it, path, metrics in rows]

    def history(self) -> dict[str, list[dict[str, Any]]]:
        if self._history is None:
            with StoreReader(self.path) as reader:
                self._history = reader.all_results()
        return self._history

    def forget_history(self) -> None:
        """Read the results again on the next `history()`."""
        self._history = None

    def values(self, trial: Trial, metric: str, *, all_of_them: bool) -> list[float]:
        """The numeric values of `metric` the trial reported (only the last if enough)."""
        if not all_of_them and trial.last_result:
            last = metric_value(trial.last_result, metric)
            if last is not None:
                return [last]
        found = (metric_value(r, metric) for r in self.history().get(trial.trial_id, []))
        return [v for v in found if v is not None]

    def reported_metrics(self) -> list[str]:
        names: set[str] = set()
        for results in self.history().values():
            for result in results:
                names.update(k for k, v in flatten(result).items() if as_number(v) is not None)
        return sorted(names)

    def best_trial(
        self, metric: str | None, mode: str | None, scope: str, filter_nan_and_inf: bool, where: str
    ) -> Trial:
        """The best trial by `metric`/`mode` under Ray's `scope` rules (ties: lowest index).

        With constraints, only trials whose last result is feasible qualify.

        Raises:
            ValueError: no metric or mode, or a bad mode or scope.
            RuntimeError: no trial qualifies; the message says why.
        """
        found, message = self.find_best(metric, mode, scope, filter_nan_and_inf, where)
        if found is None:
            raise RuntimeError(message)
        return found

    def find_best(
        self, metric: str | None, mode: str | None, scope: str, filter_nan_and_inf: bool, where: str
    ) -> tuple[Trial | None, str]:
        """`best_trial`, or None and why none qualifies (bad arguments still raise)."""
        metric, mode = _metric_and_mode(metric, mode, where)
        if scope not in SCOPES:
            raise ValueError(
                f"{where}: scope={scope!r} is not valid; "
                f"choose one of {', '.join(map(repr, SCOPES))}"
            )
        sign = 1.0 if mode == "min" else -1.0
        best: tuple[tuple[bool, float], Trial] | None = None
        seen = 0
        for trial in self.trials:
            if self.constraints and not is_feasible(trial.last_result or {}, self.constraints):
                continue
            values = self.values(trial, metric, all_of_them=scope != "last")
            score = _score(values, scope, mode, filter_nan_and_inf)
            if score is None:
                continue
            seen += 1
            if filter_nan_and_inf and not math.isfinite(score):
                continue
            key = (math.isnan(score), 0.0 if math.isnan(score) else sign * score)
            if best is None or key < best[0]:
                best = (key, trial)
        if best is not None:
            return best[1], ""
        return None, self._no_best(metric, mode, scope, seen, where)

    def _no_best(self, metric: str, mode: str, scope: str, seen: int, where: str) -> str:
        head = (
            f"{where}: no best trial for metric {metric!r} (mode={mode!r}, scope={scope!r}) "
            f"in {self.path}"
        )
        if not self.trials:
            return f"{head}: the experiment has no trials"
        if self.constraints and not any(
            is_feasible(t.last_result or {}, self.constraints) for t in self.trials
        ):
            return f"{head}: no trial is feasible (constraints {self.constraints} must be <= 0)"
        if seen:
            return (
                f"{head}: every value of {metric!r} is NaN or infinite ({seen} trial(s) reported "
                "it); pass filter_nan_and_inf=False to rank them anyway"
            )
        known = self.reported_metrics()
        close = difflib.get_close_matches(metric, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        listed = ", ".join(known[:30]) + (", ..." if len(known) > 30 else "") or "none"
        return f"{head}: no trial reported {metric!r}.{hint} Metrics reported: {listed}"

    def table(self, metric: str | None, mode: str | None, where: str) -> pd.DataFrame:
        """One row per trial: its last result, or its best by `metric`/`mode` if given."""
        if mode is not None and mode not in MODES:
            raise ValueError(f"{where}: mode={mode!r} is not valid; choose 'min' or 'max'")
        rows: list[dict[str, Any]] = []
        for trial in self.trials:
            chosen = trial.last_result or {}
            if metric is not None and mode is not None:  # Ray: a metric alone means the last row
                chosen = _best_row(self.history().get(trial.trial_id, []), metric, mode) or chosen
            row = flatten({k: v for k, v in chosen.items() if k != "config"})
            row.update(flatten(trial.config, prefix="config/"))
            row["trial_id"] = trial.trial_id
            row["logdir"] = trial.path
            rows.append(row)
        columns = _ordered_columns(rows)
        return _dataframe(where, rows, columns)


# -- helpers --------------------------------------------------------------------------------------
def _metric_and_mode(metric: str | None, mode: str | None, where: str) -> tuple[str, str]:
    if not metric:
        raise ValueError(
            f"{where}: no metric given. Pass metric= (and mode=), or set "
            "TuneConfig(metric=..., mode=...) when running the experiment"
        )
    if mode is None:
        raise ValueError(
            f"{where}: no mode given for metric {metric!r}. Pass mode='min' or mode='max', or "
            "set TuneConfig(mode=...) when running the experiment"
        )
    if mode not in MODES:
        raise ValueError(f"{where}: mode={mode!r} is not valid; choose 'min' or 'max'")
    return metric, mode


def _score(values: list[float], scope: str, mode: str, finite_only: bool) -> float | None:
    """One number per trial under Ray's scopes ("all": its best value, never NaN)."""
    if not values:
        return None
    if scope == "last":
        return values[-1]
    if scope == "all":
        pool = [v for v in values if (math.isfinite(v) if finite_only else not math.isnan(v))]
        if not pool:
            return math.nan
        return max(pool) if mode == "max" else min(pool)
    window = values if scope == "avg" else values[-int(scope.split("-")[1]) :]
    return sum(window) / len(window)


def _best_row(history: list[dict[str, Any]], metric: str, mode: str) -> dict[str, Any] | None:
    """The first result with the best finite value of `metric` (NaN never wins)."""
    best: tuple[float, dict[str, Any]] | None = None
    sign = 1.0 if mode == "min" else -1.0
    for result in history:
        value = metric_value(result, metric)
        if value is not None and math.isfinite(value) and (best is None or sign * value < best[0]):
            best = (sign * value, result)
    return None if best is None else best[1]


def _ordered_columns(rows: list[dict[str, Any]]) -> list[str]:
    """Metric columns in order of first appearance, then config/..., then trial_id, logdir."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    last = ("trial_id", "logdir")
    metrics = [c for c in seen if not c.startswith("config/") and c not in last]
    configs = [c for c in seen if c.startswith("config/")]
    return metrics + configs + [c for c in last if c in seen]


def _dataframe(
    name: str, rows: list[dict[str, Any]], columns: list[str] | None = None
) -> pd.DataFrame:
    """A DataFrame of `rows`; pandas is imported here only (an optional dependency)."""
    try:
        import pandas
    except ImportError as exc:
        raise ImportError(
            f"pandas is needed for {name}; install it with: pip install 'tunefleet[pandas]'"
        ) from exc
    return pandas.DataFrame(rows, columns=columns)


# -- a trial's results as table rows, with the config each was reported under -----------------
def exploits_by_trial(experiment: _Snapshot) -> dict[str, list[dict[str, Any]]]:
    """Trial id -> its PBT exploits (the "exploit" events' data), oldest first."""
    with StoreReader(experiment.path) as reader:
        events = reader.events(kinds="exploit")
    found: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        found.setdefault(event["trial_id"], []).append(event["data"])
    return found


def history_rows(
    trial: Trial, history: list[dict[str, Any]], exploits: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each result flattened with "/", the config it was reported under as ``config/...``.

    A trial PBT exploited changed its config after the result at the exploit's
    ``at_iteration``; its results before that carry the old config, as in Ray Tune.
    """
    configs = _configs_over_time(trial, history, exploits)
    return [
        {
            **flatten({k: v for k, v in result.items() if k != "config"}),
            **flatten(config, prefix="config/"),
        }
        for result, config in zip(history, configs, strict=True)
    ]


def _configs_over_time(
    trial: Trial, history: list[dict[str, Any]], exploits: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The config each result was reported under.

    Between two exploits the iterations rise; the run before an exploit ends with the
    result at its ``at_iteration`` (the trial's iteration when it was exploited).
    """
    pending = list(exploits)
    config: dict[str, Any] = pending[0]["old_config"] if pending else trial.config
    out: list[dict[str, Any]] = []
    previous: float | None = None
    for result in history:
        iteration = _iteration(result)
        if pending and previous is not None and iteration is not None and iteration <= previous:
            config = pending.pop(0)["new_config"]  # the run restarted without reaching the mark
        out.append(config)
        previous = iteration
        mark = _iteration(pending[0], "at_iteration") if pending else None
        if mark is not None and iteration is not None and iteration >= mark:
            config = pending.pop(0)["new_config"]
            previous = None
    return out


def _iteration(data: dict[str, Any], key: str = "training_iteration") -> float | None:
    value = data.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
