"""What the LightGBM and XGBoost callbacks share: the arguments, one report per boosting
round, and the booster checkpointed every `frequency` rounds and at the end.

Each library's module adapts `BoostingCallback` to how its library calls a callback
(LightGBM: ``callback(env)`` after each round; XGBoost: a ``TrainingCallback``) and
loads the booster back (``get_model``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from tunefleet.integration._base import (
    check_filename,
    check_frequency,
    metric_names,
    pick,
    report,
)

Postprocess = Callable[[dict[str, Any]], dict[str, Any]]


class BoostingCallback:
    """Reports after every boosting round; checkpoints every `frequency` rounds and at the end.

    Args:
        metrics: None (every evaluation metric), a name, a list of names, or
            ``{name to report: "<data set>-<metric>"}``.
        filename: the booster's file name in the checkpoint (None: `checkpoint_name`).
        frequency: checkpoint every `frequency` rounds; 0: only at the end.
        checkpoint_at_end: checkpoint after the last round.
        results_postprocessing_fn: turns the metrics to report into others (e.g. the
            mean of cross-validation folds).
    """

    checkpoint_name: ClassVar[str]
    """The booster's file name in a checkpoint unless `filename` is given."""

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        filename: str | None = None,
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        results_postprocessing_fn: Postprocess | None = None,
    ) -> None:
        super().__init__()  # XGBoost's TrainingCallback comes next in the subclass
        self._where = f"{type(self).__module__}.{type(self).__qualname__}"
        self._names = metric_names(metrics, self._where)
        name = self.checkpoint_name if filename is None else filename
        self._filename = check_filename(name, self._where)
        self._frequency = check_frequency(frequency, self._where)
        self._checkpoint_at_end = bool(checkpoint_at_end)
        if results_postprocessing_fn is not None and not callable(results_postprocessing_fn):
            raise TypeError(
                f"{self._where}: results_postprocessing_fn={results_postprocessing_fn!r} "
                "must be a function of the metrics dict"
            )
        self._postprocess = results_postprocessing_fn
        self._last_metrics: dict[str, Any] = {}
        self._checkpointed_round: int | None = None

    def _round_ended(
        self, model: Any, round_index: int, logged: Mapping[str, Any], *, last: bool = False
    ) -> None:
        """Report one round's metrics, with the booster when a checkpoint is due (`last`:
        this is the final round, for a library that says so)."""
        metrics = pick(self._names, logged, self._where)
        if self._postprocess:
            metrics = self._postprocess(metrics)
        self._last_metrics = metrics
        due = bool(self._frequency) and (round_index + 1) % self._frequency == 0
        if due or (last and self._checkpoint_at_end):
            self._checkpointed_round = round_index
            report(metrics, self._saver(model))
        else:
            report(metrics)

    def _training_ended(self, model: Any, last_round: int) -> None:
        """For a library that says when training ends: one more result, carrying the final
        booster with the last metrics, unless the last round was checkpointed already."""
        if self._checkpoint_at_end and self._checkpointed_round != last_round:
            report(dict(self._last_metrics), self._saver(model))

    def _saver(self, model: Any) -> Callable[[str], None]:
        def save(folder: str) -> None:
            model.save_model(os.path.join(folder, self._filename))

        return save


class ReportOnly(BoostingCallback):
    """Reports after every boosting round, without checkpoints (Ray Tune's
    ``TuneReportCallback``); put it before the library's checkpoint callback."""

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        results_postprocessing_fn: Postprocess | None = None,
    ) -> None:
        super().__init__(
            metrics,
            frequency=0,
            checkpoint_at_end=False,
            results_postprocessing_fn=results_postprocessing_fn,
        )
