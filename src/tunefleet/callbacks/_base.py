"""The callback interface: hooks the controller calls as the experiment runs.

Hook names and arguments are Ray Tune's, so existing callbacks port unchanged.
`iteration` is the controller's step count; `trials` the list of all trials.
"""

from __future__ import annotations

from typing import Any

from tunefleet.storage.checkpoint import Checkpoint
from tunefleet.trial import Trial


class Callback:
    """Subclass and override the hooks you need; each does nothing by default."""

    def setup(self, stop: Any = None, num_samples: int | None = None, **info: Any) -> None:
        """Called once before the first trial starts."""

    def on_step_begin(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        pass

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        pass

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        pass

    def on_trial_restore(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        pass

    def on_trial_result(
        self,
        iteration: int,
        trials: list[Trial],
        trial: Trial,
        result: dict[str, Any],
        **info: Any,
    ) -> None:
        pass

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        pass

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        pass

    def on_checkpoint(
        self,
        iteration: int,
        trials: list[Trial],
        trial: Trial,
        checkpoint: Checkpoint,
        **info: Any,
    ) -> None:
        pass

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        pass
