"""The messages between a backend and the worker loop (``_loop.py``) that runs its trials.

They travel pickled: over a socket pair to a local worker process, through a pipe and
Ray calls to a Ray actor. NamedTuples, because a report's batch goes out as one
message and a NamedTuple costs little more than a plain tuple to build and pickle.

    backend -> loop:  Start | Stop | Decide | Save | Exit
    loop -> backend:  TrialResults | TrialFinished | TrialFailed
    worker -> backend (outside the loop):  Ready | SetupFailed (local), Gone (Ray)
"""

from __future__ import annotations

import os
import pickle
import select
import struct
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from tunefleet.backends._base import FinishHow, TrialLaunch
from tunefleet.trial import FailureRecord

ResultItem = tuple[dict[str, Any], str | None]  # (metrics, checkpoint path)


def send(conn: Connection, msg: Any) -> None:
    """Send `msg` pickled by value with the plain pickler, never `Connection.send`'s.

    multiprocessing's pickler carries reducers that other libraries register on it
    (torch's, once ``torch.multiprocessing`` is imported, share a tensor's memory
    through a side channel), so a tensor in a report or a config would reach the other
    side as a handle it cannot open. `Connection.recv` reads these bytes as usual.
    """
    conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))


_FRAME_MAX = 1 << 24  # larger messages go through `send` (Connection frames them so too)


def send_together(conn: Connection, msgs: Sequence[Any]) -> None:
    """Send `msgs` as `send` would, one after another, but in one write: the other side
    reads them as separate messages, woken once (a trial's last results and its end).

    Each is framed as `Connection.send_bytes` frames a message under 2 GiB (a 4-byte
    big-endian length, then the bytes), which is what `Connection.recv` reads.
    """
    payloads = [pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL) for msg in msgs]
    if any(len(p) > _FRAME_MAX for p in payloads):
        for payload in payloads:
            conn.send_bytes(payload)
        return
    data = memoryview(b"".join(struct.pack("!i", len(p)) + p for p in payloads))
    fd = conn.fileno()
    while data:
        data = data[os.write(fd, data) :]


class Readable:
    """The channels to wait on, kept registered between waits: `multiprocessing`'s
    `wait` builds (and tears down) a selector of every channel on each call."""

    def __init__(self) -> None:
        self._poller = select.poll()
        self._by_fd: dict[int, Connection] = {}
        self._alone: dict[int, Any] = {}  # fd -> a poll object of that channel alone

    def add(self, conn: Connection) -> None:
        self._by_fd[conn.fileno()] = conn
        self._poller.register(conn.fileno(), select.POLLIN)
        self._alone[conn.fileno()] = alone = select.poll()
        alone.register(conn.fileno(), select.POLLIN)

    def remove(self, conn: Connection) -> None:
        """Before `conn` is closed."""
        fd = conn.fileno()
        if self._by_fd.pop(fd, None) is not None:
            self._poller.unregister(fd)
            del self._alone[fd]

    def wait(self, timeout: float | None) -> list[Connection]:
        """The channels with a message or closed, within `timeout` seconds (None: until
        one is)."""
        ms = None if timeout is None else max(0.0, timeout) * 1000.0
        return [self._by_fd[fd] for fd, _ in self._poller.poll(ms) if fd in self._by_fd]

    def more(self, conn: Connection) -> bool:
        """Whether `conn` (added) has another message (or is closed) now: `conn.poll(0)`
        without a selector built for the call."""
        return bool(self._alone[conn.fileno()].poll(0))


class WorkerSetup(NamedTuple):
    """What every worker loads once: the trainable and what its trials are told."""

    trainable: Any
    experiment_name: str
    reuse_actors: bool


# -- backend -> loop ---------------------------------------------------------------------
class Start(NamedTuple):
    """Run this attempt. `gpu_ids` are the devices it is given; `rlimit_as` the address
    space the worker lets it add (the local backend's "rlimit" memory mechanism)."""

    launch: TrialLaunch
    gpu_ids: tuple[str, ...] = ()
    rlimit_as: int | None = None


class Stop(NamedTuple):
    """Stop the attempt at its next report (or between reports, if it asks)."""

    trial_id: str
    epoch: int


class Decide(NamedTuple):
    """The scheduler's answer to a sync attempt's result: CONTINUE, PAUSE or STOP."""

    trial_id: str
    epoch: int
    decision: str


class Save(NamedTuple):
    """Checkpoint the attempt once its current step ends (``should_checkpoint`` set on
    the driver); a class trainable saves, a function trainable ignores it."""

    trial_id: str
    epoch: int


class Exit(NamedTuple):
    """End the loop once the running attempt (if any) has stopped."""


ToWorker = Start | Stop | Decide | Save | Exit


# -- loop -> backend ---------------------------------------------------------------------
class TrialResults(NamedTuple):
    """One or more results of the attempt, in order."""

    trial_id: str
    epoch: int
    items: list[ResultItem]


class TrialFinished(NamedTuple):
    """The attempt ended without error (see `Finished` for `how`)."""

    trial_id: str
    epoch: int
    how: FinishHow
    checkpoint: str | None


class TrialFailed(NamedTuple):
    """The attempt raised; `failure` says what (scrubbed of the trial's secrets)."""

    trial_id: str
    epoch: int
    failure: FailureRecord


TrialMessage = TrialResults | TrialFinished | TrialFailed


# -- a worker's own news -----------------------------------------------------------------
class Ready(NamedTuple):
    """A local worker process loaded the trainable; trials' clocks start now."""

    pid: int


class SetupFailed(NamedTuple):
    """A local worker could not load the trainable: every worker would fail alike."""

    failure: FailureRecord


class Gone(NamedTuple):
    """A Ray actor's loop ended (it was told to exit)."""


FromWorker = TrialResults | TrialFinished | TrialFailed | Ready | SetupFailed | Gone
