"""The backend interface: where trials run, and the events they send back.

A backend starts, stops and watches trials; it owns no algorithm. Every event
carries the trial's `epoch` (one per start), so the controller can drop the
late messages of an attempt it has already given up on.
"""

from __future__ import annotations

import enum
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from tunefleet.resources import PlacementGroupFactory
from tunefleet.trial import FailureRecord

# A result item marked so is not a new result: it carries a checkpoint of the trial's
# last result (one asked for with should_checkpoint after that result was sent).
CHECKPOINT_ONLY = "__checkpoint_only__"
# A result item marked so is not a result either: the attempt restarted from an older
# checkpoint than the launch named, the newer ones failing to verify (`_restore.py`).
RESTORED = "__restored__"


@dataclass(frozen=True)
class TrialLaunch:
    """Everything a backend needs to start (or resume) one trial."""

    trial_id: str
    epoch: int
    name: str
    config: dict[str, Any]
    resources: dict[str, float]
    trial_dir: str
    attempt: int = 0
    checkpoint: str | None = None  # resume from this checkpoint directory
    # if it does not verify: the older ones, newest first, as (path, iteration, time_total)
    fallbacks: tuple[tuple[str, int, float], ...] = ()
    # a PBT exploit: copy this checkpoint (another trial's) to `checkpoint` first
    copy_from: str | None = None
    iteration: int = 0  # training_iteration already done (restored from the checkpoint)
    time_total: float = 0.0
    sync: bool = False  # wait for a decision after every result
    # ... or only after the first result at or past each point (`_milestones.Crossing`)
    decide_at: tuple[str, tuple[float, ...]] | None = None
    stop_criteria: dict[str, float] = field(default_factory=dict)
    checkpoint_freq: int = 0
    checkpoint_at_end: bool = False
    timeout_s: float | None = None  # kill the attempt after this long: TIMEOUT
    heartbeat_s: float | None = None  # kill it after this long without a report: TIMEOUT
    # Remote storage (an fsspec URL): the trial's folder there, where its checkpoints go
    # (None: trial_dir), and the fsspec filesystem that reaches it (None: fsspec's default).
    storage_dir: str | None = None
    storage_filesystem: Any = None
    # The files its stdout and stderr go to, relative to trial_dir (RunConfig.log_to_file),
    # and whether it runs with trial_dir as its working directory (Ray's default).
    log_files: tuple[str, str] = ("stdout.log", "stderr.log")
    chdir: bool = True
    # Its own bundles, when its resources came from its config as a PlacementGroupFactory
    # (None: the ones given to `with_resources`, if any).
    placement: PlacementGroupFactory | None = None


class FinishHow(str, enum.Enum):
    """How an attempt ended without error: by itself, or when asked to stop or to pause."""

    RETURNED = "returned"
    STOPPED = "stopped"
    PAUSED = "paused"


@dataclass(frozen=True, slots=True)
class Results:
    """One or more results reported by a trial, in order: (metrics, checkpoint path)."""

    trial_id: str
    epoch: int
    items: list[tuple[dict[str, Any], str | None]]


@dataclass(frozen=True, slots=True)
class Finished:
    """The attempt ended without error.

    `how` is "returned" (the trainable ended by itself), "stopped" (it stopped when
    asked) or "paused" (it stopped when asked to pause). `checkpoint` is a final
    checkpoint saved on the way out (class trainables with checkpoint_at_end).
    """

    trial_id: str
    epoch: int
    how: FinishHow = FinishHow.RETURNED
    checkpoint: str | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    """The attempt failed; `failure` says how."""

    trial_id: str
    epoch: int
    failure: FailureRecord


Event = Results | Finished | Failed


class Backend(ABC):
    """Runs trials. Implementations: local processes (default), Ray actors, simulated.

    The optional capabilities (`fatal`, `elastic`, `makes_trial_dirs`, `clock`) have
    defaults here, so the engine asks every backend the same way.
    """

    @abstractmethod
    def capacity(self) -> dict[str, float]:
        """Total resources (cpu, gpu, memory in bytes, custom) trials may use."""

    def unfit_reason(self, resources: dict[str, float]) -> str | None:
        """None if `resources` fit when nothing else runs, else why they never do."""
        return None

    @abstractmethod
    def can_start(self, resources: dict[str, float]) -> bool:
        """True if a trial needing `resources` fits in what is free now."""

    @abstractmethod
    def start_trial(self, launch: TrialLaunch) -> None:
        """Start (or resume) a trial; resources are taken until it ends."""

    @abstractmethod
    def stop_trial(self, trial_id: str, epoch: int) -> None:
        """Ask the trial to stop; kill its process group if it does not in time."""

    @abstractmethod
    def send_decision(self, trial_id: str, epoch: int, decision: str) -> None:
        """Answer a trial that waits for the decision on its latest result (launched with
        sync=True, or a result at one of its `decide_at` points): CONTINUE, PAUSE or STOP."""

    def request_checkpoint(self, trial_id: str, epoch: int) -> None:
        """Have the running attempt save a checkpoint after its current step (a result
        with ``should_checkpoint``); the checkpoint comes back as a result item marked
        `CHECKPOINT_ONLY`, or with the next result. A backend whose trials cannot save
        on request ignores it."""

    @abstractmethod
    def poll(self, timeout: float) -> list[Event]:
        """Wait up to `timeout` seconds for events; return all that are ready."""

    def attempt_alive(self, trial_id: str) -> bool:
        """True while a process of an earlier attempt of the trial still runs.

        The controller does not start the trial again until it is gone, so two
        attempts never write the same checkpoint directory at once.
        """
        return False

    @property
    def fatal(self) -> FailureRecord | None:
        """A failure that ends the experiment, since every trial would fail alike (the
        trainable does not load in a worker); None while there is none."""
        return None

    def free_retry(self, trial_id: str, failure: FailureRecord) -> bool:
        """True if the backend has fixed what made the trial fail (a GPU_OOM of a
        ``gpu="auto"`` trial, now given a larger share): its retry is not counted against
        ``FailureConfig.max_failures``. Asked once per failure."""
        return False

    @property
    def elastic(self) -> bool:
        """Whether what fits changes by itself (a cluster that grows and shrinks): then
        no concurrency is derived from `capacity()`; `can_start` says what fits now."""
        return False

    makes_trial_dirs = False
    """True when the backend's worker makes each trial's folder before the trainable
    runs; else the driver makes it at the launch (it always does when there are
    callbacks, which may open files there at ``on_trial_start``)."""

    def clock(self) -> float:
        """The experiment's clock, in seconds: real (monotonic) unless the backend's
        time is virtual (the simulated backend)."""
        return time.monotonic()

    @abstractmethod
    def shutdown(self) -> None:
        """Stop every trial and worker; afterwards no process of this backend is left."""
