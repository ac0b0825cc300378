"""The scheduler interface: pure event handlers that return decisions.

A scheduler never touches processes or files. It sees trials (read-only) and
results, and answers with a `Decision`; the controller and backend carry it out.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunefleet._metrics import MetricSpec, ModeSpec, fill_objective
from tunefleet.schedulers._candidates import Candidates
from tunefleet.trial import Trial


class Decision(str, enum.Enum):
    """What to do with a trial after a result."""

    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"  # checkpoint, then free the slot; may be resumed later
    STOP = "STOP"  # end the trial on purpose (TERMINATED)


@dataclass(frozen=True)
class Exploit:
    """PBT's decision: pause the trial, then restart it from another trial's checkpoint.

    The controller copies `source_trial_id`'s latest checkpoint into this trial's
    directory, sets its config to `new_config`, records the step in the trial's
    lineage (an "exploit" event), and runs it again when the scheduler picks it.
    """

    source_trial_id: str
    new_config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Resize:
    """ResourceChangingScheduler's decision: pause the trial, then run it again from its
    checkpoint with `resources` (e.g. ``{"cpu": 2.0, "gpu": 0.0}``)."""

    resources: dict[str, float]


SchedulerDecision = Decision | Exploit | Resize


class Cluster:
    """What a scheduler may know of the resources: a live view kept by the controller.

    It is the first argument of a `ResourceChangingScheduler` allocation function, in
    the place of Ray Tune's ``tune_controller``, and answers the same questions:
    `get_live_trials()`, `get_num_cpus()` and `get_num_gpus()`.

    Attributes:
        capacity: everything the backend has, e.g. ``{"cpu": 8.0, "gpu": 1.0, ...}``.
        running: the running trials by id (each with its `resources`); do not modify.
        base_resources: what each trial asked for (`tune.with_resources`).
    """

    def __init__(
        self,
        capacity: Mapping[str, float],
        running: Mapping[str, Trial],
        base_resources: Mapping[str, float],
    ) -> None:
        self.capacity = dict(capacity)
        self.running = running
        self.base_resources = dict(base_resources)

    def get_live_trials(self) -> list[Trial]:
        """The trials that hold resources now (the running ones)."""
        return list(self.running.values())

    def get_num_cpus(self) -> float:
        """All the CPUs trials may use (not only the free ones)."""
        return self.capacity.get("cpu", 0.0)

    def get_num_gpus(self) -> float:
        """All the GPUs trials may use (not only the free ones)."""
        return self.capacity.get("gpu", 0.0)

    @property
    def _resource_updater(self) -> Cluster:
        # Ray's documented allocation example asks `tune_controller._resource_updater`
        # for get_num_cpus()/get_num_gpus(); the answers are here.
        return self

    def free(self) -> dict[str, float]:
        """Capacity minus what the running trials hold."""
        free = dict(self.capacity)
        for trial in self.running.values():
            for name, amount in trial.resources.items():
                free[name] = free.get(name, 0.0) - amount
        return free


class TrialScheduler:
    """Base class of trial schedulers (Ray Tune's `TrialScheduler` names).

    Args:
        metric: the metric to optimise; filled in from `TuneConfig` if None.
        mode: "min" or "max"; filled in from `TuneConfig` if None.
    """

    CONTINUE = Decision.CONTINUE
    PAUSE = Decision.PAUSE
    STOP = Decision.STOP

    #: True when the trial must wait for the decision on every result (a pausing
    #: or synchronous scheduler); False lets trials report without waiting.
    needs_sync_decisions: bool = False
    _own_metric: bool = False
    _own_mode: bool = False

    def __init__(self, *, metric: str | None = None, mode: str | None = None) -> None:
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"mode={mode!r} is not valid: it must be 'min' or 'max'")
        self.metric = metric
        self.mode = mode
        # given to the constructor (not filled in later by set_search_properties)
        self._own_metric, self._own_mode = metric is not None, mode is not None

    def set_search_properties(self, metric: MetricSpec, mode: ModeSpec, **spec: Any) -> bool:
        """Take the experiment's metric and mode; False (Ray's answer) when the scheduler
        has its own and the experiment names one too. With several objectives in the
        experiment, a single-metric scheduler's own metric and mode are used instead."""
        several = isinstance(metric, (list, tuple)) or isinstance(mode, (list, tuple))
        if not several and (
            (self._own_metric and metric is not None) or (self._own_mode and mode is not None)
        ):
            return False
        owner = type(self).__name__
        self.metric, self.mode = fill_objective(owner, self.metric, self.mode, metric, mode)
        return True

    def complete_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The config a new trial runs with: `config`, plus any key this scheduler needs
        that it lacks (Ray's PBT samples its mutated keys there). Called once per new
        trial, before it is recorded."""
        return config

    def on_trial_add(self, trial: Trial) -> None:
        """A new trial was created."""

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> SchedulerDecision:
        """A result arrived; the metric in it is finite. PBT-like schedulers may exploit."""
        return Decision.CONTINUE

    def on_trial_complete(self, trial: Trial, result: dict[str, Any] | None) -> None:
        """The trial ended without error."""

    def on_trial_error(self, trial: Trial) -> None:
        """The trial failed (and will not be retried)."""

    def on_trial_remove(self, trial: Trial) -> None:
        """The trial was stopped by someone else than this scheduler."""

    def choose_trial_to_run(self, candidates: Candidates | Sequence[Trial]) -> Trial | None:
        """Pick the next trial to run among PENDING and PAUSED ones, or None.

        The controller passes its live `Candidates` view (O(1) lookups by id; see
        `Candidates.starved`); a plain sequence of trials is accepted too. None lets
        the searcher add a new trial. FIFO by default: pending first, then paused.
        """
        pool = Candidates.of(candidates)
        return pool.first_pending() or pool.first_paused()

    def set_cluster(self, cluster: Cluster) -> None:
        """Called once before the first trial starts (ResourceChangingScheduler uses it)."""

    def exploit_on_resume(self, trial: Trial) -> Exploit | None:
        """Called for a PAUSED trial this scheduler chose to run, right before it runs.

        An `Exploit` makes the controller copy the source's checkpoint and set the
        new config first (synchronous PBT exploits the trials it paused this way).
        """
        return None

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        pass
