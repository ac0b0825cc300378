"""What the local and Ray backends share about a running attempt: the worker that runs
it, its time limits, the TIMEOUT record, the trial's stderr tail, and the worker loop's
messages as events.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from tunefleet.backends._base import Event, Failed, Finished, Results, TrialLaunch
from tunefleet.backends._protocol import TrialFinished, TrialMessage, TrialResults
from tunefleet.trial import FailureKind, FailureRecord

_STDERR_TAIL_BYTES = 4000


@dataclass(kw_only=True, eq=False)
class Worker:
    """A worker process or a Ray actor, and the attempt it runs (if any)."""

    launch: TrialLaunch | None = None
    stopping: bool = False  # asked to stop: its end is Finished("stopped")
    stop_deadline: float | None = None  # when the stop is pushed harder (_force_stop)
    forced: int = 0  # how many times the stop was pushed (SIGTERM, then SIGKILL)
    retiring: bool = False  # told to exit or killed: never given another trial
    timed_out: bool = False  # reported Failed(TIMEOUT) and being killed: its messages dropped
    # limits of the running attempt (trial_timeout_s, heartbeat_timeout_s): monotonic times
    clock_start: float | None = None  # when the attempt started running
    last_report: float | None = None  # the heartbeat: start, then every Results
    last_iteration: int | None = None

    def start_clock(self) -> None:
        """The attempt runs from now: its time limit and heartbeat count from here."""
        self.clock_start = self.last_report = time.monotonic()


def out_of_memory(event: Event) -> bool:
    """Whether the attempt failed for lack of memory (host or GPU). Its worker or actor
    is not reused: the next trial gets that memory back (torch's CUDA cache included)."""
    return isinstance(event, Failed) and event.failure.kind in (
        FailureKind.OOM,
        FailureKind.GPU_OOM,
    )


def limit_deadline(attempt: Worker) -> tuple[float, str] | None:
    """When the running attempt times out, and which limit that is; None if never."""
    launch = attempt.launch
    if launch is None or attempt.clock_start is None or attempt.stopping or attempt.timed_out:
        return None
    limits = []
    if launch.timeout_s is not None:
        limits.append((attempt.clock_start + launch.timeout_s, "trial_timeout_s"))
    if launch.heartbeat_s is not None and attempt.last_report is not None:
        limits.append((attempt.last_report + launch.heartbeat_s, "heartbeat_timeout_s"))
    return min(limits) if limits else None


def timeout_record(attempt: Worker, limit: str, now: float) -> FailureRecord:
    """The TIMEOUT failure of an attempt that passed `limit` (see `limit_deadline`)."""
    launch = attempt.launch
    assert launch is not None and attempt.clock_start is not None
    if limit == "trial_timeout_s":
        what = f"ran {now - attempt.clock_start:.1f} s (trial_timeout_s={launch.timeout_s:g})"
    else:
        since = attempt.last_report or attempt.clock_start
        start = " since it started" if since == attempt.clock_start else ""
        what = f"no report for {now - since:.1f} s{start}"
        what += f" (heartbeat_timeout_s={launch.heartbeat_s:g})"
    return FailureRecord(
        kind=FailureKind.TIMEOUT,
        message=f"the trial was killed: it {what}",
        stderr_tail=trial_stderr_tail(launch),
        attempt=launch.attempt,
        iteration=attempt.last_iteration,
        checkpoint=launch.checkpoint,
    )


def trial_stderr_tail(launch: TrialLaunch) -> str | None:
    return stderr_tail(os.path.join(launch.trial_dir, launch.log_files[1]))


_STACK_HEADERS = ("Traceback (most recent call last)", "Fatal Python error")
_STACK_TAIL_LINES = 80  # a stack's header this far from the end is kept


def stderr_tail(path: str) -> str | None:
    """The last 20 lines of a log file (of its last 4,000 bytes), or from the last header
    of a Python stack in them (a traceback's, or faulthandler's "Fatal Python error"), so
    a deep stack keeps what it says; None if unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _STDERR_TAIL_BYTES))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = data.splitlines()
    start = max(0, len(lines) - 20)
    for i in range(len(lines) - 1, max(-1, len(lines) - _STACK_TAIL_LINES - 1), -1):
        if lines[i].startswith(_STACK_HEADERS):
            start = min(start, i)
            break
    return "\n".join(lines[start:]) if lines else None


def trial_event(attempt: Worker, msg: TrialMessage) -> Event | None:
    """The event of a worker loop's message, if it is of the attempt running now.

    A message of another trial or attempt, or of one already reported as timed out,
    gives None. Results also move the attempt's heartbeat.
    """
    launch = attempt.launch
    if (
        launch is None
        or attempt.timed_out
        or launch.trial_id != msg.trial_id
        or launch.epoch != msg.epoch
    ):
        return None
    if isinstance(msg, TrialResults):
        attempt.last_report = time.monotonic()
        if msg.items:
            attempt.last_iteration = msg.items[-1][0].get("training_iteration")
        return Results(msg.trial_id, msg.epoch, msg.items)
    if isinstance(msg, TrialFinished):
        return Finished(msg.trial_id, msg.epoch, msg.how, msg.checkpoint)
    return Failed(msg.trial_id, msg.epoch, msg.failure)
