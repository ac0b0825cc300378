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


_CHUNK = 1 << 16  # bytes read at once: a trivial trial's messages fit many times over


class Readable:
    """The channels to wait on, kept registered between waits (`multiprocessing`'s `wait`
    builds and tears down a selector of every channel on each call), and read in as
    few system calls as their messages arrived in.

    `Connection.recv` costs two reads per message (its length, then its bytes) and a
    poll to learn whether another follows; `receive` reads whatever has arrived in one,
    and splits it into messages itself (the frames `Connection.send_bytes` writes). A
    channel added with its process's id is also woken by that process's exit (a
    ``pidfd``, Linux 5.3): no per-wait check of every process.
    """

    def __init__(self) -> None:
        self._poller = select.poll()
        self._by_fd: dict[int, Connection] = {}
        self._alone: dict[int, Any] = {}  # fd -> a poll object of that channel alone
        self._pidfds: dict[int, int] = {}  # channel fd -> its process's pidfd
        self._by_pidfd: dict[int, Connection] = {}
        self._ready: set[int] = set()  # channels the last wait found readable
        self._exited: set[int] = set()  # channels whose process has exited
        self.watches_exits = hasattr(os, "pidfd_open")  # else the caller checks processes

    def add(self, conn: Connection, pid: int | None = None) -> None:
        """Wait on `conn`; with `pid`, on that process's exit too (see `exited`)."""
        fd = conn.fileno()
        self._by_fd[fd] = conn
        self._poller.register(fd, select.POLLIN)
        self._alone[fd] = alone = select.poll()
        alone.register(fd, select.POLLIN)
        if pid is not None and self.watches_exits:
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:  # not allowed here (a seccomp filter), or the pid is gone
                self.watches_exits = False
                return
            self._pidfds[fd] = pidfd
            self._by_pidfd[pidfd] = conn
            self._poller.register(pidfd, select.POLLIN)

    def remove(self, conn: Connection) -> None:
        """Before `conn` is closed."""
        fd = conn.fileno()
        if self._by_fd.pop(fd, None) is not None:
            self._poller.unregister(fd)
            del self._alone[fd]
        self._ready.discard(fd)
        self._exited.discard(fd)
        pidfd = self._pidfds.pop(fd, None)
        if pidfd is not None:
            self._poller.unregister(pidfd)
            del self._by_pidfd[pidfd]
            os.close(pidfd)

    def wait(self, timeout: float | None) -> list[Connection]:
        """The channels with a message, closed, or whose process exited, within `timeout`
        seconds (None: until one is)."""
        ms = None if timeout is None else max(0.0, timeout) * 1000.0
        found: dict[int, Connection] = {}
        for fd, _ in self._poller.poll(ms):
            conn = self._by_fd.get(fd)
            if conn is not None:
                self._ready.add(fd)
                found[fd] = conn
                continue
            conn = self._by_pidfd.get(fd)
            if conn is not None:
                self._exited.add(conn.fileno())
                found[conn.fileno()] = conn
        return list(found.values())

    def receive(self, conn: Connection) -> list[Any]:
        """The messages that have arrived on `conn` (added), in order; [] when none has.

        Raises:
            EOFError: the channel is closed and nothing is left to read on it.
        """
        fd = conn.fileno()
        if fd in self._ready:
            self._ready.discard(fd)
        elif not self.more(conn):
            return []
        data = os.read(fd, _CHUNK)
        if not data:
            raise EOFError
        while len(data) % _CHUNK == 0 and self.more(conn):  # a full read: more may wait
            more = os.read(fd, _CHUNK)
            if not more:
                break
            data += more
        return _split(fd, data)

    def exited(self, conn: Connection) -> bool:
        """Whether `conn`'s process (added with its pid) has exited."""
        return conn.fileno() in self._exited

    def more(self, conn: Connection) -> bool:
        """Whether `conn` (added) has another message (or is closed) now: `conn.poll(0)`
        without a selector built for the call."""
        return bool(self._alone[conn.fileno()].poll(0))


def _split(fd: int, data: bytes) -> list[Any]:
    """The messages framed in `data` (read from `fd`), as `Connection.recv` reads them: a
    4-byte big-endian length (-1: an 8-byte one follows), then the pickle. A message
    whose end has not arrived yet is read to its end, as `recv` would; one cut short by
    the channel's end is dropped (its sender died writing it)."""
    buf = bytearray(data)
    out: list[Any] = []
    pos = 0
    while pos < len(buf):
        if not _have(fd, buf, pos + 4):
            break
        (size,) = struct.unpack_from("!i", buf, pos)
        start = pos + 4
        if size == -1:
            if not _have(fd, buf, pos + 12):
                break
            (size,) = struct.unpack_from("!Q", buf, start)
            start = pos + 12
        end = start + size
        if not _have(fd, buf, end):
            break
        with memoryview(buf) as view:  # released before `buf` grows again
            out.append(pickle.loads(view[start:end]))
        pos = end
    return out


def _have(fd: int, buf: bytearray, size: int) -> bool:
    """Read from `fd` into `buf` until it holds `size` bytes; False at the channel's end."""
    while len(buf) < size:
        more = os.read(fd, max(_CHUNK, size - len(buf)))
        if not more:
            return False
        buf += more
    return True


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
