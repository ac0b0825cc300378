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

    def setup(
        self,
        stop: Any = None,
        num_samples: int | None = None,
        total_num_samples: int | None = None,
        **info: Any,
    ) -> None:
        """Called once before the first trial starts.

        Args:
            stop: the experiment's `Stopper` (None without one).
            num_samples: `TuneConfig.num_samples`.
            total_num_samples: the trials the experiment makes: num_samples times the
                grid's size (None when unbounded, num_samples=-1).
        """

    def on_step_begin(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        """Called at the start of each step of the controller's loop."""

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        """Called at the end of each step of the controller's loop."""

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        """Called when a trial has started for the first time."""

    def on_trial_restore(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        """Called when a trial has started again (after a pause, a retry or a resume)."""

    def on_trial_save(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        """Called when a trial has saved a checkpoint (just before `on_checkpoint`)."""

    def on_trial_result(
        self,
        iteration: int,
        trials: list[Trial],
        trial: Trial,
        result: dict[str, Any],
        **info: Any,
    ) -> None:
        """Called on each result, after the scheduler and the searcher saw it."""

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        """Called when a trial has finished or was stopped, after the scheduler and searcher."""

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        """Called when a trial has failed for good (no retry left)."""

    def on_trial_recover(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        """Called when a trial has failed and will be retried (`FailureConfig.max_failures`)."""

    def on_checkpoint(
        self,
        iteration: int,
        trials: list[Trial],
        trial: Trial,
        checkpoint: Checkpoint,
        **info: Any,
    ) -> None:
        """Called when a trial's checkpoint has been saved and recorded."""

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        """Called once when the experiment ends (finished, stopped or interrupted)."""

    def get_state(self) -> dict[str, Any] | None:
        """The callback's state, for callbacks that keep one (None: nothing to keep)."""
        return None

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a state returned by `get_state`."""


class LoggerCallback(Callback):
    """Base class for loggers: one hook per trial event, with the trial alone.

    The trial hooks of `Callback` call these; override the ones you need. Close a
    trial's files in `log_trial_end`.

    Example:
        >>> class PrintLogger(LoggerCallback):
        ...     def log_trial_result(self, iteration, trial, result):
        ...         print(trial.trial_id, result["loss"])
    """

    def log_trial_start(self, trial: Trial) -> None:
        """A trial started (for the first time)."""

    def log_trial_restore(self, trial: Trial) -> None:
        """A trial started again: after a pause, a retry or a resume."""

    def log_trial_save(self, trial: Trial) -> None:
        """A trial saved a checkpoint."""

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        """A trial reported `result`; `iteration` is the experiment's step count."""

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        """A trial ended: `failed` is True when it errored."""

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self.log_trial_start(trial)

    def on_trial_restore(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self.log_trial_restore(trial)

    def on_trial_save(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.log_trial_save(trial)

    def on_trial_result(
        self,
        iteration: int,
        trials: list[Trial],
        trial: Trial,
        result: dict[str, Any],
        **info: Any,
    ) -> None:
        self.log_trial_result(iteration, trial, result)

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self.log_trial_end(trial, failed=False)

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self.log_trial_end(trial, failed=True)
