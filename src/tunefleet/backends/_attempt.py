"""What the local and Ray backends share about a running attempt: its time limits,
the TIMEOUT record, the trial's stderr tail, and the worker loop's messages as events.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from tunefleet.backends._base import Event, Failed, Finished, Results, TrialLaunch
from tunefleet.trial import FailureKind, FailureRecord

_STDERR_TAIL_BYTES = 4000


class Attempt(Protocol):
    """A worker process or an actor, as far as the limits go."""

    launch: TrialLaunch | None
    clock_start: float | None  # when the attempt started running
    last_report: float | None  # the heartbeat: start, then every Results
    last_iteration: int | None
    stopping: bool
    timed_out: bool


def out_of_memory(event: Event) -> bool:
    """Whether the attempt failed for lack of memory (host or GPU). Its worker or actor
    is not reused: the next trial gets that memory back (torch's CUDA cache included)."""
    return isinstance(event, Failed) and event.failure.kind in (
        FailureKind.OOM,
        FailureKind.GPU_OOM,
    )


def limit_deadline(attempt: Attempt) -> tuple[float, str] | None:
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


def timeout_record(attempt: Attempt, limit: str, now: float) -> FailureRecord:
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
    return stderr_tail(os.path.join(launch.trial_dir, "stderr.log"))


def stderr_tail(path: str) -> str | None:
    """The last 20 lines of a log file (of its last 4,000 bytes); None if unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _STDERR_TAIL_BYTES))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = data.splitlines()[-20:]
    return "\n".join(lines) if lines else None


def trial_event(attempt: Attempt, msg: tuple[Any, ...]) -> Event | None:
    """The event of a worker loop's results/finished/failed message, if it is current.

    A message of another trial or attempt, or of one already reported as timed out,
    gives None. A Results message also moves the attempt's heartbeat.
    """
    launch = attempt.launch
    if launch is None or attempt.timed_out or (launch.trial_id, launch.epoch) != msg[1:3]:
        return None
    kind = msg[0]
    if kind == "results":
        import time

        attempt.last_report = time.monotonic()
        if msg[3]:
            attempt.last_iteration = msg[3][-1][0].get("training_iteration")
        return Results(msg[1], msg[2], msg[3])
    if kind == "finished":
        return Finished(msg[1], msg[2], msg[3], msg[4])
    if kind == "failed":
        return Failed(msg[1], msg[2], FailureRecord.from_json(msg[3]))
    return None
