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
from typing import Any

from tunefleet.integration._base import import_framework
from tunefleet.integration._boosting import BoostingCallback, ReportOnly
from tunefleet.storage.checkpoint import Checkpoint

_xgb: Any = import_framework(
    "xgboost",
    package="XGBoost (xgboost or xgboost-cpu)",
    extra="xgboost",
    what="tunefleet.integration.xgboost",
)
CHECKPOINT_NAME = "model.ubj"


def _last_values(evals_log: Any) -> dict[str, Any]:
    """``{"eval": {"logloss": [..]}}`` -> ``{"eval-logloss": last value}``."""
    out: dict[str, Any] = {}
    for data_name, by_metric in evals_log.items():
        for metric, values in by_metric.items():
            last = values[-1]
            out[f"{data_name}-{metric}"] = list(last) if isinstance(last, tuple) else last
    return out


class TuneReportCheckpointCallback(BoostingCallback, _xgb.callback.TrainingCallback):
    """Reports after every boosting round; checkpoints every `frequency` rounds and at the end.

    Args:
        metrics: None (every evaluation metric), a name, a list of names, or
            ``{name to report: "<eval set>-<metric>"}``.
        filename: the booster's file name in the checkpoint, ``.ubj`` or ``.json``
            (default ``model.ubj``).
        frequency: checkpoint every `frequency` rounds; 0: only at the end.
        checkpoint_at_end: checkpoint after the last round.
        results_postprocessing_fn: turns the metrics to report into others (e.g. the
            mean of cross-validation folds).
    """

    checkpoint_name = CHECKPOINT_NAME

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> Any:
        """The `xgboost.Booster` saved in a checkpoint reported by this callback."""
        booster = _xgb.Booster()
        with checkpoint.as_directory() as folder:
            booster.load_model(os.path.join(folder, filename))
        return booster

    def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
        self._round_ended(model, epoch, _last_values(evals_log))
        return False  # go on training

    def after_training(self, model: Any) -> Any:
        self._training_ended(model, model.num_boosted_rounds() - 1)
        return model


class TuneReportCallback(ReportOnly, TuneReportCheckpointCallback):
    """Reports after every boosting round, without checkpoints."""


__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]
