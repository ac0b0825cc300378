"""The trial record: status, why it stopped (`StopCause`), failure record, and their JSON forms.

A `Trial` is plain data owned by the controller. Schedulers, searchers and
callbacks receive it read-only; the store persists it as JSON columns.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tunefleet._metrics import flatten
from tunefleet.resources import PlacementGroupFactory
from tunefleet.storage.checkpoint import Checkpoint


class StopCause(str, enum.Enum):
    """Why tunefleet stopped a trial or the experiment: code branches on the member,
    people read its text (`message`, `str()`), and the store keeps that text.

    A reason with a detail in it (the scheduler's name, the time budget) is plain text
    in `Trial.stop_reason`; `of` reads a stored reason back.
    """

    COMPLETED = "completed"  # the trainable returned by itself
    DONE = "done"  # its last result said done
    STOP_CRITERIA = "stop criteria"  # RunConfig(stop=...) stopped it
    PAUSED_BY_SCHEDULER = "paused by scheduler"  # anything else pausing is an interruption
    NOT_RESUMED_BY_SCHEDULER = "not resumed by the scheduler"
    NOT_RESUMED = "not resumed (resume_unfinished=False)"
    INTERRUPTED = "interrupted"  # Ctrl-C: the experiment can be resumed
    DRIVER_ERROR = "error in the driver"
    FAIL_FAST = "fail_fast: a trial failed"
    STOPPER = "stopper ended the experiment"  # Stopper.stop_all()
    SCHEDULER = "scheduler"  # its scheduler stopped it; stored with a detail (`with_detail`)

    @property
    def message(self) -> str:
        """The text shown to people (and stored)."""
        return self.value

    def __str__(self) -> str:
        return self.value

    def with_detail(self, detail: str) -> str:
        """The text of this cause with a detail, e.g. ``"scheduler (ASHAScheduler)"``."""
        return f"{self.value} ({detail})"

    @classmethod
    def cause_of(cls, reason: str | None) -> StopCause | None:
        """The cause a reason states, with or without a detail (`with_detail`), else None."""
        if reason is None or isinstance(reason, StopCause):
            return reason
        head = reason[: reason.index(" (")] if reason.endswith(")") and " (" in reason else reason
        try:
            return cls(head)
        except ValueError:
            return None

    @classmethod
    def of(cls, reason: str | None) -> StopCause | str | None:
        """The member a stored reason is the text of, else the text itself."""
        if reason is None or isinstance(reason, StopCause):
            return reason
        try:
            return cls(reason)
        except ValueError:
            return reason


#: `Trial.stop_reason` of a trial its scheduler paused (kept for its import path).
PAUSED_BY_SCHEDULER = StopCause.PAUSED_BY_SCHEDULER


class TrialStatus(str, enum.Enum):
    """Lifecycle: PENDING -> RUNNING -> (PAUSED -> RUNNING)* -> TERMINATED | ERROR."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"

    @property
    def is_finished(self) -> bool:
        return self in (TrialStatus.TERMINATED, TrialStatus.ERROR)

    def __str__(self) -> str:  # Ray's statuses are plain strings: print "ERROR", not the member
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class FailureKind(str, enum.Enum):
    """Why a trial failed. A crash is never recorded as a success."""

    EXCEPTION = "EXCEPTION"  # the trainable raised
    CRASH = "CRASH"  # the process died: signal or non-zero exit
    OOM = "OOM"
    GPU_OOM = "GPU_OOM"
    TIMEOUT = "TIMEOUT"
    NAN_METRIC = "NAN_METRIC"  # NaN or infinite, with nan_policy="error"
    BAD_METRIC = "BAD_METRIC"  # an objective that is not a number (text)
    NODE_LOST = "NODE_LOST"


@dataclass
class FailureRecord:
    """What went wrong with one attempt of a trial."""

    kind: FailureKind
    message: str
    traceback: str | None = None
    exception_type: str | None = None
    signal: str | None = None
    exit_code: int | None = None
    stderr_tail: str | None = None
    attempt: int = 0
    iteration: int | None = None
    checkpoint: str | None = None
    time: float = field(default_factory=time.time)
    peak_memory: int | None = None  # bytes, for OOM / GPU_OOM, when known
    memory_limit: int | None = None  # bytes: the limit that was hit (trial or node)

    def one_line(self) -> str:
        """The cause in one line, for summaries and tables."""
        detail = self.message.strip().splitlines()[-1] if self.message.strip() else ""
        if self.kind is FailureKind.EXCEPTION and self.exception_type:
            cause = f"{self.exception_type}: {detail}" if detail else self.exception_type
        else:
            cause = detail or (self.signal or f"exit code {self.exit_code}")
        where = f" at iteration {self.iteration}" if self.iteration else ""
        return f"{self.kind.value}{where}: {cause}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "message": self.message,
            "traceback": self.traceback,
            "exception_type": self.exception_type,
            "signal": self.signal,
            "exit_code": self.exit_code,
            "stderr_tail": self.stderr_tail,
            "attempt": self.attempt,
            "iteration": self.iteration,
            "checkpoint": self.checkpoint,
            "time": self.time,
            "peak_memory": self.peak_memory,
            "memory_limit": self.memory_limit,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FailureRecord:
        return cls(**{**data, "kind": FailureKind(data["kind"])})

    def __str__(self) -> str:
        return self.one_line()


@dataclass
class Trial:
    """One configuration being trained, and everything known about it.

    `epoch` counts the starts of this trial (first start, resumes, retries): the
    backend tags every message with it, so late messages of an old attempt are
    recognised and dropped. `attempt` counts failures that were retried.

    Callbacks and loggers written for Ray Tune read the same attributes they read on
    Ray's `Trial`: ``str(trial)`` is its name, `trial_id`, `config`, `status` (compare
    with ``Trial.TERMINATED`` and the like, or the same strings), `last_result`,
    `checkpoint`, `local_path` / `path` / `logdir`, `trainable_name`,
    `custom_trial_name`, `experiment_tag`, `evaluated_params`, `num_failures`,
    `error_file` and `placement_group_factory`.
    """

    PENDING: ClassVar[str] = TrialStatus.PENDING.value
    RUNNING: ClassVar[str] = TrialStatus.RUNNING.value
    PAUSED: ClassVar[str] = TrialStatus.PAUSED.value
    TERMINATED: ClassVar[str] = TrialStatus.TERMINATED.value
    ERROR: ClassVar[str] = TrialStatus.ERROR.value

    trial_id: str
    index: int
    name: str
    config: dict[str, Any]
    resources: dict[str, float]
    path: str  # the trial's directory
    status: TrialStatus = TrialStatus.PENDING
    attempt: int = 0
    epoch: int = 0
    num_results: int = 0
    last_result: dict[str, Any] = field(default_factory=dict)  # {} until it reports (Ray)
    latest_checkpoint: str | None = None
    checkpoint_iteration: int = 0  # training_iteration at latest_checkpoint
    checkpoint_time_total: float = 0.0  # time_total_s at latest_checkpoint
    error: FailureRecord | None = None
    stop_reason: StopCause | str | None = None  # text: a reason with a detail in it
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    ended_at: float | None = None
    trainable_name: str = ""  # from_json reads it from `name` in records that lack it

    def __hash__(self) -> int:
        """By `trial_id`, so trials key dicts as in Ray Tune's loggers (equal trials
        share their id)."""
        return hash(self.trial_id)

    @property
    def iteration(self) -> int:
        return int(self.last_result.get("training_iteration", 0))

    # -- Ray Tune's view of a trial (read-only) ------------------------------------------------
    @property
    def checkpoint(self) -> Checkpoint | None:
        """Its latest checkpoint, or None."""
        return Checkpoint(self.latest_checkpoint) if self.latest_checkpoint else None

    @property
    def local_path(self) -> str:
        """The trial's directory (Ray: its local results directory)."""
        return self.path

    @property
    def logdir(self) -> str:
        """The trial's directory (Ray's older name for `local_path`)."""
        return self.path

    @property
    def custom_trial_name(self) -> str | None:
        """The name `TuneConfig.trial_name_creator` gave it, else None."""
        return None if self.name == self._default_name() else self.name

    @property
    def experiment_tag(self) -> str:
        """Its index and configuration in one line, e.g. ``"3_lr=0.0100,width=64"``."""
        values = ",".join(f"{k}={_tag_value(v)}" for k, v in self.evaluated_params.items())
        return f"{self.index}_{values}" if values else str(self.index)

    @property
    def evaluated_params(self) -> dict[str, Any]:
        """The configuration, flattened with ``/`` (Ray: the sampled values only)."""
        return flatten(self.config)

    @property
    def num_failures(self) -> int:
        """How many times it failed (retried failures, and the last one if it ended in ERROR)."""
        return self.attempt + (self.status is TrialStatus.ERROR)

    @property
    def error_file(self) -> str | None:
        """None: the failure is in `error` (its message and traceback), not in a file."""
        return None

    @property
    def placement_group_factory(self) -> PlacementGroupFactory:
        """Its resources as Ray's `PlacementGroupFactory` (one bundle)."""
        return PlacementGroupFactory.of(self.resources)

    def _default_name(self) -> str:
        return f"{self.trainable_name}_{self.trial_id}" if self.trainable_name else self.name

    def __str__(self) -> str:
        return self.name

    def to_json(self) -> dict[str, Any]:
        return {
            "trial_id": self.trial_id,
            "index": self.index,
            "name": self.name,
            "config": self.config,
            "resources": self.resources,
            "path": self.path,
            "status": self.status.value,
            "attempt": self.attempt,
            "epoch": self.epoch,
            "num_results": self.num_results,
            "last_result": self.last_result,
            "latest_checkpoint": self.latest_checkpoint,
            "checkpoint_iteration": self.checkpoint_iteration,
            "checkpoint_time_total": self.checkpoint_time_total,
            "error": self.error.to_json() if self.error else None,
            "stop_reason": self.stop_reason,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "trainable_name": self.trainable_name,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trial:
        error = data.get("error")
        name, suffix = str(data.get("name", "")), f"_{data.get('trial_id')}"
        return cls(
            **{
                "trainable_name": name[: -len(suffix)] if name.endswith(suffix) else "",
                **data,
                "status": TrialStatus(data["status"]),
                "last_result": data.get("last_result") or {},  # older records: None
                "error": FailureRecord.from_json(error) if error else None,
                "stop_reason": StopCause.of(data.get("stop_reason")),
            }
        )

    def __repr__(self) -> str:
        return f"Trial({self.name!r}, {self.status.value})"


def _tag_value(value: Any) -> str:
    """A value as Ray writes it in an experiment tag (floats with 4 significant digits)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


__all__ = [
    "FailureKind",
    "FailureRecord",
    "StopCause",
    "Trial",
    "TrialStatus",
]
