"""XGBoost: report each boosting round's evaluation metrics, and checkpoint the booster.

Metric names are XGBoost's ``"<eval set>-<metric>"`` (``"eval-logloss"``), as Ray Tune
reports them. The checkpoint holds the booster saved by ``Booster.save_model`` (UBJSON
for ``model.ubj``, JSON for ``model.json``). Extra: ``tunefleet[xgboost]``.

Example:
    >>> callback = TuneReportCheckpointCallback(  # doctest: +SKIP
    ...     metrics={"loss": "eval-logloss"}, frequency=1)
    >>> xgb.train(params, dtrain, evals=[(dvalid, "eval")], callbacks=[callback])
    >>> booster = TuneReportCheckpointCallback.get_model(result.checkpoint)  # doctest: +SKIP
"""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tunefleet.integration._base import (
    check_filename,
    check_frequency,
    import_framework,
    metric_names,
    pick,
    report,
)
from tunefleet.storage.checkpoint import Checkpoint

_xgb: Any = import_framework(
    "xgboost",
    package="XGBoost (xgboost or xgboost-cpu)",
    extra="xgboost",
    what="tunefleet.integration.xgboost",
)
_WHERE = "tunefleet.integration.xgboost.TuneReportCheckpointCallback"
CHECKPOINT_NAME = "model.ubj"


def _last_values(evals_log: Any) -> dict[str, Any]:
    """``{"eval": {"logloss": [..]}}`` -> ``{"eval-logloss": last value}``."""
    out: dict[str, Any] = {}
    for data_name, by_metric in evals_log.items():
        for metric, values in by_metric.items():
            last = values[-1]
            out[f"{data_name}-{metric}"] = list(last) if isinstance(last, tuple) else last
    return out


class TuneReportCheckpointCallback(_xgb.callback.TrainingCallback):
    """Reports after every boosting round; checkpoints every `frequency` rounds and at the end.

    Args:
        metrics: None (every evaluation metric), a name, a list of names, or
            ``{name to report: "<eval set>-<metric>"}``.
        filename: the booster's file name in the checkpoint (``.ubj`` or ``.json``).
        frequency: checkpoint every `frequency` rounds; 0: only at the end.
        checkpoint_at_end: checkpoint after the last round.
        results_postprocessing_fn: turns the metrics to report into others (e.g. the
            mean of cross-validation folds).
    """

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        filename: str = CHECKPOINT_NAME,
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        super().__init__()
        self._names = metric_names(metrics, _WHERE)
        self._filename = check_filename(filename, _WHERE)
        self._frequency = check_frequency(frequency, _WHERE)
        self._checkpoint_at_end = bool(checkpoint_at_end)
        if results_postprocessing_fn is not None and not callable(results_postprocessing_fn):
            raise TypeError(
                f"{_WHERE}: results_postprocessing_fn={results_postprocessing_fn!r} "
                "must be a function of the metrics dict"
            )
        self._postprocess = results_postprocessing_fn
        self._last_metrics: dict[str, Any] = {}
        self._checkpointed_round: int | None = None

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> Any:
        """The `xgboost.Booster` saved in a checkpoint reported by this callback."""
        booster = _xgb.Booster()
        with checkpoint.as_directory() as folder:
            booster.load_model(os.path.join(folder, filename))
        return booster

    def _metrics(self, evals_log: Any) -> dict[str, Any]:
        metrics = pick(self._names, _last_values(evals_log), _WHERE)
        return self._postprocess(metrics) if self._postprocess else metrics

    def _save(self, model: Any) -> Callable[[str], None]:
        def save(folder: str) -> None:
            model.save_model(os.path.join(folder, self._filename))

        return save

    def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
        self._last_metrics = self._metrics(evals_log)
        if self._frequency and (epoch + 1) % self._frequency == 0:
            self._checkpointed_round = epoch
            report(self._last_metrics, self._save(model))
        else:
            report(self._last_metrics)
        return False  # go on training

    def after_training(self, model: Any) -> Any:
        last_round = model.num_boosted_rounds() - 1
        if self._checkpoint_at_end and self._checkpointed_round != last_round:
            # one more result, carrying the final model with the last metrics
            report(dict(self._last_metrics), self._save(model))
        return model


class TuneReportCallback(TuneReportCheckpointCallback):
    """Reports after every boosting round, without checkpoints."""

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(
            metrics,
            frequency=0,
            checkpoint_at_end=False,
            results_postprocessing_fn=results_postprocessing_fn,
        )


__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]
