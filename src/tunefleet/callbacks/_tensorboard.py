"""TensorBoard: every numeric result of every trial as scalars, and its HParams.

`TBXLoggerCallback` (Ray Tune's name) writes with tensorboardX (extra
``tunefleet[tensorboard]``) into each trial's directory, so ``tensorboard --logdir
<experiment>`` shows one run per trial. Tags are Ray Tune's (``ray/tune/<key>``, nested
keys joined with "/"), so dashboards made for Ray Tune runs keep working. When a trial
ends, its config (redacted) and its last numeric results go to the HParams dashboard.
"""

from __future__ import annotations

from typing import Any

from tunefleet._metrics import flatten
from tunefleet._redact import redact
from tunefleet.callbacks._base import LoggerCallback
from tunefleet.callbacks._files import numeric_metrics, trial_dir
from tunefleet.trial import Trial


def _hparam(value: Any) -> Any:
    """What the HParams dashboard takes: numbers, strings and booleans."""
    item = getattr(value, "item", None)  # a numpy scalar (np.int64, np.float32, np.bool_)
    if callable(item) and type(value).__module__ == "numpy" and getattr(value, "ndim", 1) == 0:
        value = item()
    return value if isinstance(value, (bool, int, float, str)) else str(value)


class TBXLoggerCallback(LoggerCallback):
    """TensorBoard scalars per trial and the HParams dashboard, via tensorboardX."""

    def __init__(self) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError as e:
            raise ImportError(
                'TBXLoggerCallback needs tensorboardX: pip install "tunefleet[tensorboard]"'
            ) from e
        self._writer_class = SummaryWriter
        self._writers: dict[str, Any] = {}
        self._last: dict[str, dict[str, float]] = {}

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        writer = self._writers.get(trial.trial_id)
        if writer is None:
            writer = self._writer_class(logdir=trial_dir(trial), flush_secs=5)
            self._writers[trial.trial_id] = writer
        step = int(result.get("training_iteration", 0))
        numbers = numeric_metrics(result)
        for key, value in numbers.items():
            writer.add_scalar(f"ray/tune/{key}", value, global_step=step)
        self._last[trial.trial_id] = numbers

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        writer = self._writers.pop(trial.trial_id, None)
        last = self._last.pop(trial.trial_id, None)
        if writer is None:
            return
        if last:
            config = flatten(redact(trial.config))
            hparams = {key: _hparam(value) for key, value in config.items()}
            writer.add_hparams(hparams, {f"ray/tune/{k}": v for k, v in last.items()})
        writer.close()

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
