"""Hugging Face Transformers: report a `Trainer`'s evaluations and the checkpoints it saves.

Add the callback to the Trainer inside the trainable. Each evaluation is reported
(``eval_loss``, ..., plus ``epoch`` and ``step``); when the Trainer saves a checkpoint
right after, it is reported with those metrics as a tunefleet checkpoint. To resume,
pass the trial's checkpoint back to the Trainer. Extra: ``tunefleet[transformers]``.

Example:
    >>> trainer = Trainer(model, args, train_dataset=train, eval_dataset=valid,  # doctest: +SKIP
    ...                   callbacks=[TuneReportCheckpointCallback()])
    >>> ckpt = tune.get_checkpoint()  # doctest: +SKIP
    >>> trainer.train(resume_from_checkpoint=ckpt.path if ckpt else None)
"""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

import os
from typing import Any

from tunefleet.integration._base import import_framework, metric_names, pick, report

_transformers: Any = import_framework(
    "transformers",
    package="transformers",
    extra="transformers",
    what="tunefleet.integration.huggingface",
)
_CHECKPOINT_PREFIX = "checkpoint"  # the Trainer's folders: <output_dir>/checkpoint-<step>


class TuneReportCheckpointCallback(_transformers.TrainerCallback):
    """Reports each evaluation, and each checkpoint the Trainer saves, to tunefleet.

    Args:
        metrics: None (every metric of the evaluation), a name, a list of names, or
            ``{name to report: name in the Trainer's metrics}`` (``"eval_loss"``).
        save_checkpoints: False reports the metrics only.
    """

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        save_checkpoints: bool = True,
    ) -> None:
        super().__init__()
        self._where = f"tunefleet.integration.huggingface.{type(self).__name__}"
        self._names = metric_names(metrics, self._where)
        self._save_checkpoints = bool(save_checkpoints)
        self._pending: dict[str, Any] | None = None  # evaluated, waiting for the save after

    def _metrics(self, state: Any, logged: dict[str, Any]) -> dict[str, Any]:
        metrics = pick(self._names, logged, self._where)
        metrics.setdefault("epoch", state.epoch)
        metrics.setdefault("step", state.global_step)
        return metrics

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: Any = None, **kwargs: Any
    ) -> None:
        self._flush()
        self._pending = self._metrics(state, dict(metrics or {}))
        if not (self._save_checkpoints and control.should_save):
            self._flush()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._save_checkpoints:
            return
        folder = os.path.join(args.output_dir, f"{_CHECKPOINT_PREFIX}-{state.global_step}")
        metrics = self._pending
        if metrics is None:  # saved without an evaluation: the last training log
            logs = state.log_history[-1] if state.log_history else {}
            metrics = {**logs, "epoch": state.epoch, "step": state.global_step}
        self._pending = None
        # the Trainer's own folder is copied into the trial's storage (no temporary copy)
        report(metrics, folder=folder if os.path.isdir(folder) else None)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._flush()

    def _flush(self) -> None:
        if self._pending is not None:
            metrics, self._pending = self._pending, None
            report(metrics)


class TuneReportCallback(TuneReportCheckpointCallback):
    """Reports each evaluation of the Trainer (no checkpoint)."""

    def __init__(self, metrics: str | list[str] | dict[str, str] | None = None) -> None:
        super().__init__(metrics, save_checkpoints=False)


RayTrainReportCallback = TuneReportCheckpointCallback  # Ray Train's name for it

__all__ = ["RayTrainReportCallback", "TuneReportCallback", "TuneReportCheckpointCallback"]
