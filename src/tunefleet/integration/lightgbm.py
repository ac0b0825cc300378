"""LightGBM: report each boosting round's evaluation metrics, and checkpoint the booster.

Metric names are ``"<valid set>-<metric>"`` (``"valid_0-binary_logloss"``; with
``lgb.cv``, ``"valid-l2-mean"`` and ``"valid-l2-stdv"``), as Ray Tune reports them. The
checkpoint holds the booster saved as text by ``Booster.save_model``. Extra:
``tunefleet[lightgbm]``.

Example:
    >>> callback = TuneReportCheckpointCallback(  # doctest: +SKIP
    ...     metrics={"loss": "valid_0-binary_logloss"}, frequency=1)
    >>> lgb.train(params, train_set, valid_sets=[valid_set], callbacks=[callback])
"""

from __future__ import annotations

import os
from typing import Any

from tunefleet.integration._base import import_framework
from tunefleet.integration._boosting import BoostingCallback, ReportOnly
from tunefleet.storage.checkpoint import Checkpoint

_lgb = import_framework(
    "lightgbm", package="lightgbm", extra="lightgbm", what="tunefleet.integration.lightgbm"
)
CHECKPOINT_NAME = "model.txt"


def _eval_results(env: Any) -> dict[str, Any]:
    """LightGBM's evaluation list as ``{"<set>-<metric>": value}``."""
    out: dict[str, Any] = {}
    for entry in env.evaluation_result_list:
        data_name, metric, value = entry[0], entry[1], entry[2]
        if len(entry) > 4:  # lgb.cv: (set, metric, mean, higher_better, stdv)
            out[f"{data_name}-{metric}-mean"] = value
            out[f"{data_name}-{metric}-stdv"] = entry[4]
        else:
            out[f"{data_name}-{metric}"] = value
    return out


class TuneReportCheckpointCallback(BoostingCallback):
    """Reports after every boosting round; checkpoints every `frequency` rounds and at the end.

    Args:
        metrics: None (every evaluation metric), a name, a list of names, or
            ``{name to report: "<valid set>-<metric>"}``.
        filename: the booster's file name in the checkpoint (default ``model.txt``).
        frequency: checkpoint every `frequency` rounds; 0: only at the end.
        checkpoint_at_end: checkpoint at the last round.
        results_postprocessing_fn: turns the metrics to report into others.
    """

    order = 20  # LightGBM runs callbacks by `order`: after its own logging (10)
    before_iteration = False
    checkpoint_name = CHECKPOINT_NAME

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> Any:
        """The `lightgbm.Booster` saved in a checkpoint reported by this callback."""
        with checkpoint.as_directory() as folder:
            return _lgb.Booster(model_file=os.path.join(folder, filename))

    def __call__(self, env: Any) -> None:
        # LightGBM says which round is the last: its checkpoint goes with its result
        last = env.iteration == env.end_iteration - 1
        self._round_ended(env.model, env.iteration, _eval_results(env), last=last)


class TuneReportCallback(ReportOnly, TuneReportCheckpointCallback):
    """Reports after every boosting round, without checkpoints."""


__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]
