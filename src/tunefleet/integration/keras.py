"""Keras 3: report the logs of a `model.fit` to tunefleet, with the model as a checkpoint.

Any Keras 3 backend works; without TensorFlow, set ``KERAS_BACKEND=torch`` (or ``jax``)
before Keras is imported. The checkpoint holds ``model.save(...)`` in the ``.keras``
format, loaded back with `TuneReportCheckpointCallback.get_model`. Extra:
``tunefleet[keras]``.

Example:
    >>> model.fit(x, y, validation_split=0.2, epochs=10, callbacks=[  # doctest: +SKIP
    ...     TuneReportCheckpointCallback(metrics={"loss": "val_loss"})])
"""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

import functools
import os
from typing import Any

from tunefleet.integration._base import (
    check_filename,
    hooks,
    import_framework,
    metric_names,
    pick,
    report,
)
from tunefleet.storage.checkpoint import Checkpoint

_keras: Any = import_framework(
    "keras",
    package="Keras 3 and a backend (without TensorFlow: KERAS_BACKEND=torch)",
    extra="keras",
    what="tunefleet.integration.keras",
)
CHECKPOINT_NAME = "model.keras"
_EVENTS = sorted(
    name[3:]
    for name in dir(_keras.callbacks.Callback)
    if name.startswith("on_") and callable(getattr(_keras.callbacks.Callback, name))
)


class TuneReportCheckpointCallback(_keras.callbacks.Callback):
    """Reports Keras's logs on `report_metrics_on`, with a checkpoint on `checkpoint_on`.

    A checkpoint is always reported with the metrics of its event.

    Args:
        checkpoint_on: Keras event(s) (hook names less ``on_``: ``"epoch_end"``,
            ``"train_end"``, ...) after which the model is saved and reported.
        report_metrics_on: Keras event(s) after which the logs are reported.
        metrics: None (every log), a name, a list of names, or
            ``{name to report: name in Keras's logs}``.
        filename: the saved model's file name (ends in ``.keras``).
    """

    def __init__(
        self,
        checkpoint_on: str | list[str] | None = "epoch_end",
        report_metrics_on: str | list[str] = "epoch_end",
        metrics: str | list[str] | dict[str, str] | None = None,
        *,
        filename: str = CHECKPOINT_NAME,
    ) -> None:
        super().__init__()
        where = f"tunefleet.integration.keras.{type(self).__name__}"
        self._where = where
        self._names = metric_names(metrics, where)
        self._filename = check_filename(filename, where)
        if not self._filename.endswith(".keras"):
            raise ValueError(
                f"{where}: filename={filename!r} must end in '.keras' (Keras 3's format)"
            )
        self._checkpoint_on = (
            [] if checkpoint_on is None else hooks(checkpoint_on, _EVENTS, where, "checkpoint_on")
        )
        self._report_on = hooks(report_metrics_on, _EVENTS, where, "report_metrics_on")
        for event in dict.fromkeys(self._checkpoint_on + self._report_on):
            # only these hooks are overridden (Keras skips per-batch work for the others)
            setattr(self, f"on_{event}", functools.partial(self._event, event))

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> Any:
        """The Keras model saved in a checkpoint reported by this callback."""
        with checkpoint.as_directory() as folder:
            return _keras.saving.load_model(os.path.join(folder, filename))

    def _event(self, event: str, *args: Any, **kwargs: Any) -> None:
        logs = kwargs.get("logs", args[-1] if args and isinstance(args[-1], dict) else None)
        metrics = pick(self._names, logs or {}, self._where)
        if event in self._checkpoint_on:
            model = self.model

            def save(folder: str) -> None:
                model.save(os.path.join(folder, self._filename))

            report(metrics, save)
        elif metrics:
            report(metrics)


class TuneReportCallback(TuneReportCheckpointCallback):
    """Reports Keras's logs on `on` (no checkpoint)."""

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        on: str | list[str] = "epoch_end",
    ) -> None:
        super().__init__(checkpoint_on=None, report_metrics_on=on, metrics=metrics)


__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]
