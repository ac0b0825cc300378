"""PyTorch Lightning callbacks, built on whichever Lightning package the caller imports.

`lightning.pytorch.Trainer` accepts only `lightning.pytorch.Callback` subclasses and
`pytorch_lightning.Trainer` only `pytorch_lightning.Callback` ones, so the classes are
made once per package by `make_callbacks`.
"""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

import functools
import os
from typing import Any

from tunefleet.integration._base import check_filename, hooks, metric_names, pick, report

# Saving a checkpoint from these would call them again.
_NOT_TRIGGERS = frozenset({"save_checkpoint", "load_checkpoint"})


def make_callbacks(pl: Any, where: str) -> tuple[type[Any], type[Any], type[Any]]:
    """``(TuneCallback, TuneReportCheckpointCallback, TuneReportCallback)`` for `pl`."""
    events = {
        name[3:]
        for name in dir(pl.Callback)
        if name.startswith("on_") and callable(getattr(pl.Callback, name))
    } - _NOT_TRIGGERS

    class TuneCallback(pl.Callback):
        """Base class: calls `_handle(trainer, pl_module)` on each event named in `on`.

        Args:
            on: a Lightning hook name less its ``on_`` (``"validation_end"``,
                ``"train_epoch_end"``, ...), or a list of them.
        """

        def __init__(self, on: str | list[str] = "validation_end") -> None:
            super().__init__()
            self._on = hooks(on, sorted(events), f"{where}.{type(self).__name__}")
            for event in self._on:  # only these hooks are overridden, on this instance
                setattr(self, f"on_{event}", functools.partial(self._event, event))

        def _event(self, event: str, trainer: Any, pl_module: Any, *args: Any, **kw: Any) -> None:
            if not trainer.sanity_checking:
                self._handle(trainer, pl_module)

        def _handle(self, trainer: Any, pl_module: Any) -> None:
            raise NotImplementedError

    class TuneReportCheckpointCallback(TuneCallback):
        """Reports Lightning's logged metrics to tunefleet, with a checkpoint of the trainer.

        Args:
            metrics: None (every metric in ``trainer.callback_metrics``), a name, a
                list of names, or ``{name to report: name logged with self.log}``.
            filename: the checkpoint's file name inside the reported checkpoint.
            save_checkpoints: False reports metrics only.
            on: when to report: a Lightning hook less its ``on_``, or a list of them.

        Example:
            >>> trainer = pl.Trainer(callbacks=[TuneReportCheckpointCallback(  # doctest: +SKIP
            ...     metrics={"loss": "val_loss"}, on="validation_end")])
            >>> ckpt = tune.get_checkpoint()  # doctest: +SKIP
            >>> trainer.fit(model, ckpt_path=ckpt and os.path.join(ckpt.path, "checkpoint"))
        """

        def __init__(
            self,
            metrics: str | list[str] | dict[str, str] | None = None,
            filename: str = "checkpoint",
            save_checkpoints: bool = True,
            on: str | list[str] = "validation_end",
        ) -> None:
            name = f"{where}.{type(self).__name__}"
            self._names = metric_names(metrics, name)
            self._filename = check_filename(filename, name)
            self._save_checkpoints = bool(save_checkpoints)
            self._where = name
            super().__init__(on=on)

        def _handle(self, trainer: Any, pl_module: Any) -> None:
            logged = dict(trainer.callback_metrics)
            if self._names is None and not logged:
                return  # nothing logged yet
            metrics = pick(self._names, logged, self._where)
            path = self._filename

            def save(folder: str) -> None:
                trainer.save_checkpoint(os.path.join(folder, path))

            report(metrics, save if self._save_checkpoints else None)

    class TuneReportCallback(TuneReportCheckpointCallback):
        """Reports Lightning's logged metrics to tunefleet (no checkpoint)."""

        def __init__(
            self,
            metrics: str | list[str] | dict[str, str] | None = None,
            on: str | list[str] = "validation_end",
        ) -> None:
            super().__init__(metrics=metrics, save_checkpoints=False, on=on)

    for cls in (TuneCallback, TuneReportCheckpointCallback, TuneReportCallback):
        cls.__module__ = where
    return TuneCallback, TuneReportCheckpointCallback, TuneReportCallback
