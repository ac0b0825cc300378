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

_lgb = import_framework(
    "lightgbm", package="lightgbm", extra="lightgbm", what="tunefleet.integration.lightgbm"
)
_WHERE = "tunefleet.integration.lightgbm.TuneReportCheckpointCallback"
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


class TuneReportCheckpointCallback:
    """Reports after every boosting round; checkpoints every `frequency` rounds and at the end.

    Args:
        metrics: None (every evaluation metric), a name, a list of names, or
            ``{name to report: "<valid set>-<metric>"}``.
        filename: the booster's file name in the checkpoint.
        frequency: checkpoint every `frequency` rounds; 0: only at the end.
        checkpoint_at_end: checkpoint at the last round.
        results_postprocessing_fn: turns the metrics to report into others.
    """

    order = 20  # LightGBM runs callbacks by `order`: after its own logging (10)
    before_iteration = False

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        filename: str = CHECKPOINT_NAME,
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
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

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> Any:
        """The `lightgbm.Booster` saved in a checkpoint reported by this callback."""
        with checkpoint.as_directory() as folder:
            return _lgb.Booster(model_file=os.path.join(folder, filename))

    def __call__(self, env: Any) -> None:
        metrics = pick(self._names, _eval_results(env), _WHERE)
        if self._postprocess:
            metrics = self._postprocess(metrics)
        last = env.iteration == env.end_iteration - 1
        every = self._frequency and (env.iteration + 1) % self._frequency == 0
        if (last and self._checkpoint_at_end) or every:
            model = env.model

            def save(folder: str) -> None:
                model.save_model(os.path.join(folder, self._filename))

            report(metrics, save)
        else:
            report(metrics)


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
